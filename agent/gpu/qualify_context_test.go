package gpu

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/gpu/llamatest"
	"privateassistant/modeltest"
)

// TestLlamaServerContextCappedByTraining: the real llama-server started with -c 8192 for a
// model trained for 2,048 tokens serves 2,048 per slot (it only warns); a route budget of
// 8,192 fails the load with that reason, naming the training context. With -np 2 the
// per-slot context is half of -c: a budget of 4,096 fails on a model trained for 32,768.
func TestLlamaServerContextCappedByTraining(t *testing.T) {
	bin := llamatest.Server(t)
	dir := t.TempDir()
	require.NoError(t, llamatest.TinyModel{Name: "short", ContextLen: 2048, Seed: 3}.Write(filepath.Join(dir, "short.gguf")))
	require.NoError(t, llamatest.TinyModel{Name: "long", ContextLen: 32768, Seed: 4}.Write(filepath.Join(dir, "long.gguf")))
	args := map[string][]string{"short": {"-c", "8192"}, "long": {"-c", "4096", "-np", "2"}}
	b := &ProcessBackend{
		Command: func(model string, port int) []string {
			return append([]string{bin, "-m", filepath.Join(dir, model+".gguf"), "-a", model, "--host", "127.0.0.1",
				"--port", strconv.Itoa(port), "-t", "2", "--no-webui", "--api-key", testKey}, args[model]...)
		},
		Footprints: map[string]int64{"short": 1 << 30, "long": 1 << 30}, APIKey: testKey, StopTimeout: 5 * time.Second,
	}
	t.Cleanup(func() {
		for _, m := range b.Running() {
			_ = b.Unload(context.Background(), m)
		}
	})
	budget := map[string]int64{"short": 8192, "long": 4096}
	m := startManager(t, Device{Backend: b, Budget: func(m string) int64 { return budget[m] }})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	_, err := m.Acquire(ctx, "short", nil)
	require.ErrorIs(t, err, ErrLoadFailed)
	require.ErrorContains(t, err, "serves 2048 tokens of context per request (capped by the model's training context of 2048); the route's budget is 8192")
	require.Empty(t, b.Running(), "the model that failed readiness was unloaded")

	_, err = m.Acquire(ctx, "long", nil)
	require.ErrorContains(t, err, "serves 2048 tokens of context per request (the model was trained for 32768); the route's budget is 4096")

	// What the qualification records: the report itself, from the live server.
	ep, err := b.Load(ctx, "short")
	require.NoError(t, err)
	rep, err := ContextOf(ctx, b, ep, "short")
	require.NoError(t, err)
	require.Equal(t, int64(2048), rep.Served)
	require.Equal(t, int64(2048), rep.Trained)
	require.Equal(t, 4, rep.Slots, "llama-server's default: 4 parallel slots, unified KV cache")
	budget["short"] = 2048
	require.NoError(t, rep.Check(2048))
	require.NoError(t, b.Unload(ctx, "short"))
}

// TestReadinessNeverVacuous: a backend that reports no context length fails readiness
// when the route has a budget (it used to pass).
func TestReadinessNeverVacuous(t *testing.T) {
	silent := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/v1/chat/completions":
			_, _ = w.Write([]byte(`{"choices":[{"message":{"role":"assistant","content":"x"}}]}`))
		case "/v1/models":
			_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"m","object":"model"}]}`))
		default:
			w.WriteHeader(404)
		}
	})
	srv := httptest.NewServer(silent)
	defer srv.Close()
	ctx := context.Background()
	err := Ready(ctx, srv.URL+"/v1", "m", "", 4096)
	require.ErrorIs(t, err, ErrContextUnreported)
	require.ErrorContains(t, err, "budget of 4096 cannot be verified")
	require.NoError(t, Ready(ctx, srv.URL+"/v1", "m", "", 0), "no budget: nothing to verify")

	// The scripted backend reports its context: a budget above it fails, one within passes.
	sb := modeltest.New("m")
	sb.ContextLength = 8192
	s2 := httptest.NewServer(sb)
	defer s2.Close()
	require.NoError(t, Ready(ctx, s2.URL+"/v1", "m", "", 8192))
	require.ErrorContains(t, Ready(ctx, s2.URL+"/v1", "m", "", 8193), "serves 8192 tokens of context")
}

// ollamaCtxDouble follows Ollama's API where the context is concerned: a load
// (POST /api/generate, empty prompt) takes options.num_ctx (default 4096 like Ollama's),
// /api/ps reports each loaded model's context_length, /api/show the trained context in
// model_info; /v1/models reports no context at all. A model "old:1b" stands for an Ollama
// that reports no context_length in /api/ps.
type ollamaCtxDouble struct {
	mu      sync.Mutex
	trained map[string]int64
	loaded  map[string]int64 // model → num_ctx it was loaded with
	chat    *modeltest.Backend
}

func (o *ollamaCtxDouble) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case r.Method == "POST" && r.URL.Path == "/api/generate":
		var b struct {
			Model     string `json:"model"`
			KeepAlive any    `json:"keep_alive"`
			Options   struct {
				NumCtx int64 `json:"num_ctx"`
			} `json:"options"`
		}
		_ = json.NewDecoder(r.Body).Decode(&b)
		if _, ok := o.trained[b.Model]; !ok {
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":"model '` + b.Model + `' not found"}`))
			return
		}
		if ka, ok := b.KeepAlive.(float64); ok && ka == 0 {
			delete(o.loaded, b.Model)
		} else {
			n := b.Options.NumCtx
			if n == 0 {
				n = 4096
			}
			o.loaded[b.Model] = n
		}
		_, _ = w.Write([]byte(`{"done":true}`))
	case r.Method == "GET" && r.URL.Path == "/api/ps":
		ms := []any{}
		for m, n := range o.loaded {
			e := map[string]any{"name": m, "model": m, "size_vram": 1 << 30}
			if m != "old:1b" {
				e["context_length"] = n
			}
			ms = append(ms, e)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"models": ms})
	case r.Method == "POST" && r.URL.Path == "/api/show":
		var b struct{ Model string }
		_ = json.NewDecoder(r.Body).Decode(&b)
		_ = json.NewEncoder(w).Encode(map[string]any{"model_info": map[string]any{"general.architecture": "qwen3", "qwen3.context_length": o.trained[b.Model]}})
	case r.URL.Path == "/v1/chat/completions":
		o.chat.ServeHTTP(w, r)
	case r.URL.Path == "/v1/models":
		_, _ = w.Write([]byte(`{"object":"list","data":[{"id":"qwen3:8b","object":"model","owned_by":"library"}]}`))
	default:
		w.WriteHeader(404)
	}
}

// TestOllamaContextSentAndVerified: the load sends num_ctx (the model's configured
// context); readiness reads it back from /api/ps, capped by /api/show's training context,
// and an Ollama that reports nothing fails instead of passing.
func TestOllamaContextSentAndVerified(t *testing.T) {
	d := &ollamaCtxDouble{trained: map[string]int64{"qwen3:8b": 40960, "small:1b": 32768, "old:1b": 131072}, loaded: map[string]int64{}, chat: modeltest.New("qwen3:8b")}
	srv := httptest.NewServer(d)
	defer srv.Close()
	numCtx := map[string]int64{"qwen3:8b": 65536, "small:1b": 32768, "old:1b": 65536}
	budget := map[string]int64{"qwen3:8b": 65536, "small:1b": 32768, "old:1b": 65536}
	be := &OllamaBackend{URL: srv.URL, NumCtx: func(m string) int64 { return numCtx[m] }}
	m := startManager(t, Device{Backend: be, Budget: func(m string) int64 { return budget[m] }})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	g, err := m.Acquire(ctx, "small:1b", nil)
	require.NoError(t, err)
	d.mu.Lock()
	require.Equal(t, int64(32768), d.loaded["small:1b"], "num_ctx sent on load")
	d.mu.Unlock()
	rep, err := ContextOf(ctx, be, g.Endpoint, "small:1b")
	require.NoError(t, err)
	require.Equal(t, ContextReport{Served: 32768, Trained: 32768, Source: "ollama /api/ps context_length"}, rep)
	g.Release()

	// 65,536 asked for a model trained for 40,960: served is capped, the load fails.
	_, err = m.Acquire(ctx, "qwen3:8b", nil)
	require.ErrorIs(t, err, ErrLoadFailed)
	require.ErrorContains(t, err, "serves 40960 tokens of context per request (capped by the model's training context of 40960); the route's budget is 65536")

	// Nothing reported: never a vacuous pass.
	_, err = m.Acquire(ctx, "old:1b", nil)
	require.ErrorIs(t, err, ErrLoadFailed)
	require.ErrorContains(t, err, "reports no context length, so the route's budget of 65536 cannot be verified")
}
