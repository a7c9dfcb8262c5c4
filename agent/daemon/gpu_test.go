package daemon_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/agenttest"
	"privateassistant/agent/daemon"
	"privateassistant/agent/gpu"
	"privateassistant/schema"
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
			env := agenttest.New(t)
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
			run := runRecord(t, env, a.RunID)
			if tc.status == "completed" {
				require.Equal(t, "demo-model", mgr.Snapshot().Loaded, "the route's backend model was loaded")
				return
			}
			require.Equal(t, schema.RunFailed, run.Status)
			require.NotNil(t, run.ErrorSummary)
			require.Contains(t, *run.ErrorSummary, "the model could not be loaded")
			require.Contains(t, *run.ErrorSummary, "route's budget")
		})
	}
}
