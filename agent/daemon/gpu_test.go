package daemon_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/daemon"
	"privateassistant/agent/gpu"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// TestRunsGoThroughTheGPUManager: a managed device loads the route's model before the
// run starts (the run waits with the reason), and a model that cannot be made ready fails
// the run with that reason instead of retrying it.
func TestRunsGoThroughTheGPUManager(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		budget int64
		status string
	}{{"loads-and-serves", 65536, "completed"}, {"budget-refused", 1 << 20, "failed"}} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var mgr *gpu.Manager
			env := stacktest.New(t)
			// The managed backend is the scripted model (set once the env knows its URL).
			env.StartAgentWith(t, func(a *daemon.Agent) {
				mgr = gpu.NewManager(gpu.Device{Name: "arc", Backend: &gpu.UpstreamBackend{URL: env.ModelURL}, Slots: 4,
					Budget: func(string) int64 { return tc.budget }})
				ctx, cancel := context.WithCancel(context.Background())
				t.Cleanup(func() { cancel(); mgr.Stop() })
				require.NoError(t, mgr.Start(ctx))
				a.Exec.GPU = gpu.Pool{"arc": mgr}
			})
			_, jwt := env.SignUp(t, "gpu@example.com", "password-gpu1")
			conv := env.Conversation(t, jwt)
			a := env.Admit(t, jwt, conv, "q1", "hello device", "")
			_, status := env.Follow(t, jwt, a.RunID, 30*time.Second, nil)
			require.Equal(t, tc.status, status)
			if tc.status == "completed" {
				require.Equal(t, "demo-model", mgr.Snapshot().Loaded, "the route's backend model was loaded")
				return
			}
			// The terminal event precedes the record's terminal write.
			run := settledRun(t, env, a.RunID)
			require.Equal(t, schema.RunFailed, run.Status)
			require.NotNil(t, run.ErrorSummary)
			require.Contains(t, *run.ErrorSummary, "the model could not be loaded")
			require.Contains(t, *run.ErrorSummary, "route's budget")
		})
	}
}

// TestAgentWithGPUConfig: PA_GPU_CONFIG makes the agent manage its devices: runs load the
// route's model, the device's heartbeat reaches Redis, and the gateway serves only what a
// lease covers.
func TestAgentWithGPUConfig(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t)
	cfg := filepath.Join(t.TempDir(), "gpu.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"devices": [{"name": "arc", "slots": 4,
		"backend": {"kind": "upstream", "url": "`+env.ModelURL+`"},
		"models": {"demo-model": {"context": 65536}}}]}`), 0o600))
	env.Settings.GPUConfig, env.Settings.GatewayAddr, env.Settings.GatewayKey = cfg, "127.0.0.1:0", "gateway-key-0123456789"
	a := env.StartAgent(t)
	require.NotNil(t, a.GPU["arc"])

	_, jwt := env.SignUp(t, "gpucfg@example.com", "password-gpu2")
	conv := env.Conversation(t, jwt)
	adm := env.Admit(t, jwt, conv, "q1", "hello managed device", "")
	_, status := env.Follow(t, jwt, adm.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	require.Equal(t, "demo-model", a.GPU["arc"].Snapshot().Loaded)

	rdb := env.Redis.Client()
	defer rdb.Close()
	require.Eventually(t, func() bool {
		h, _ := rdb.HGetAll(context.Background(), queue.GPUKey("arc")).Result()
		return h["state"] == string(gpu.PhaseReady) && h["loadedModel"] == "demo-model" && h["leaseHolder"] == env.Settings.AgentID
	}, 10*time.Second, 50*time.Millisecond)

	call := func(key, path string, body any) (int, string) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = strings.NewReader(string(b))
		}
		req, _ := http.NewRequest(map[bool]string{true: "POST", false: "GET"}[body != nil], strings.TrimSuffix(a.GatewayURL(), "/v1")+path, rd)
		req.Header.Set("Authorization", "Bearer "+key)
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		return res.StatusCode, string(b)
	}
	code, body := call("gateway-key-0123456789", "/v1/models", nil)
	require.Equal(t, 200, code)
	require.Contains(t, body, `"id":"chat"`)
	require.Contains(t, body, `"context_length":131072`)
	code, _ = call("wrong-key", "/v1/models", nil)
	require.Equal(t, 401, code)
	msg := map[string]any{"model": "chat", "messages": []any{map[string]any{"role": "user", "content": "hi"}}}
	code, body = call("gateway-key-0123456789", "/v1/chat/completions", msg)
	require.Equal(t, 403, code, "a request naming no run is refused")
	require.Contains(t, body, "run_binding_required")
	// The grant goes back when the attempt returns, after the terminal event the follower
	// saw (the record settles in between): the device is released soon after, not before.
	require.Eventually(t, func() bool {
		code, body = call("gateway-key-0123456789", "/runs/"+adm.RunID+"/v1/chat/completions", msg)
		return code == 409
	}, 10*time.Second, 50*time.Millisecond, "the run no longer holds the device: %d %s", code, body)
	require.Contains(t, body, "route_not_leased")
}

// TestRevokedGrantFailsTheRun: a run streaming on a managed device whose grant is taken
// back (another model needed the device past the drain bound) stops and fails with the
// reason; the other model is then served.
func TestRevokedGrantFailsTheRun(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t)
	var mgr *gpu.Manager
	env.StartAgentWith(t, func(a *daemon.Agent) {
		mgr = gpu.NewManager(gpu.Device{Name: "arc", Backend: &gpu.UpstreamBackend{URL: env.ModelURL}, Slots: 4,
			DrainTimeout: 300 * time.Millisecond})
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(func() { cancel(); mgr.Stop() })
		require.NoError(t, mgr.Start(ctx))
		a.Exec.GPU = gpu.Pool{"arc": mgr}
	})
	_, jwt := env.SignUp(t, "revoke@example.com", "password-revk")
	conv := env.Conversation(t, jwt)
	adm := env.Admit(t, jwt, conv, "q1", "tell me something #long", "")
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	go func() {
		require.Eventually(t, func() bool { return mgr.Snapshot().Active == 1 }, 10*time.Second, 10*time.Millisecond)
		g, err := mgr.Acquire(ctx, "another-model", nil)
		if err == nil {
			g.Release()
		}
	}()
	_, status := env.Follow(t, jwt, adm.RunID, 30*time.Second, nil)
	require.Equal(t, "failed", status)
	run := settledRun(t, env, adm.RunID)
	require.Equal(t, schema.RunFailed, run.Status)
	require.NotNil(t, run.ErrorSummary)
	require.Contains(t, *run.ErrorSummary, "GPU stopped serving this run")
	require.Eventually(t, func() bool { return mgr.Snapshot().Loaded == "another-model" }, 10*time.Second, 10*time.Millisecond)
}
