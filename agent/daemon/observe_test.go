package daemon_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/stacktest"
)

// TestMetricsShowTheManagedDevices: with PA_GPU_CONFIG, /metrics reports each device's
// phase, loaded model, runs and generation (a load bumps it).
func TestMetricsShowTheManagedDevices(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t)
	cfg := filepath.Join(t.TempDir(), "gpu.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"devices": [{"name": "arc", "slots": 4,
		"backend": {"kind": "upstream", "url": "`+env.ModelURL+`"},
		"models": {"demo-model": {"context": 65536}}}]}`), 0o600))
	env.Settings.GPUConfig, env.Settings.GatewayAddr, env.Settings.GatewayKey = cfg, "127.0.0.1:0", "gateway-key-0123456789"
	a := env.StartAgent(t)
	base := "http://" + a.Ops.Bound()
	// The device starts fenced until its manager holds the control lease, then idles.
	var code int
	var body string
	require.Eventually(t, func() bool {
		code, body = get(t, base+"/metrics", "", "")
		return code == 200 && strings.Contains(body, `pa_gpu_phase{device="arc",phase="idle"} 1`)
	}, 10*time.Second, 20*time.Millisecond)
	require.NotContains(t, body, `pa_gpu_loaded_model{`)

	_, jwt := env.SignUp(t, "metrics@example.com", "password-metrics")
	conv := env.Conversation(t, jwt)
	r := env.Admit(t, jwt, conv, "m1", "hello", "")
	_, status := env.Follow(t, jwt, r.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	require.Eventually(t, func() bool {
		code, body = get(t, base+"/metrics", "", "")
		return code == 200 && strings.Contains(body, `pa_gpu_phase{device="arc",phase="ready"} 1`)
	}, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, body, `pa_gpu_loaded_model{device="arc",model="demo-model"} 1`)
	require.Contains(t, body, `pa_gpu_active_runs{device="arc"}`)
	require.NotContains(t, body, `pa_gpu_generation{device="arc"} 0`, "the load bumped the generation")
}
