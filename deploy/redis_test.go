package deploy_test

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/daemon"
	"privateassistant/functions/service"
	"privateassistant/longpoll"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/runconfig"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// Test passwords of the users in deploy/redis-users.acl.
var aclPasswords = map[string]string{
	"FUNCTIONS": "functions-password-0123456789abcdef",
	"AGENT":     "agent-password-0123456789abcdef",
	"REPLICA":   "replica-password-0123456789abcdef",
	"SENTINEL":  "sentinel-password-0123456789abcdef",
	"STREAM":    "stream-password-0123456789abcdef",
}

// shippedACL reads deploy/redis-users.acl as an operator installs it: each
// "#SHA256-OF-THE-X-PASSWORD" placeholder replaced by the SHA-256 of X's password.
func shippedACL(t *testing.T) []string {
	t.Helper()
	f, err := os.Open("redis-users.acl")
	require.NoError(t, err)
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		for who, pw := range aclPasswords {
			sum := sha256.Sum256([]byte(pw))
			line = strings.ReplaceAll(line, "#SHA256-OF-THE-"+who+"-PASSWORD", "#"+hex.EncodeToString(sum[:]))
		}
		require.NotContains(t, line, "SHA256-OF", "a placeholder without a test password")
		out = append(out, line)
	}
	require.NoError(t, sc.Err())
	return out
}

// secureRedis is the queue Redis as deploy/redis.conf runs it: TLS only, the shipped ACL.
func secureRedis(t *testing.T) *redistest.Server {
	return redistest.Start(t, redistest.Options{TLS: true, ACL: shippedACL(t), AppendOnly: true})
}

// useSecureRedis points the functions (CA given as PEM, password as a value, as Appwrite
// project variables hold them) and the agent (CA file, password by file reference, as
// deploy/agent.env.example has it) at r with their own users.
func useSecureRedis(t *testing.T, r *redistest.Server) stacktest.Options {
	pwFile := filepath.Join(t.TempDir(), "redis-agent.pass")
	require.NoError(t, os.WriteFile(pwFile, []byte(aclPasswords["AGENT"]+"\n"), 0o600))
	return stacktest.Options{
		ChatHarness: "hermes",
		Functions: func(c *service.Config) {
			c.RedisAddr, c.RedisUsername, c.RedisPassword = r.Addr, "pa-functions", aclPasswords["FUNCTIONS"]
			c.RedisSecurity = queue.RedisSecurity{TLS: true, CA: string(r.CA)}
		},
		Settings: func(s *daemon.Settings) {
			s.RedisAddr, s.RedisUsername, s.RedisPassword = r.Addr, "pa-agent", ""
			s.RedisSecurity = queue.RedisSecurity{TLS: true, CA: r.CAFile, PasswordRef: "file:" + pwFile}
		},
	}
}

// TestFunctionsAndAgentWorkThroughTLSAndACL: with only the shipped ACL users over TLS,
// a chat turn streams and completes, a coding job asks for approval and is approved, a
// queued run is cancelled by the function (which deletes its task and settles it), and
// /api/system reads the devices.
func TestFunctionsAndAgentWorkThroughTLSAndACL(t *testing.T) {
	t.Parallel()
	r := secureRedis(t)
	env := stacktest.New(t, useSecureRedis(t, r))
	_, jwt := env.SignUp(t, "tls@example.com", "password-tls")
	conv := env.Conversation(t, jwt)

	// Before any agent: cancelling a queued run is the function's alone.
	q := env.Admit(t, jwt, conv, "queued", "never mind", "")
	res := env.Do(t, "POST", "/api/runs/"+q.RunID+"/cancel", jwt, nil)
	require.Equal(t, 202, res.Status, string(res.Body))
	_, status := env.Follow(t, jwt, q.RunID, 30*time.Second, nil)
	require.Equal(t, "cancelled", status)

	env.StartAgent(t)
	a := env.Admit(t, jwt, conv, "q1", "hello over tls", "")
	_, status = env.Follow(t, jwt, a.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)

	b := env.Admit(t, jwt, conv, "tool", "please run #tool", "coding")
	evs, status := env.Follow(t, jwt, b.RunID, 30*time.Second, func(ev queue.Event) bool {
		if ev.Type == queue.EventApprovalRequest {
			var d struct{ RequestID string }
			require.NoError(t, jsonUnmarshal(ev.Data, &d))
			res := env.Do(t, "POST", "/api/runs/"+b.RunID+"/approval", jwt, map[string]any{"requestId": d.RequestID, "choice": "once"})
			require.Equal(t, 202, res.Status, string(res.Body))
		}
		return true
	})
	require.Equal(t, "completed", status)
	var sawTool bool
	for _, ev := range evs {
		sawTool = sawTool || ev.Type == queue.EventToolCompleted
	}
	require.True(t, sawTool, "the approved tool ran")

	res = env.Do(t, "GET", "/api/system", jwt, nil)
	require.Equal(t, 200, res.Status, string(res.Body))

	// The agent's own keys exist, and the functions' user cannot read them (below).
	admin := r.Client()
	defer admin.Close()
	require.EqualValues(t, 1, admin.Exists(context.Background(), queue.StateKey(a.RunID)).Val())

	// Deleting the conversation lists its runs for purging (the functions' user may write
	// that one key), and the agent's retention sweep purges their events.
	res = env.Do(t, "DELETE", "/api/conversations/"+conv, jwt, nil)
	require.Equal(t, 204, res.Status, string(res.Body))
	require.Eventually(t, func() bool {
		_, _ = env.Agent.Expirer.Once(context.Background())
		return admin.Exists(context.Background(), queue.PurgeRunsKey).Val() == 0 && admin.Exists(context.Background(), queue.EventsKey(a.RunID)).Val() == 0
	}, 30*time.Second, 100*time.Millisecond, "the deleted conversation's runs are purged")
}

// TestRedisACLRefusesWhatAComponentMustNotDo: the functions' user cannot run FLUSHALL,
// CONFIG, KEYS, CLIENT LIST/KILL or MIGRATE, nor read or write the agent's own keys; neither user can run
// admin commands; nobody gets in without a user or without TLS.
func TestRedisACLRefusesWhatAComponentMustNotDo(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := secureRedis(t)
	admin := r.Client()
	defer admin.Close()
	agentOnly := []string{"pa:run:{r1}:lease", "pa:run:{r1}:nativeseq", "pa:run:{r1}:gateway", "pa:run:{r1}:backoff",
		"pa:run:{r1}:requeues", "pa:gpu:{xtx}:control", "pa:gpu:{xtx}:gen", "pa:immich:{gpu1:xtx}:paused", "pa:retention:tasks"}
	for _, k := range agentOnly {
		require.NoError(t, admin.Set(ctx, k, "secret", 0).Err())
	}

	fn := r.ClientAs("pa-functions", aclPasswords["FUNCTIONS"])
	defer fn.Close()
	ag := r.ClientAs("pa-agent", aclPasswords["AGENT"])
	defer ag.Close()
	require.NoError(t, fn.Ping(ctx).Err())
	require.NoError(t, ag.Ping(ctx).Err())

	noperm := func(err error, what string) {
		t.Helper()
		require.Error(t, err, what)
		// A script's own redis.call answers with its own wording.
		require.True(t, strings.Contains(err.Error(), "NOPERM") || strings.Contains(err.Error(), "can't access"), "%s: %v", what, err)
	}
	for _, c := range []*redis.Client{fn, ag} {
		noperm(c.FlushAll(ctx).Err(), "FLUSHALL")
		noperm(c.FlushDB(ctx).Err(), "FLUSHDB")
		noperm(c.ConfigGet(ctx, "*").Err(), "CONFIG GET")
		noperm(c.ConfigSet(ctx, "appendonly", "no").Err(), "CONFIG SET")
		noperm(c.Keys(ctx, "*").Err(), "KEYS")
		noperm(c.Do(ctx, "CLIENT", "LIST").Err(), "CLIENT LIST")
		noperm(c.Do(ctx, "CLIENT", "KILL", "TYPE", "normal").Err(), "CLIENT KILL")
		noperm(c.Do(ctx, "MIGRATE", "127.0.0.1", "1", "k", "0", "100").Err(), "MIGRATE")
		noperm(c.Do(ctx, "ACL", "LIST").Err(), "ACL LIST")
		noperm(c.Do(ctx, "SHUTDOWN", "NOSAVE").Err(), "SHUTDOWN")
		noperm(c.Do(ctx, "REPLICAOF", "127.0.0.1", "1").Err(), "REPLICAOF")
	}
	for _, k := range agentOnly {
		noperm(fn.Get(ctx, k).Err(), "GET "+k)
		noperm(fn.Set(ctx, k, "x", 0).Err(), "SET "+k)
		noperm(fn.Del(ctx, k).Err(), "DEL "+k)
		require.Equal(t, "secret", ag.Get(ctx, k).Val(), "the agent reads its own "+k)
	}
	// Not even from inside a script.
	noperm(fn.Eval(ctx, "return redis.call('GET', KEYS[1])", []string{"pa:run:{r1}:lease"}).Err(), "EVAL GET lease")
	noperm(fn.Eval(ctx, "return redis.call('GET', 'pa:run:{r1}:lease')", []string{"pa:run:{r1}:state"}).Err(), "EVAL undeclared key")
	// The issuer's private keys are the agents' alone; the functions only read the public set.
	require.NoError(t, admin.HSet(ctx, queue.IssuerKeysKey, "k1", `{"jwk":"private"}`).Err())
	require.NoError(t, admin.Set(ctx, queue.IssuerJWKSKey, `{"keys":[]}`, 0).Err())
	noperm(fn.HGetAll(ctx, queue.IssuerKeysKey).Err(), "HGETALL issuer keys")
	noperm(fn.HGet(ctx, queue.IssuerKeysKey, "k1").Err(), "HGET issuer key")
	require.Equal(t, `{"keys":[]}`, fn.Get(ctx, queue.IssuerJWKSKey).Val())
	noperm(fn.Set(ctx, queue.IssuerJWKSKey, `{"keys":["forged"]}`, 0).Err(), "SET the public key set")
	require.Equal(t, `{"jwk":"private"}`, ag.HGet(ctx, queue.IssuerKeysKey, "k1").Val())
	// Device heartbeats are read-only to the functions; an operator's confirmation is theirs to write.
	require.NoError(t, admin.HSet(ctx, queue.GPUKey("xtx"), "state", "ready").Err())
	require.Equal(t, "ready", fn.HGet(ctx, queue.GPUKey("xtx"), "state").Val())
	noperm(fn.HSet(ctx, queue.GPUKey("xtx"), "state", "forged").Err(), "HSET device heartbeat")
	require.NoError(t, fn.Set(ctx, queue.GPUKey("xtx")+":confirm", "now", time.Minute).Err())
	// A route qualification request for the device's agent (an asynq task on its queue,
	// asked again once the earlier one finished), and its status.
	qt := queue.QualifyTask{RequestID: "q1", Route: "work", RouteRevision: 1, Device: "xtx", RequestedAt: time.Now()}
	fnq := asynq.NewClientFromRedisClient(fn)
	created, err := queue.NewEnqueuer(fnq).EnqueueQualify(ctx, qt)
	require.NoError(t, err)
	require.True(t, created)
	require.NoError(t, asynq.NewInspectorFromRedisClient(fn).DeleteTask(queue.DeviceQueue("xtx"), queue.QualifyTaskID("work", 1)))
	ok, err := runconfig.WriteQualifyStatus(ctx, fn, qt, "state", "queued")
	require.NoError(t, err)
	require.True(t, ok)
	// Readiness records (queue/alive.go) are the agents' and the stream service's to
	// write, the functions' to read (/api/system).
	require.NoError(t, queue.Beat(ctx, ag, queue.AgentsReadyKey(), "a1", time.Now()))
	require.NoError(t, ag.Set(ctx, queue.AgentReadyKey("a1"), `{"ready":true}`, time.Minute).Err())
	_, err = queue.LastBeat(ctx, fn, queue.AgentsReadyKey(), time.Now())
	require.NoError(t, err)
	require.Equal(t, `{"ready":true}`, fn.Get(ctx, queue.AgentReadyKey("a1")).Val())
	noperm(fn.Set(ctx, queue.AgentReadyKey("a1"), `{"ready":false}`, time.Minute).Err(), "SET an agent's readiness")
	noperm(queue.Beat(ctx, fn, queue.StreamAliveKey(), "forged", time.Now()), "ZADD the stream heartbeat")
	// Keys outside the layout are nobody's.
	noperm(fn.Set(ctx, "other", "x", 0).Err(), "SET other")
	noperm(ag.Set(ctx, "other", "x", 0).Err(), "SET other (agent)")

	// The replica and Sentinel users can do only their part.
	rep := r.ClientAs("pa-replica", aclPasswords["REPLICA"])
	defer rep.Close()
	noperm(rep.Get(ctx, queue.StateKey("r1")).Err(), "replica GET")
	sen := r.ClientAs("pa-sentinel", aclPasswords["SENTINEL"])
	defer sen.Close()
	noperm(sen.Get(ctx, queue.StateKey("r1")).Err(), "sentinel GET")

	// The default user is off; a wrong password and a plaintext client get nothing.
	anon := r.ClientAs("", "")
	defer anon.Close()
	require.Error(t, anon.Get(ctx, queue.StateKey("r1")).Err())
	wrong := r.ClientAs("pa-agent", "not-the-password")
	defer wrong.Close()
	require.ErrorContains(t, wrong.Ping(ctx).Err(), "WRONGPASS")
	plain := redis.NewClient(&redis.Options{Addr: r.Addr, Username: "pa-agent", Password: aclPasswords["AGENT"],
		MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer plain.Close()
	require.Error(t, plain.Ping(ctx).Err())
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }

// TestRuntimeAPIUnderTheFunctionsACL: the runtime API's Redis work (runtimeapi:
// the per-key rate window script, the app-user cache) runs as the functions' user under the
// shipped ACL over TLS. Before pa:rt:* was in the ACL every runtime call failed on its
// rate limit with NOPERM.
func TestRuntimeAPIUnderTheFunctionsACL(t *testing.T) {
	t.Parallel()
	r := secureRedis(t)
	ctx := context.Background()
	fn, err := queue.RedisConn{Addr: r.Addr, Username: "pa-functions", Password: aclPasswords["FUNCTIONS"], RedisSecurity: queue.RedisSecurity{TLS: true, CA: string(r.CA)}}.NewClient(queue.RedisTuning{})
	require.NoError(t, err)
	defer fn.Close()

	key := &schema.RuntimeKey{Meta: schema.Meta{ID: "k1"}, AppID: "homeauto", RateLimit: 1, RateWindowMs: 60_000}
	wait, err := runtimeapi.Limit(ctx, fn, key, time.Now())
	require.NoError(t, err, "the rate window runs as pa-functions")
	require.Zero(t, wait)
	wait, err = runtimeapi.Limit(ctx, fn, key, time.Now())
	require.NoError(t, err)
	require.Positive(t, wait, "the second call in the window waits")

	// The app-user cache (users.go: GET/SET pa:rt:user:<id>), checked with ACL DRYRUN.
	admin := r.Client()
	defer admin.Close()
	// … and forgetting an app user lists them for every agent to delete their Hermes home
	// (rtforget.go: ZADD pa:purge:homes).
	for _, cmd := range [][]any{{"GET", "pa:rt:user:u1"}, {"SET", "pa:rt:user:u1", "apphomeauto", "EX", "60"},
		{"ZADD", queue.PurgeHomesKey, "1", "apphomeauto-gabe"}} {
		res, err := admin.Do(ctx, append([]any{"ACL", "DRYRUN", "pa-functions"}, cmd...)...).Text()
		require.NoError(t, err)
		require.Equal(t, "OK", res, "%v", cmd)
	}
}

// TestStreamServiceUnderItsACL: the stream service's reads (a run's snapshot and live
// events through the longpoll hub, the change feed, the owner keys) work as pa-stream
// over TLS under the shipped ACL, and the user can write nothing but its hub's wake-up
// streams.
func TestStreamServiceUnderItsACL(t *testing.T) {
	t.Parallel()
	r := secureRedis(t)
	ctx := context.Background()
	admin := r.Client()
	defer admin.Close()
	sc, err := queue.RedisConn{Addr: r.Addr, Username: "pa-stream", Password: aclPasswords["STREAM"], RedisSecurity: queue.RedisSecurity{TLS: true, CA: string(r.CA)}}.NewClient(queue.RedisTuning{})
	require.NoError(t, err)
	defer sc.Close()

	ev := func(seq int64) queue.Event {
		return queue.Event{Sequence: seq, Type: queue.EventMessageDelta, Data: []byte(`{}`), At: time.Now()}
	}
	require.NoError(t, queue.AppendEvent(ctx, admin, "r1", ev(1)))
	require.NoError(t, queue.SetRunState(ctx, admin, "r1", queue.RunState{Status: "running", HeartbeatAt: time.Now(), LastSequence: 1}))
	require.NoError(t, admin.Set(ctx, queue.RunOwnerKey("r1"), "u1", 0).Err())
	require.NoError(t, admin.Set(ctx, queue.ConvOwnerKey("c1"), "u1", 0).Err())
	_, err = longpoll.PublishFeed(ctx, admin, "u1", "conversation.created", map[string]string{"id": "c1"})
	require.NoError(t, err)
	require.Equal(t, "u1", sc.Get(ctx, queue.RunOwnerKey("r1")).Val())
	require.Equal(t, "u1", sc.Get(ctx, queue.ConvOwnerKey("c1")).Val())

	hub := &longpoll.Hub{Base: sc.Options(), Readers: 1, Block: 30 * time.Second}
	require.NoError(t, hub.Start(ctx))
	defer hub.Stop()
	p := &longpoll.Poller{Hub: hub}
	b, err := p.Poll(ctx, nil, longpoll.Run{ID: "r1", Owner: "u1"}, 0, time.Second)
	require.NoError(t, err, "snapshot: XRANGE and HGETALL")
	require.Equal(t, 1, b.Len())
	fb, err := hub.WaitFeed(ctx, "u1", 0, time.Second)
	require.NoError(t, err, "feed: XRANGE and GET")
	require.Len(t, fb.Events, 1)

	// Live: r1 is being read when r2's follower registers, so the reader must be woken
	// (XADD to its wake stream) to take r2; the read blocks 30 s, so a refused wake-up
	// would miss the 5 s bound below.
	require.NoError(t, queue.SetRunState(ctx, admin, "r2", queue.RunState{Status: "running", HeartbeatAt: time.Now()}))
	got := make(chan longpoll.Batch, 2)
	for _, run := range []string{"r1", "r2"} {
		go func() {
			b, err := p.Poll(ctx, nil, longpoll.Run{ID: run, Owner: "u1"}, map[string]int64{"r1": 1, "r2": 0}[run], 10*time.Second)
			if err != nil {
				b = longpoll.Batch{Status: err.Error()}
			}
			got <- b
		}()
		require.Eventually(t, func() bool { return hub.Follows() >= map[string]int{"r1": 1, "r2": 2}[run] }, 5*time.Second, time.Millisecond)
	}
	time.Sleep(50 * time.Millisecond) // let the reader take r2 into its read
	require.NoError(t, queue.AppendEvent(ctx, admin, "r2", ev(1)))
	select {
	case b := <-got:
		require.Equal(t, 1, b.Len(), b.Status)
	case <-time.After(5 * time.Second):
		t.Fatal("the reader was not woken to watch r2 (wake-up refused?)")
	}
	require.NoError(t, queue.AppendEvent(ctx, admin, "r1", ev(2)))
	require.Equal(t, 1, (<-got).Len())

	// The system panel (service.SystemReader without an inspector, as the stream service
	// reads it): a device's heartbeat, a route's qualification progress, a device queue
	// with a running and a pending task.
	require.NoError(t, admin.SAdd(ctx, queue.GPUDevicesKey(), "arc").Err())
	require.NoError(t, admin.HSet(ctx, queue.GPUKey("arc"), "host", "h1", "state", "busy", "heartbeatAt", time.Now().UTC().Format(time.RFC3339Nano)).Err())
	require.NoError(t, admin.HSet(ctx, runconfig.QualifyStatusKey("chat"), "state", "running").Err())
	require.NoError(t, admin.SAdd(ctx, "asynq:queues", "gpu:arc").Err())
	require.NoError(t, admin.LPush(ctx, "asynq:{gpu:arc}:active", "r1").Err())
	require.NoError(t, admin.LPush(ctx, "asynq:{gpu:arc}:pending", "r2").Err())
	require.NoError(t, admin.HSet(ctx, "asynq:{gpu:arc}:t:r2", "pending_since", time.Now().UnixNano()).Err())
	sys := service.SystemReader{RDB: sc, Stale: time.Minute}
	devs := sys.Devices(ctx, time.Now(), nil)
	require.Len(t, devs, 1)
	require.Equal(t, "busy", devs[0].State)
	qs, err := sys.Queues(ctx)
	require.NoError(t, err, "the device queues with read commands")
	require.Equal(t, []service.QueueView{{Name: "gpu:arc", Pending: 1, Active: 1, LatencyMs: qs[0].LatencyMs}}, qs)
	routes := sys.Routes(ctx, []schema.ModelRoute{{RouteID: "chat", Revision: 1, Device: "arc"}})
	require.Equal(t, "running", routes[0].Request["state"], "a route's qualification progress")

	noperm := func(err error, what string) {
		t.Helper()
		require.Error(t, err, what)
		require.Contains(t, err.Error(), "NOPERM", what)
	}
	// Its heartbeat (stream/alive.go): beat, read back, removed on stop.
	require.NoError(t, queue.Beat(ctx, sc, queue.StreamAliveKey(), "s1", time.Now()))
	_, err = queue.StreamAlive(ctx, admin, time.Now())
	require.NoError(t, err)
	require.NoError(t, sc.ZRem(ctx, queue.StreamAliveKey(), "s1").Err())
	noperm(queue.Beat(ctx, sc, queue.AgentsReadyKey(), "forged", time.Now()), "ZADD an agent's readiness")
	noperm(sc.Set(ctx, queue.RunOwnerKey("r1"), "u2", 0).Err(), "SET owner")
	noperm(sc.HSet(ctx, queue.StateKey("r1"), "status", "completed").Err(), "HSET state")
	noperm(sc.XAdd(ctx, &redis.XAddArgs{Stream: queue.EventsKey("r1"), Values: []any{"e", "{}"}}).Err(), "XADD events")
	noperm(sc.Del(ctx, queue.EventsKey("r1")).Err(), "DEL events")
	noperm(sc.XAdd(ctx, &redis.XAddArgs{Stream: queue.ControlKey("r1"), Values: []any{"c", "{}"}}).Err(), "XADD control")
	noperm(sc.Get(ctx, "pa:run:{r1}:lease").Err(), "GET lease")
	noperm(sc.Get(ctx, "pa:rt:rate:k1:1").Err(), "GET rate")
	noperm(sc.LPush(ctx, "asynq:{gpu:arc}:pending", "x").Err(), "asynq write")
	noperm(sc.SAdd(ctx, queue.GPUDevicesKey(), "x").Err(), "SADD devices")
	noperm(sc.HSet(ctx, queue.GPUKey("arc"), "state", "idle").Err(), "HSET heartbeat")
	noperm(sc.Eval(ctx, "return 1", nil).Err(), "EVAL")
	noperm(sc.Keys(ctx, "*").Err(), "KEYS")
	noperm(sc.FlushAll(ctx).Err(), "FLUSHALL")
	noperm(sc.Publish(ctx, "asynq:cancel", "x").Err(), "PUBLISH")
}
