package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/modeltest"
)

// ollamaDouble follows Ollama's API as the backend uses it: POST /api/generate with an
// empty prompt loads (keep_alive -1 keeps it) or unloads (keep_alive 0) a model and
// answers {"done":true,"done_reason":"load"|"unload"}; GET /api/ps lists loaded models;
// an unknown model is 404 {"error":"model 'x' not found"}. Like Ollama, a chat request for
// a model that is not loaded loads it on the fly (why the gateway must refuse unleased
// routes).
type ollamaDouble struct {
	mu     sync.Mutex
	known  map[string]*modeltest.Backend
	loaded map[string]bool
	peak   int
}

func (o *ollamaDouble) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	o.mu.Lock()
	defer o.mu.Unlock()
	switch {
	case r.Method == "POST" && r.URL.Path == "/api/generate":
		var b struct {
			Model     string `json:"model"`
			Prompt    string `json:"prompt"`
			KeepAlive any    `json:"keep_alive"`
		}
		_ = json.NewDecoder(r.Body).Decode(&b)
		if o.known[b.Model] == nil {
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"error":"model '`+b.Model+`' not found"}`)
			return
		}
		reason := "load"
		if ka, ok := b.KeepAlive.(float64); ok && ka == 0 {
			delete(o.loaded, b.Model)
			reason = "unload"
		} else {
			o.loaded[b.Model] = true
		}
		o.peak = max(o.peak, len(o.loaded))
		_ = json.NewEncoder(w).Encode(map[string]any{"model": b.Model, "created_at": time.Now().Format(time.RFC3339Nano), "response": "", "done": true, "done_reason": reason})
	case r.Method == "GET" && r.URL.Path == "/api/ps":
		ms := []any{}
		for m := range o.loaded {
			ms = append(ms, map[string]any{"name": m, "model": m, "size": 1 << 30, "size_vram": 1 << 30, "expires_at": "2318-01-01T00:00:00Z"})
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"models": ms})
	case r.URL.Path == "/v1/chat/completions":
		body, _ := io.ReadAll(r.Body)
		var b struct {
			Model string `json:"model"`
		}
		_ = json.Unmarshal(body, &b)
		be := o.known[b.Model]
		if be == nil {
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"error":{"message":"model '`+b.Model+`' not found"}}`)
			return
		}
		o.loaded[b.Model] = true
		o.peak = max(o.peak, len(o.loaded))
		r.Body = io.NopCloser(bytes.NewReader(body))
		o.mu.Unlock()
		be.ServeHTTP(w, r)
		o.mu.Lock()
	case r.URL.Path == "/v1/models":
		o.known["qwen3:8b"].ServeHTTP(w, r)
	default:
		w.WriteHeader(404)
	}
}

func TestOllamaBackendSwaps(t *testing.T) {
	d := &ollamaDouble{known: map[string]*modeltest.Backend{"qwen3:8b": modeltest.New("qwen3:8b"), "gemma3:12b": modeltest.New("gemma3:12b")}, loaded: map[string]bool{}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	be := &OllamaBackend{URL: srv.URL, Footprints: map[string]int64{"qwen3:8b": 6 << 30, "gemma3:12b": 9 << 30}}
	m := startManager(t, Device{Backend: be})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, model := range []string{"qwen3:8b", "gemma3:12b", "qwen3:8b"} {
		g, err := m.Acquire(ctx, model, nil)
		require.NoError(t, err)
		alive, err := be.Alive(ctx, model)
		require.NoError(t, err)
		require.True(t, alive, "listed by /api/ps")
		got, err := complete(ctx, g.Endpoint, model)
		require.NoError(t, err)
		require.Equal(t, model, got)
		g.Release()
	}
	require.Equal(t, 1, d.peak, "the manager unloaded (keep_alive 0) before every load")
	alive, err := be.Alive(ctx, "gemma3:12b")
	require.NoError(t, err)
	require.False(t, alive)
	_, err = m.Acquire(ctx, "nope:1b", nil)
	require.ErrorIs(t, err, ErrLoadFailed)
	require.ErrorContains(t, err, "not found")
}
