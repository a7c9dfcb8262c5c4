package gpu

import (
	"context"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/functions/service"
	"privateassistant/queue"
	"privateassistant/runconfig"
)

// TestQualificationGate walks issue 20 end to end through the real admin API (the
// functions on the Appwrite emulator and a real Redis) and this agent's Qualifier on the
// scripted device: a route on a managed GPU cannot be selected until it is qualified; the
// qualification queues, runs, and is recorded on a new revision (the gate then passes,
// /api/system shows the figures); a new budget invalidates it; a device that overheats
// records a failed one, whose reason the gate names.
func TestQualificationGate(t *testing.T) {
	env := functionstest.New(t, functionstest.Options{Mutate: func(c *service.Config) { c.KnownDevices = []string{"arc", "xtx"} }})
	uid, admin := env.SignUp(t, "qualify-admin@example.com", "password-admin")
	users := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey)))
	_, err := users.UpdateLabels(uid, []string{"admin"})
	require.NoError(t, err)
	rdb := env.Redis.Client()
	defer rdb.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// The agent's side: the scripted device on "xtx", published (so the device is managed).
	r := newQualifyRig(t, 2, nil, "xtx")
	m := r.m
	require.NoError(t, (&Publisher{RDB: rdb, Store: env.Store, Host: "h", Manager: m}).Publish(ctx, time.Now()))
	q := &Qualifier{RDB: rdb, Store: env.Store, Pool: Pool{"xtx": m}}

	route := func(rev int64, budget int64) {
		res := env.Do(t, "POST", "/api/model-routes", admin, map[string]any{"input": map[string]any{"routeId": "gpuwork", "alias": "gpuwork",
			"device": "xtx", "backendModel": "q-model", "contextBudget": budget, "maxOutput": 100}, "expectedRevision": rev})
		require.Equal(t, 201, res.Status, string(res.Body))
	}
	selectRoute := func(rev int64) functionstest.Response {
		return env.Do(t, "PUT", "/api/harness-selection", admin, map[string]any{"expectedRevision": 1, "preview": true, "roles": map[string]any{
			"chat":     map[string]any{"harness": "direct", "harnessRevision": 1, "route": "chat", "routeRevision": 1, "tools": []string{}},
			"research": map[string]any{"harness": "direct", "harnessRevision": 1, "route": "gpuwork", "routeRevision": rev, "tools": []string{}}}})
	}
	qualify := func() map[string]string {
		res := env.Do(t, "POST", "/api/model-routes/gpuwork/qualify", admin, map[string]any{})
		require.Equal(t, 202, res.Status, string(res.Body))
		require.Contains(t, string(res.Body), "queued: the agent of xtx qualifies the route when no user's job holds the device")
		res = env.Do(t, "POST", "/api/model-routes/gpuwork/qualify", admin, map[string]any{})
		require.Equal(t, 409, res.Status, "one at a time: %s", res.Body)
		require.Equal(t, "qualification_in_progress", res.ErrorCode())
		serveQualifications(t, rdb, q, "xtx", "gpuwork")
		var v RouteQualView
		res = env.Do(t, "GET", "/api/model-routes/gpuwork/qualification", admin, nil)
		require.Equal(t, 200, res.Status, string(res.Body))
		res.JSON(t, &v)
		return v.Request
	}

	route(0, 4096)
	res := selectRoute(1)
	require.Equal(t, 400, res.Status, string(res.Body))
	require.Equal(t, "route_unqualified", res.ErrorCode())
	require.Contains(t, string(res.Body), "route gpuwork revision 1 has never been qualified on xtx (pa admin gpu qualify gpuwork)")
	require.Equal(t, 200, env.Do(t, "PUT", "/api/harness-selection", admin, map[string]any{"expectedRevision": 1, "preview": true, "roles": map[string]any{
		"chat": map[string]any{"harness": "direct", "harnessRevision": 1, "route": "chat", "routeRevision": 1, "tools": []string{}}}}).Status,
		"a route on a device no agent manages (arc) is not gated")

	st := qualify()
	require.Equal(t, runconfig.QualifyPassed, st["state"], "%v", st)
	require.Equal(t, "2", st["recordedRevision"])
	require.Contains(t, st["reason"], "passed: 8192 tokens of context served")
	rec, err := runconfig.LatestRoute(ctx, env.Store, "gpuwork")
	require.NoError(t, err)
	require.Equal(t, int64(2), rec.Revision)
	require.Equal(t, uid, *rec.CreatedBy, "recorded for the admin who asked")
	got, err := runconfig.RouteQualification(rec)
	require.NoError(t, err)
	require.True(t, got.Passed)
	require.Equal(t, int64(1), got.RouteRevision)
	require.Equal(t, 2, got.Concurrency)
	require.Positive(t, got.VRAMFullBytes)
	require.Positive(t, got.PeakTempC)

	require.Equal(t, 400, selectRoute(1).Status, "revision 1 stays unqualified")
	res = selectRoute(2)
	require.Equal(t, 200, res.Status, string(res.Body))

	var sys struct {
		Routes []RouteQualView
	}
	res = env.Do(t, "GET", "/api/system", admin, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	res.JSON(t, &sys)
	var shown *RouteQualView
	for i := range sys.Routes {
		if sys.Routes[i].Route == "gpuwork" {
			shown = &sys.Routes[i]
		}
	}
	require.NotNil(t, shown, "%s", res.Body)
	require.True(t, shown.Qualified)
	require.Equal(t, int64(8192), shown.Last.ContextServed)
	require.Contains(t, shown.Summary, "passed")

	// A new budget invalidates it (the admin is warned when committing).
	res = env.Do(t, "POST", "/api/model-routes", admin, map[string]any{"input": map[string]any{"routeId": "gpuwork", "alias": "gpuwork",
		"device": "xtx", "backendModel": "q-model", "contextBudget": 8192, "maxOutput": 100}, "preview": true})
	require.Contains(t, string(res.Body), "invalidates the route's GPU qualification")
	route(2, 8192)
	res = selectRoute(3)
	require.Equal(t, "route_unqualified", res.ErrorCode(), string(res.Body))
	require.Contains(t, string(res.Body), "last qualification was for q-model on xtx at 4096 tokens, not q-model on xtx at 8192")

	// The cooling fails: the qualification is cut and recorded as failed; the gate names why.
	r.sys.mu.Lock()
	r.sys.HeatC = 60
	r.sys.mu.Unlock()
	st = qualify()
	require.Equal(t, runconfig.QualifyFailed, st["state"], "%v", st)
	require.Equal(t, "4", st["recordedRevision"])
	res = selectRoute(4)
	require.Equal(t, "route_unqualified", res.ErrorCode(), string(res.Body))
	require.Contains(t, string(res.Body), "failed its qualification")
	require.Contains(t, string(res.Body), "the device overheated")

	// The request is asynq's: one task per route revision. While it is queued (or its
	// agent died holding it: asynq hands it out again) asking again is refused, saying
	// what it waits for; once asynq gave up on it (archived), asking again queues it anew.
	res = env.Do(t, "POST", "/api/model-routes/gpuwork/qualify", admin, map[string]any{})
	require.Equal(t, 202, res.Status, string(res.Body))
	key := runconfig.QualifyStatusKey("gpuwork")
	require.NoError(t, rdb.HSet(ctx, key, "state", runconfig.QualifyRunning, "updatedAt", time.Now().Add(-2*runconfig.QualifyAbandonedAfter).UTC().Format(time.RFC3339Nano)).Err())
	res = env.Do(t, "POST", "/api/model-routes/gpuwork/qualify", admin, map[string]any{})
	require.Equal(t, 409, res.Status, "its task is still queued")
	require.Contains(t, string(res.Body), "its agent stopped answering during this qualification")
	insp := asynq.NewInspectorFromRedisClient(rdb)
	require.NoError(t, insp.ArchiveTask(queue.DeviceQueue("xtx"), queue.QualifyTaskID("gpuwork", 4)))
	require.Equal(t, 202, env.Do(t, "POST", "/api/model-routes/gpuwork/qualify", admin, map[string]any{}).Status, "asynq gave up on it: asked again")
	require.Equal(t, runconfig.QualifyQueued, rdb.HGet(ctx, key, "state").Val())
	ti, err := insp.GetTaskInfo(queue.DeviceQueue("xtx"), queue.QualifyTaskID("gpuwork", 4))
	require.NoError(t, err)
	require.Equal(t, asynq.TaskStatePending, ti.State)

	// A user who is not an admin sees the verdict in /api/system, not the figures.
	_, user := env.SignUp(t, "qualify-user@example.com", "password-user")
	res = env.Do(t, "GET", "/api/system", user, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	require.NotContains(t, string(res.Body), "vramFullBytes")
	require.Contains(t, string(res.Body), `"route":"gpuwork"`)
	require.Equal(t, 403, env.Do(t, "POST", "/api/model-routes/gpuwork/qualify", user, map[string]any{}).Status)
}

// RouteQualView is the admin API's route qualification as a client reads it.
type RouteQualView struct {
	Route     string
	Revision  int64
	Qualified bool
	Reason    string
	Summary   string
	Last      *runconfig.Qualification
	Request   map[string]string
}

// serveQualifications runs the qualification tasks queued on device's queue with a real
// asynq server handing them to q, until route's status holds a verdict.
func serveQualifications(t *testing.T, rdb *redis.Client, q *Qualifier, device, route string) {
	t.Helper()
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 1, Queues: map[string]int{queue.DeviceQueue(device): 1},
		TaskCheckInterval: 20 * time.Millisecond, LogLevel: asynq.ErrorLevel})
	mux := asynq.NewServeMux()
	mux.HandleFunc(queue.TypeQualify, q.HandleTask)
	require.NoError(t, srv.Start(mux))
	defer srv.Shutdown()
	require.Eventually(t, func() bool {
		switch rdb.HGet(context.Background(), runconfig.QualifyStatusKey(route), "state").Val() {
		case runconfig.QualifyPassed, runconfig.QualifyFailed, runconfig.QualifyError:
			return true
		}
		return false
	}, 60*time.Second, 20*time.Millisecond)
}
