package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/gateway"
	"privateassistant/agent/gpu"
	"privateassistant/queue"
)

// TestDevRunsGoThroughTheGateway (issue 16 item 2): make dev is production in miniature.
// A chat answer (direct harness, arc) and a research answer (the Hermes double, xtx) are
// served by the agent's gateway — each run has the gateway's usage record in Redis and the
// device served the route's model — and the work run loads the model on the xtx with the
// Immich double's queues paused, which resume once the model is idle-unloaded.
func TestDevRunsGoThroughTheGateway(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	s, err := Start(t.Context(), Config{Root: root, DataDir: t.TempDir(), TokenDelay: 5 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	require.NotNil(t, s.Agent.GPU["arc"])
	require.NotNil(t, s.Agent.GPU["xtx"])
	require.Equal(t, s.Gateway, s.Agent.GatewayURL())
	for _, q := range devImmichQueues {
		require.False(t, s.Immich.Paused(q), "Immich runs while the xtx is idle")
	}

	api := devAPI{t: t, url: s.URL}
	jwt := api.jwt(s.DemoEmail, s.DemoPass)
	code, conv := api.call("POST", "/api/conversations", jwt, map[string]any{"title": "gateway"})
	require.Equal(t, 201, code, conv)
	ask := func(req, text, role string) string {
		code, adm := api.call("POST", "/api/conversations/"+conv["id"].(string)+"/messages", jwt,
			map[string]any{"requestId": req, "text": text, "role": role})
		require.Equal(t, 202, code, adm)
		runID := adm["runId"].(string)
		var run map[string]any
		require.Eventually(t, func() bool {
			_, run = api.call("GET", "/api/runs/"+runID, jwt, nil)
			return run["terminal"] == true
		}, 60*time.Second, 50*time.Millisecond, "run %s settles", runID)
		require.Equal(t, "completed", run["status"], "%v", run)
		return runID
	}
	rdb := s.Agent.RDB
	usage := func(runID string) map[string]string {
		u, err := rdb.HGetAll(context.Background(), gateway.UsageKey(runID)).Result()
		require.NoError(t, err)
		return u
	}

	// Chat: the direct harness on the arc, through the gateway.
	chat := ask("gw-chat", "hello through the gateway", "")
	require.NotEmpty(t, usage(chat), "the gateway recorded the chat run's usage (%s)", gateway.UsageKey(chat))
	require.Equal(t, "chat", s.Agent.GPU["arc"].Snapshot().Loaded)
	require.Empty(t, s.Agent.GPU["xtx"].Snapshot().Loaded, "chat never touches the xtx")
	for _, q := range devImmichQueues {
		require.False(t, s.Immich.Paused(q), "a chat run leaves Immich alone")
	}

	// Research: the Hermes double on the xtx, through the gateway; Immich is paused for
	// the load (and stays paused while the model is loaded).
	work := ask("gw-work", "#research the gateway", "research")
	require.NotEmpty(t, usage(work), "the gateway recorded the work run's usage")
	// The run settled well within the xtx's idle time: the model is still loaded.
	require.Equal(t, "chat", s.Agent.GPU["xtx"].Snapshot().Loaded, "the work run loaded the route's model on the xtx")
	for _, q := range devImmichQueues {
		require.True(t, s.Immich.Paused(q), "Immich is paused while the xtx holds a model")
	}
	require.Contains(t, s.Immich.Calls(), "PUT /api/queues/smartSearch", "the xtx paused Immich before its load")
	h, err := rdb.HGetAll(context.Background(), queue.GPUKey("xtx")).Result()
	require.NoError(t, err)
	require.NotEmpty(t, h, "the xtx heartbeat reaches Redis")

	// The model idles out (idleUnload 3s), the device is free, Immich resumes.
	require.Eventually(t, func() bool {
		if s.Agent.GPU["xtx"].Snapshot().Loaded != "" {
			return false
		}
		for _, q := range devImmichQueues {
			if s.Immich.Paused(q) {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "the xtx unloads and Immich resumes")
	require.Equal(t, gpu.PhaseIdle, s.Agent.GPU["xtx"].Snapshot().Phase)
}

// TestDevRoutesQualify: the route qualification gate (PA_ROUTE_QUALIFICATION, default
// "managed": a role may switch only to a qualified route on a managed device) can be
// satisfied in dev: both routes pass a qualification on the dev devices (the arc's device
// report and the xtx's fake sysfs give the memory figures it needs). About a minute
// (the xtx's full-context stress at one slot), so behind PA_DEV_QUALIFY=1.
func TestDevRoutesQualify(t *testing.T) {
	if os.Getenv("PA_DEV_QUALIFY") == "" {
		t.Skip("about a minute: set PA_DEV_QUALIFY=1")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	s, err := Start(t.Context(), Config{Root: root, DataDir: t.TempDir(), TokenDelay: 5 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	api := devAPI{t: t, url: s.URL}
	jwt := api.jwt(s.AdminEmail, s.AdminPass)
	for _, r := range []string{"chat", "work"} {
		require.Eventually(t, func() bool {
			code, _ := api.call("POST", "/api/model-routes/"+r+"/qualify", jwt, map[string]any{})
			return code == 202 // 409 device_not_managed until the device's first heartbeat
		}, 20*time.Second, 200*time.Millisecond)
		var out map[string]any
		require.Eventually(t, func() bool {
			_, out = api.call("GET", "/api/model-routes/"+r+"/qualification", jwt, nil)
			st, _ := out["request"].(map[string]any)
			return st != nil && (st["state"] == "passed" || st["state"] == "failed" || st["state"] == "error")
		}, 2*time.Minute, 500*time.Millisecond)
		require.Equal(t, true, out["qualified"], "route %s: %v", r, out)
	}
}
