package gpu

import (
	"context"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/gpu/llamatest"
	"privateassistant/modeltest"
	"privateassistant/runconfig"
)

// llamaDevice serves generated tiny GGUFs through the real llama-server, one process per
// model, with ctx tokens of context (-c) and np slots.
func llamaDevice(t testing.TB, ctx, np int, models map[string]uint32) *ProcessBackend {
	bin := llamatest.Server(t)
	dir := t.TempDir()
	i := int64(0)
	for name, train := range models {
		i++
		require.NoError(t, llamatest.TinyModel{Name: name, ContextLen: train, Seed: i}.Write(filepath.Join(dir, name+".gguf")))
	}
	b := &ProcessBackend{
		Command: func(model string, port int) []string {
			return []string{bin, "-m", filepath.Join(dir, model+".gguf"), "-a", model, "--host", "127.0.0.1", "--port", strconv.Itoa(port),
				"-c", strconv.Itoa(ctx), "-np", strconv.Itoa(np), "-t", "2", "--no-webui", "--api-key", testKey}
		},
		Footprints: map[string]int64{}, APIKey: testKey, StopTimeout: 5 * time.Second,
	}
	t.Cleanup(func() {
		for _, m := range b.Running() {
			_ = b.Unload(context.Background(), m)
		}
	})
	return b
}

// TestQualifyRealLlamaServer qualifies routes on the real llama-server (CPU, generated
// models): a budget within the served context passes with the prompt filled to it and
// llama-server's own speed figures; the example's mistake — a server started with more
// context than the model was trained for — is caught at qualification, not at a user's
// long prompt.
func TestQualifyRealLlamaServer(t *testing.T) {
	b := llamaDevice(t, 2048, 2, map[string]uint32{"fits": 32768, "short": 512})
	m := startManager(t, Device{Backend: b, Slots: 2, Budget: func(string) int64 { return 0 }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	lim := runconfig.QualificationLimits{MinPromptTPS: 1, MinGenerationTPS: 1}

	q, err := m.Qualify(ctx, QualifyRequest{Route: "fits", Model: "fits", Budget: 1024, MaxOutput: 16}, lim, nil)
	require.NoError(t, err)
	t.Logf("%+v", q)
	require.True(t, q.Passed, "%v", q.Reasons)
	require.Equal(t, int64(1024), q.ContextServed, "-c 2048 over 2 slots")
	require.Equal(t, int64(32768), q.ContextTrained)
	require.Greater(t, q.FilledTokens, int64(850), "the prompt filled the budget")
	require.Positive(t, q.PromptTPS)
	require.Positive(t, q.GenerationTPS)
	require.Equal(t, 2, q.Concurrency)

	q, err = m.Qualify(ctx, QualifyRequest{Route: "fits", Model: "fits", Budget: 2048, MaxOutput: 16}, lim, nil)
	require.NoError(t, err)
	require.False(t, q.Passed)
	require.Equal(t, []string{"the backend serves 1024 tokens of context per request (the model was trained for 32768); the route's budget is 2048"}, q.Reasons)

	q, err = m.Qualify(ctx, QualifyRequest{Route: "short", Model: "short", Budget: 1024, MaxOutput: 16}, lim, nil)
	require.NoError(t, err)
	require.False(t, q.Passed)
	require.Equal(t, []string{"the backend serves 512 tokens of context per request (capped by the model's training context of 512); the route's budget is 1024"}, q.Reasons)
}

// BenchmarkQualifyStress is the long qualification (make bench; PA_BENCH_QUALIFY=1): the
// real llama-server filling 16,384 tokens and generating 2,048, and the scripted device at
// a 65,536-token budget with 8,192 tokens of output on four slots. It reports the
// measured speeds.
func BenchmarkQualifyStress(b *testing.B) {
	if os.Getenv("PA_BENCH_QUALIFY") == "" {
		b.Skip("set PA_BENCH_QUALIFY=1 (make bench does) for the long qualification stress")
	}
	ctx := context.Background()
	lim := runconfig.QualificationLimits{MinPromptTPS: 1, MinGenerationTPS: 1}
	b.Run("llama-server", func(b *testing.B) {
		be := llamaDevice(b, 16384, 1, map[string]uint32{"tiny": 32768})
		m := startManager(b, Device{Backend: be, Slots: 1})
		for i := 0; i < b.N; i++ {
			q, err := m.Qualify(ctx, QualifyRequest{Route: "tiny", Model: "tiny", Budget: 16384, MaxOutput: 2048}, lim, nil)
			require.NoError(b, err)
			require.True(b, q.Passed, "%v", q.Reasons)
			b.ReportMetric(q.PromptTPS, "prompt-tok/s")
			b.ReportMetric(q.GenerationTPS, "gen-tok/s")
			b.ReportMetric(float64(q.FilledTokens), "filled-tokens")
		}
	})
	b.Run("scripted", func(b *testing.B) {
		r := newQualifyRig(b, 4, func(m *modeltest.Backend, s *thermalSysfs) {
			m.ContextLength, s.KVBytes, m.Timings = 131072, 64<<10, false // the speeds timed from the chunks
		})
		for i := 0; i < b.N; i++ {
			q, err := r.m.Qualify(ctx, QualifyRequest{Route: "big", Model: "q-model", Budget: 65536, MaxOutput: 8192}, lim, nil)
			require.NoError(b, err)
			require.True(b, q.Passed, "%v", q.Reasons)
			b.ReportMetric(q.PromptTPS, "prompt-tok/s")
			b.ReportMetric(q.GenerationTPS, "gen-tok/s")
			b.ReportMetric(float64(q.VRAMFullBytes-q.VRAMIdleBytes)/(1<<20), "kv-MiB")
		}
	})
}
