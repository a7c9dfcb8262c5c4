package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// TestAgentQualifiesRoutes: an agent with a GPU file runs the qualification requests the
// admin API queues for its devices and records the verdict on a new revision of the route
// (the wiring; the measurements are agent/gpu's tests).
func TestAgentQualifiesRoutes(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t)
	cfg := filepath.Join(t.TempDir(), "gpu.json")
	// The scripted upstream reports no memory figures: the headroom limit is off.
	require.NoError(t, os.WriteFile(cfg, []byte(`{"devices": [{"name": "arc", "slots": 2,
		"backend": {"kind": "upstream", "url": "`+env.ModelURL+`"},
		"models": {"demo-model": {"context": 65536}},
		"qualify": {"minFreeMemoryMiB": 0, "timeout": "1m"}}]}`), 0o600))
	env.Settings.GPUConfig, env.Settings.GatewayAddr, env.Settings.GatewayKey = cfg, "127.0.0.1:0", "gateway-key-0123456789"
	ctx := context.Background()
	_, err := schema.For[schema.ModelRoute](env.Store, schema.CollModelRoutes).Create(ctx, runconfig.RevisionDocID("small", 1), "",
		&schema.ModelRoute{RouteID: "small", Revision: 1, Alias: "small", Device: "arc", BackendModel: "demo-model", ContextBudget: 4096,
			MaxOutput: schema.Ptr(int64(32)), LocalOnly: true, Enabled: true})
	require.NoError(t, err)
	env.StartAgent(t)

	rdb := env.Redis.Client()
	defer rdb.Close()
	req, _ := json.Marshal(runconfig.QualifyRequest{ID: "q1", Route: "small", Device: "arc", RequestedBy: "admin1"})
	require.NoError(t, rdb.HSet(ctx, runconfig.QualifyStatusKey("small"), "state", runconfig.QualifyQueued, "requestId", "q1").Err())
	require.NoError(t, rdb.RPush(ctx, runconfig.QualifyQueueKey("arc"), req).Err())
	require.Eventually(t, func() bool {
		return rdb.HGet(ctx, runconfig.QualifyStatusKey("small"), "state").Val() == runconfig.QualifyPassed
	}, 30*time.Second, 50*time.Millisecond, "%v", rdb.HGetAll(ctx, runconfig.QualifyStatusKey("small")).Val())
	rec, err := runconfig.LatestRoute(ctx, env.Store, "small")
	require.NoError(t, err)
	require.Equal(t, int64(2), rec.Revision)
	require.NoError(t, runconfig.CheckQualified(rec))
	q, err := runconfig.RouteQualification(rec)
	require.NoError(t, err)
	require.Equal(t, "upstream", q.Backend)
	require.Equal(t, 2, q.Concurrency)
	require.Equal(t, int64(131072), q.ContextServed)
}

// TestAQualificationCutOffByARestartSaysAskAgain (issue 32 item 6, issue 31 item 3): an
// agent killed after it took a request — before its first status write, or while it ran —
// leaves the request in the device's active list; the next start says plainly on the
// request's status that nothing was recorded and it must be asked again (never "queued" or
// "running" for days), and the next request runs as usual.
func TestAQualificationCutOffByARestartSaysAskAgain(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t)
	cfg := filepath.Join(t.TempDir(), "gpu.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"devices": [{"name": "arc", "slots": 2,
		"backend": {"kind": "upstream", "url": "`+env.ModelURL+`"},
		"models": {"demo-model": {"context": 65536}},
		"qualify": {"minFreeMemoryMiB": 0, "timeout": "1m"}}]}`), 0o600))
	env.Settings.GPUConfig, env.Settings.GatewayAddr, env.Settings.GatewayKey = cfg, "127.0.0.1:0", "gateway-key-0123456789"
	ctx := context.Background()
	for _, route := range []string{"small", "other"} {
		_, err := schema.For[schema.ModelRoute](env.Store, schema.CollModelRoutes).Create(ctx, runconfig.RevisionDocID(route, 1), "",
			&schema.ModelRoute{RouteID: route, Revision: 1, Alias: route, Device: "arc", BackendModel: "demo-model", ContextBudget: 4096,
				MaxOutput: schema.Ptr(int64(32)), LocalOnly: true, Enabled: true})
		require.NoError(t, err)
	}
	rdb := env.Redis.Client()
	defer rdb.Close()
	// What a killed agent leaves: one request taken before its first status write (still
	// "queued"), one cut off while it ran.
	for route, state := range map[string]string{"small": runconfig.QualifyQueued, "other": runconfig.QualifyRunning} {
		req, _ := json.Marshal(runconfig.QualifyRequest{ID: "dead-" + route, Route: route, Device: "arc", RequestedBy: "admin1"})
		require.NoError(t, rdb.HSet(ctx, runconfig.QualifyStatusKey(route), "state", state, "requestId", "dead-"+route, "step", "fill").Err())
		require.NoError(t, rdb.RPush(ctx, runconfig.QualifyActiveKey("arc"), req).Err())
	}
	env.StartAgent(t)
	for _, route := range []string{"small", "other"} {
		require.Eventually(t, func() bool {
			st := rdb.HGetAll(ctx, runconfig.QualifyStatusKey(route)).Val()
			return st["state"] == runconfig.QualifyError && st["reason"] == runconfig.QualifyCutOff && st["step"] == ""
		}, 30*time.Second, 20*time.Millisecond, "%v", rdb.HGetAll(ctx, runconfig.QualifyStatusKey(route)).Val())
	}
	require.Zero(t, rdb.LLen(ctx, runconfig.QualifyActiveKey("arc")).Val(), "the cut-off requests were settled")
	rec, err := runconfig.LatestRoute(ctx, env.Store, "small")
	require.NoError(t, err)
	require.Equal(t, int64(1), rec.Revision, "nothing was recorded for them")

	// Asked again, it runs to its verdict; the active list is empty once it is settled.
	req, _ := json.Marshal(runconfig.QualifyRequest{ID: "q2", Route: "small", Device: "arc", RequestedBy: "admin1"})
	require.NoError(t, rdb.HSet(ctx, runconfig.QualifyStatusKey("small"), "state", runconfig.QualifyQueued, "requestId", "q2").Err())
	require.NoError(t, rdb.RPush(ctx, runconfig.QualifyQueueKey("arc"), req).Err())
	require.Eventually(t, func() bool {
		return rdb.HGet(ctx, runconfig.QualifyStatusKey("small"), "state").Val() == runconfig.QualifyPassed
	}, 30*time.Second, 50*time.Millisecond, "%v", rdb.HGetAll(ctx, runconfig.QualifyStatusKey("small")).Val())
	require.Zero(t, rdb.LLen(ctx, runconfig.QualifyActiveKey("arc")).Val())
}
