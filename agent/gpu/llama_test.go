package gpu

import (
	"context"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/gpu/llamatest"
)

// TestLlamaServerSwap drives a real llama-server (Debian sid's, when available) through
// the manager: two tiny models swap, each request is answered by the model it asked for,
// and a context budget above what the server serves is refused at load.
func TestLlamaServerSwap(t *testing.T) {
	bin := llamatest.Server(t)
	dir := t.TempDir()
	for i, name := range []string{"tiny-a", "tiny-b"} {
		require.NoError(t, llamatest.TinyModel{Name: name, Seed: int64(i + 1)}.Write(filepath.Join(dir, name+".gguf")))
	}
	b := &ProcessBackend{
		Command: func(model string, port int) []string {
			return []string{bin, "-m", filepath.Join(dir, model+".gguf"), "-a", model, "--host", "127.0.0.1",
				"--port", strconv.Itoa(port), "-c", "4096", "-t", "2", "--no-webui", "--api-key", testKey}
		},
		HealthPath:  "/health",
		Footprints:  map[string]int64{"tiny-a": 1 << 30, "tiny-b": 1 << 30},
		APIKey:      testKey,
		StopTimeout: 5 * time.Second,
	}
	t.Cleanup(func() {
		for _, m := range b.Running() {
			_ = b.Unload(context.Background(), m)
		}
	})
	sys := newFakeSysfs(t, b)
	budget := int64(4096)
	m := startManager(t, Device{Backend: b, Telemetry: sys, Budget: func(string) int64 { return budget }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for _, model := range []string{"tiny-a", "tiny-b", "tiny-a"} {
		g, err := m.Acquire(ctx, model, nil)
		require.NoError(t, err, model)
		got, err := complete(ctx, g.Endpoint, model)
		require.NoError(t, err)
		require.Equal(t, model, got, "answered by the model asked for")
		require.Equal(t, []string{model}, b.Running())
		g.Release()
	}
	t.Logf("last swap: %+v", m.Snapshot().LastSwap)
	budget = 8192
	_, err := m.Acquire(ctx, "tiny-b", nil)
	require.ErrorIs(t, err, ErrLoadFailed)
	require.ErrorContains(t, err, "4096 tokens of context")
}

// TestLlamaServerRouter drives llama-server's router mode: a model an earlier agent left
// loaded is unloaded when the manager starts; the manager loads and unloads
// through /models/load and /models/unload, never two models loaded at once, and the
// context check reads the served context (n_ctx), not the trained one the router lists.
func TestLlamaServerRouter(t *testing.T) {
	bin := llamatest.Server(t)
	dir := t.TempDir()
	for i, name := range []string{"tiny-a", "tiny-b"} {
		require.NoError(t, llamatest.TinyModel{Name: name, Seed: int64(i + 1)}.Write(filepath.Join(dir, name+".gguf")))
	}
	port, err := freeLocalPort()
	require.NoError(t, err)
	cmd := exec.Command(bin, "--models-dir", dir, "--no-models-autoload", "--models-max", "4", "--host", "127.0.0.1",
		"--port", strconv.Itoa(port), "-c", "4096", "-t", "2", "--no-webui", "--api-key", testKey)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	r := &RouterBackend{URL: "http://127.0.0.1:" + strconv.Itoa(port), APIKey: testKey, Footprints: map[string]int64{"tiny-a": 1 << 30, "tiny-b": 1 << 30}}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.Eventually(t, func() bool { _, err := r.Models(ctx); return err == nil }, 20*time.Second, 50*time.Millisecond)

	// An earlier agent left tiny-b loaded (the router is not the agent's child): the
	// manager unloads it before it serves.
	_, err = r.Load(ctx, "tiny-b")
	require.NoError(t, err)
	budget := int64(4096)
	m := startManager(t, Device{Backend: r, Budget: func(string) int64 { return budget }})
	ms, err := r.Models(ctx)
	require.NoError(t, err)
	require.Equal(t, "unloaded", ms["tiny-b"], "left loaded before the manager took control: %v", ms)
	for _, model := range []string{"tiny-a", "tiny-b", "tiny-a"} {
		g, err := m.Acquire(ctx, model, nil)
		require.NoError(t, err, model)
		got, err := complete(ctx, g.Endpoint, model)
		require.NoError(t, err)
		require.Equal(t, model, got)
		ms, err := r.Models(ctx)
		require.NoError(t, err)
		loaded := 0
		for _, st := range ms {
			if st == "loaded" {
				loaded++
			}
		}
		require.Equal(t, 1, loaded, "one model loaded at a time: %v", ms)
		g.Release()
	}
	budget = 8192
	_, err = m.Acquire(ctx, "tiny-b", nil)
	require.ErrorContains(t, err, "4096 tokens of context", "the served context, not the trained 32768")
}
