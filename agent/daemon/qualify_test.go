package daemon_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// qualifyEnv is a whole back end with a scripted GPU "arc" (an upstream model server
// reporting no memory figures: the headroom limit is off), route "small" on it, and an
// admin's JWT for the admin API.
func qualifyEnv(t *testing.T) (env *stacktest.Env, cfg, admin string) {
	t.Helper()
	env = stacktest.New(t)
	cfg = filepath.Join(t.TempDir(), "gpu.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"devices": [{"name": "arc", "slots": 2,
		"backend": {"kind": "upstream", "url": "`+env.ModelURL+`"},
		"models": {"demo-model": {"context": 65536}},
		"qualify": {"minFreeMemoryMiB": 0, "timeout": "1m"}}]}`), 0o600))
	env.Settings.GPUConfig, env.Settings.GatewayAddr, env.Settings.GatewayKey = cfg, "127.0.0.1:0", "gateway-key-0123456789"
	_, err := schema.For[schema.ModelRoute](env.Store, schema.CollModelRoutes).Create(context.Background(), runconfig.RevisionDocID("small", 1), "",
		&schema.ModelRoute{RouteID: "small", Revision: 1, Alias: "small", Device: "arc", BackendModel: "demo-model", ContextBudget: 4096,
			MaxOutput: schema.Ptr(int64(32)), LocalOnly: true, Enabled: true})
	require.NoError(t, err)
	uid, jwt := env.SignUp(t, "qualify-admin@example.com", "password-admin")
	users := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey)))
	_, err = users.UpdateLabels(uid, []string{"admin"})
	require.NoError(t, err)
	return env, cfg, jwt
}

// askQualify asks the admin API to qualify route small; 202 expected.
func askQualify(t *testing.T, env *stacktest.Env, admin string) {
	t.Helper()
	res := env.Do(t, "POST", "/api/model-routes/small/qualify", admin, map[string]any{})
	require.Equal(t, 202, res.Status, string(res.Body))
}

// waitVerdict waits for route small's status to hold a verdict and returns it, failing
// on a status that is not state want.
func waitVerdict(t *testing.T, rdb *redis.Client, want string) map[string]string {
	t.Helper()
	key := runconfig.QualifyStatusKey("small")
	var st map[string]string
	require.Eventually(t, func() bool {
		st = rdb.HGetAll(context.Background(), key).Val()
		switch st["state"] {
		case runconfig.QualifyPassed, runconfig.QualifyFailed, runconfig.QualifyError:
			return true
		}
		return false
	}, 60*time.Second, 50*time.Millisecond, "%v", rdb.HGetAll(context.Background(), key).Val())
	require.Equal(t, want, st["state"], "%v", st)
	return st
}

// TestAgentQualifiesRoutes: an agent with a GPU file runs the qualifications the admin
// API queues for its devices (an asynq task on the device's queue, like any device job,
// listed by asynqmon) and records the verdict on a new revision of the route (the wiring;
// the measurements are agent/gpu's tests).
func TestAgentQualifiesRoutes(t *testing.T) {
	t.Parallel()
	env, _, admin := qualifyEnv(t)
	a := env.StartAgent(t)
	rdb := env.Redis.Client()
	defer rdb.Close()
	ctx := context.Background()
	require.Eventually(t, func() bool { return rdb.SIsMember(ctx, queue.GPUDevicesKey(), "arc").Val() }, 30*time.Second, 20*time.Millisecond)

	askQualify(t, env, admin)
	st := waitVerdict(t, rdb, runconfig.QualifyPassed)
	require.Equal(t, "2", st["recordedRevision"])
	rec, err := runconfig.LatestRoute(ctx, env.Store, "small")
	require.NoError(t, err)
	require.Equal(t, int64(2), rec.Revision)
	require.NoError(t, runconfig.CheckQualified(rec))
	q, err := runconfig.RouteQualification(rec)
	require.NoError(t, err)
	require.Equal(t, "upstream", q.Backend)
	require.Equal(t, 2, q.Concurrency)
	require.Equal(t, int64(131072), q.ContextServed)

	// asynqmon shows it like any other task of the device's queue.
	code, body := get(t, "http://"+a.Ops.Bound()+"/asynqmon/api/queues/"+url.PathEscape(queue.DeviceQueue("arc"))+"/completed_tasks", "admin", env.Settings.OpsPassword)
	require.Equal(t, 200, code, body)
	require.Contains(t, body, queue.QualifyTaskID("small", 1))
	require.Contains(t, body, queue.TypeQualify)
}

// holdingProxy stands between a child agent and Appwrite and holds (does not answer)
// the reads of route small's revisions while armed: what a qualification's handler does
// right after asynq handed it the task and before its first status write.
type holdingProxy struct {
	*httptest.Server
	mu      sync.Mutex
	armed   bool
	held    chan struct{} // closed at the first held request
	release chan struct{} // closed to let held requests through
}

func newHoldingProxy(t *testing.T, target string) *holdingProxy {
	u, err := url.Parse(target)
	require.NoError(t, err)
	p := &holdingProxy{held: make(chan struct{}), release: make(chan struct{})}
	rp := httputil.NewSingleHostReverseProxy(u)
	var once sync.Once
	p.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.mu.Lock()
		hold := p.armed && r.Method == "GET" && strings.Contains(r.URL.Path, "/collections/"+schema.CollModelRoutes+"/documents") &&
			strings.Contains(r.URL.RawQuery, "small")
		p.mu.Unlock()
		if hold {
			once.Do(func() { close(p.held) })
			select {
			case <-p.release:
			case <-r.Context().Done():
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.Close)
	return p
}

func (p *holdingProxy) arm(on bool) {
	p.mu.Lock()
	p.armed = on
	p.mu.Unlock()
}

// TestAQualificationCutOffByAKillRunsToItsVerdict (issue 31 item 3): the agent (a child
// process) is killed with SIGKILL after asynq handed it a qualification and before the
// task's first status write (its handler is reading the route from Appwrite, held by a
// proxy). The status still says "queued" and the task is asynq's, active under the dead
// agent's lease. When the lease has run out (moved to the past here instead of waiting
// the minute asynq's recoverer allows for clock skew), the restarted agent's recoverer
// hands the task out again and it runs to its verdict, recorded on a new revision; the
// status then says passed, never "queued" or "running" for good. The admin API can ask
// again afterwards, and that one runs too.
func TestAQualificationCutOffByAKillRunsToItsVerdict(t *testing.T) {
	t.Parallel()
	env, cfg, admin := qualifyEnv(t)
	bin := buildAgent(t)
	proxy := newHoldingProxy(t, env.TS.URL)
	rdb := env.Redis.Client()
	defer rdb.Close()
	ctx := context.Background()

	var mu sync.Mutex
	var cur *exec.Cmd
	start := func() {
		cmd := exec.Command(bin)
		cmd.Env = append(agentEnv(env), "APPWRITE_ENDPOINT="+proxy.URL, "PA_GPU_CONFIG="+cfg,
			"PA_GATEWAY_ADDR=127.0.0.1:0", "PA_GATEWAY_API_KEY=gateway-key-0123456789")
		cmd.Dir = t.TempDir()
		require.NoError(t, cmd.Start())
		mu.Lock()
		cur = cmd
		mu.Unlock()
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if cur != nil && cur.Process != nil {
			_ = cur.Process.Kill()
			_ = cur.Wait()
		}
	})
	start()
	require.Eventually(t, func() bool { return rdb.SIsMember(ctx, queue.GPUDevicesKey(), "arc").Val() }, 60*time.Second, 20*time.Millisecond)

	proxy.arm(true)
	askQualify(t, env, admin)
	select {
	case <-proxy.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not take the qualification")
	}
	insp := asynq.NewInspectorFromRedisClient(rdb)
	qname, id := queue.DeviceQueue("arc"), queue.QualifyTaskID("small", 1)
	ti, err := insp.GetTaskInfo(qname, id)
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateActive, ti.State, "asynq handed the task out")
	require.Equal(t, runconfig.QualifyQueued, rdb.HGet(ctx, runconfig.QualifyStatusKey("small"), "state").Val(), "before the first status write")
	mu.Lock()
	require.NoError(t, cur.Process.Kill()) // SIGKILL: no cleanup at all
	_ = cur.Wait()
	mu.Unlock()
	proxy.arm(false)
	close(proxy.release)

	// The dead agent's lease on the task runs out (asynq's recoverer takes a task 30 s
	// after its lease ended, and passes every minute): moved to the past, not waited for.
	require.NoError(t, rdb.ZAdd(ctx, "asynq:{"+qname+"}:lease", redis.Z{Score: float64(time.Now().Add(-2 * time.Minute).Unix()), Member: id}).Err())
	start()
	st := waitVerdict(t, rdb, runconfig.QualifyPassed)
	require.Equal(t, "2", st["recordedRevision"])
	rec, err := runconfig.LatestRoute(ctx, env.Store, "small")
	require.NoError(t, err)
	require.NoError(t, runconfig.CheckQualified(rec))
	ti, err = insp.GetTaskInfo(qname, id)
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStateCompleted, ti.State)
	require.Equal(t, 1, ti.Retried, "one delivery lost with the killed agent")

	// Asked again: the next revision's qualification runs like the first.
	askQualify(t, env, admin)
	st = waitVerdict(t, rdb, runconfig.QualifyPassed)
	require.Equal(t, "3", st["recordedRevision"])
}

// TestAQualificationAbortedByShutdownStartsAgain: an agent shut down while its handler
// works on a qualification (here: reading the route, held by a proxy) says so on the
// status in words, and the task goes back to asynq without using its retry budget; the
// next agent runs it to its verdict.
func TestAQualificationAbortedByShutdownStartsAgain(t *testing.T) {
	t.Parallel()
	env, _, admin := qualifyEnv(t)
	proxy := newHoldingProxy(t, env.TS.URL)
	// Appwrite calls do not end with their context: the held one ends with its timeout.
	env.Settings.AppwriteEndpoint, env.Settings.HTTPTimeout = proxy.URL, 3*time.Second
	rdb := env.Redis.Client()
	defer rdb.Close()
	ctx := context.Background()
	a := env.StartAgent(t)
	require.Eventually(t, func() bool { return rdb.SIsMember(ctx, queue.GPUDevicesKey(), "arc").Val() }, 30*time.Second, 20*time.Millisecond)

	proxy.arm(true)
	askQualify(t, env, admin)
	select {
	case <-proxy.held:
	case <-time.After(30 * time.Second):
		t.Fatal("the agent did not take the qualification")
	}
	a.Shutdown()
	st := rdb.HGetAll(ctx, runconfig.QualifyStatusKey("small")).Val()
	require.Equal(t, runconfig.QualifyWaiting, st["state"], "%v", st)
	require.Equal(t, runconfig.QualifyCutOff, st["reason"])
	insp := asynq.NewInspectorFromRedisClient(rdb)
	ti, err := insp.GetTaskInfo(queue.DeviceQueue("arc"), queue.QualifyTaskID("small", 1))
	require.NoError(t, err)
	require.NotEqual(t, asynq.TaskStateActive, ti.State, "back to asynq")
	require.Zero(t, ti.Retried, "an abort uses no retry")

	proxy.arm(false)
	env.StartAgent(t)
	waitVerdict(t, rdb, runconfig.QualifyPassed)
	ti, err = insp.GetTaskInfo(queue.DeviceQueue("arc"), queue.QualifyTaskID("small", 1))
	require.NoError(t, err)
	require.Zero(t, ti.Retried)
}
