package gpu

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/runconfig"
)

// TestQualifyConfig: the example's limits load; the qualify block is validated strictly
// (unknown fields, implausible figures, bad durations); unset limits take the defaults.
func TestQualifyConfig(t *testing.T) {
	c, err := LoadConfig("../../deploy/gpu.example.json")
	require.NoError(t, err)
	lim, timeout := c.QualifyLimits("xtx")
	require.Equal(t, runconfig.QualificationLimits{MaxTemperatureC: 95, MinFreeMemoryBytes: 1 << 30, MinPromptTPS: 300, MinGenerationTPS: 15}, lim)
	require.Equal(t, 30*time.Minute, timeout)

	dir := t.TempDir()
	dev := func(q string) string {
		return `{"devices":[{"name":"a","backend":{"kind":"upstream","url":"http://x"},"qualify":` + q + `}]}`
	}
	for name, tc := range map[string]struct{ body, want string }{
		"unknown field": {dev(`{"maxTemp":90}`), `unknown field "maxTemp"`},
		"too hot":       {dev(`{"maxTemperatureC":400}`), "maxTemperatureC must be between 0 and 150"},
		"negative":      {dev(`{"minFreeMemoryMiB":-1}`), "must not be negative"},
		"slow":          {dev(`{"minGenerationTokensPerSecond":-5}`), "speeds must not be negative"},
		"timeout":       {dev(`{"timeout":"a while"}`), "invalid duration"},
		"zero timeout":  {dev(`{"timeout":"0s"}`), "timeout must be positive"},
	} {
		p := filepath.Join(dir, name+".json")
		require.NoError(t, os.WriteFile(p, []byte(tc.body), 0o600))
		_, err := LoadConfig(p)
		require.ErrorContains(t, err, tc.want, name)
		if name != "unknown field" {
			require.ErrorContains(t, err, "qualify", name)
		}
	}

	p := filepath.Join(dir, "partial.json")
	require.NoError(t, os.WriteFile(p, []byte(dev(`{"maxTemperatureC":80,"timeout":"5m"}`)), 0o600))
	c, err = LoadConfig(p)
	require.NoError(t, err)
	lim, timeout = c.QualifyLimits("a")
	require.Equal(t, runconfig.QualificationLimits{MaxTemperatureC: 80, MinFreeMemoryBytes: 1 << 30, MinPromptTPS: 50, MinGenerationTPS: 5}, lim)
	require.Equal(t, 5*time.Minute, timeout)

	// 0 turns a limit off (a device without memory figures).
	require.NoError(t, os.WriteFile(p, []byte(dev(`{"minFreeMemoryMiB":0,"minPromptTokensPerSecond":0}`)), 0o600))
	c, err = LoadConfig(p)
	require.NoError(t, err)
	lim, _ = c.QualifyLimits("a")
	require.Equal(t, runconfig.QualificationLimits{MaxTemperatureC: 95, MinGenerationTPS: 5}, lim)
	lim, _ = c.QualifyLimits("unconfigured")
	require.Equal(t, 95.0, lim.MaxTemperatureC, "defaults")
}
