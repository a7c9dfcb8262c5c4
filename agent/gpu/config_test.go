package gpu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestLoadConfig(t *testing.T) {
	// The shipped example is valid.
	c, err := LoadConfig("../../deploy/gpu.example.json")
	require.NoError(t, err)
	require.Len(t, c.Devices, 2)

	dir := t.TempDir()
	for name, tc := range map[string]struct{ body, want string }{
		"unknown field":   {`{"devices":[{"name":"a","backend":{"kind":"upstream","url":"http://x"},"bogus":1}]}`, "unknown field"},
		"no name":         {`{"devices":[{"backend":{"kind":"upstream","url":"http://x"}}]}`, "name is required"},
		"twice":           {`{"devices":[{"name":"a","backend":{"kind":"upstream","url":"http://x"}},{"name":"a","backend":{"kind":"upstream","url":"http://x"}}]}`, "appears twice"},
		"bad kind":        {`{"devices":[{"name":"a","backend":{"kind":"vllm"}}]}`, "backend kind must be"},
		"no command":      {`{"devices":[{"name":"a","backend":{"kind":"process"}}]}`, "needs a command"},
		"bad duration":    {`{"devices":[{"name":"a","drainTimeout":"soon","backend":{"kind":"upstream","url":"http://x"}}]}`, "invalid duration"},
		"immich no key":   {`{"devices":[{"name":"a","backend":{"kind":"upstream","url":"http://x"},"immich":{"url":"http://i"}}]}`, "apiKeyEnv"},
		"bad telemetry":   {`{"devices":[{"name":"a","backend":{"kind":"upstream","url":"http://x"},"telemetry":{"kind":"nvml"}}]}`, "telemetry kind"},
		"not json at all": {`devices: []`, "invalid character"},
	} {
		p := filepath.Join(dir, name+".json")
		require.NoError(t, os.WriteFile(p, []byte(tc.body), 0o600))
		_, err := LoadConfig(p)
		require.ErrorContains(t, err, tc.want, name)
	}

	// Intel Arc telemetry from the backend's device report (a real child process).
	p0 := filepath.Join(dir, "arc.json")
	require.NoError(t, os.WriteFile(p0, []byte(`{"devices":[{"name":"arc","backend":{"kind":"upstream","url":"http://x"},
		"telemetry":{"kind":"device-report","device":"SYCL0","command":["printf","Available devices:\\n  SYCL0: Intel(R) Arc(TM) A770 Graphics (16225 MiB, 15000 MiB free)\\n"]}}]}`), 0o600))
	c, err = LoadConfig(p0)
	require.NoError(t, err)
	pool, _, _, err := c.Build(nil, "me", time.Second)
	require.NoError(t, err)
	r, err := pool["arc"].dev.Telemetry.Read(context.Background())
	require.NoError(t, err)
	require.Equal(t, int64(16225-15000)<<20, r.MemUsed)

	// Credentials are named by environment variable; a missing one is a clear error.
	p := filepath.Join(dir, "env.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"devices":[{"name":"a","backend":{"kind":"upstream","url":"http://x","apiKeyEnv":"PA_TEST_MISSING_KEY"}}]}`), 0o600))
	c, err = LoadConfig(p)
	require.NoError(t, err)
	_, _, _, err = c.Build(nil, "me", time.Second)
	require.ErrorContains(t, err, "PA_TEST_MISSING_KEY is not set")
}

// TestConfigSchedulingDefaults: without drainTimeout a swap never cuts running work;
// maxExtraWait defaults to 10 minutes ("0s" is strict FIFO); idleUnload is per device
// with a per-model override.
func TestConfigSchedulingDefaults(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "sched.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"devices":[
		{"name":"a","backend":{"kind":"upstream","url":"http://x"},"idleUnload":"20m","models":{"m1":{},"m2":{"idleUnload":"5m"}}},
		{"name":"b","backend":{"kind":"upstream","url":"http://x"},"maxExtraWait":"0s","drainTimeout":"2m","recoverReadings":5}]}`), 0o600))
	c, err := LoadConfig(p)
	require.NoError(t, err)
	pool, _, _, err := c.Build(nil, "me", time.Second)
	require.NoError(t, err)
	a, b := pool["a"].dev, pool["b"].dev
	require.Zero(t, a.DrainTimeout, "no drain bound unless configured")
	require.Equal(t, 10*time.Minute, a.MaxExtraWait)
	require.Equal(t, 20*time.Minute, a.IdleUnload("m1"))
	require.Equal(t, 5*time.Minute, a.IdleUnload("m2"))
	require.Equal(t, 3, a.RecoverReadings)
	require.Zero(t, b.MaxExtraWait)
	require.Equal(t, 2*time.Minute, b.DrainTimeout)
	require.Zero(t, b.IdleUnload("m1"))
	require.Equal(t, 5, b.RecoverReadings)

	require.NoError(t, os.WriteFile(p, []byte(`{"devices":[{"name":"a","backend":{"kind":"upstream","url":"http://x"},"models":{"m":{"idleUnload":"later"}}}]}`), 0o600))
	_, err = LoadConfig(p)
	require.ErrorContains(t, err, "invalid duration")
}
