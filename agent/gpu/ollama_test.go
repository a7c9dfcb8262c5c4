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

	"privateassistant/modeltest"
	"privateassistant/queue/redistest"
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
	// refuseUnload answers an unload 500, as a wedged Ollama would.
	refuseUnload bool
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
			if o.refuseUnload {
				w.WriteHeader(500)
				_, _ = io.WriteString(w, `{"error":"unload failed"}`)
				return
			}
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

// TestModelsLeftLoadedGoWhenTheManagerTakesControl: Ollama keeps what an earlier agent
// loaded (keep_alive -1) across the agent's restart. The manager unloads the device's
// models it finds before it serves, leaves a model outside its configuration alone
// (another consumer of a shared Ollama), and a model it cannot unload leaves the device
// unknown, saying which.
func TestModelsLeftLoadedGoWhenTheManagerTakesControl(t *testing.T) {
	known := map[string]*modeltest.Backend{"qwen3:8b": modeltest.New("qwen3:8b"), "gemma3:12b": modeltest.New("gemma3:12b"), "llava:7b": modeltest.New("llava:7b")}
	foot := map[string]int64{"qwen3:8b": 6 << 30, "gemma3:12b": 9 << 30}

	d := &ollamaDouble{known: known, loaded: map[string]bool{"gemma3:12b": true, "llava:7b": true}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	be := &OllamaBackend{URL: srv.URL, Footprints: foot}
	m := startManager(t, Device{Backend: be})
	d.mu.Lock()
	require.Equal(t, map[string]bool{"llava:7b": true}, d.loaded, "the earlier agent's model is gone before the manager serves; another consumer's stays")
	d.mu.Unlock()
	require.Equal(t, PhaseIdle, m.Snapshot().Phase)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := m.Acquire(ctx, "qwen3:8b", nil)
	require.NoError(t, err)
	g.Release()

	wedged := &ollamaDouble{known: known, loaded: map[string]bool{"gemma3:12b": true}, refuseUnload: true}
	srv2 := httptest.NewServer(wedged)
	defer srv2.Close()
	m2 := startManager(t, Device{Backend: &OllamaBackend{URL: srv2.URL, Footprints: foot}})
	snap := m2.Snapshot()
	require.Equal(t, PhaseUnknown, snap.Phase)
	require.Contains(t, snap.Reason, "gemma3:12b was still loaded from before this agent took control of the device, and unloading it failed")
	require.Contains(t, snap.Reason, "pa admin gpu confirm")
}

// TestTheNextControlHolderUnloadsWhatTheLastOneLeft: on a shared Ollama, an agent that
// stops keeps its model loaded (Stop leaves models loaded); the agent that takes the
// control lease next unloads it before it serves.
func TestTheNextControlHolderUnloadsWhatTheLastOneLeft(t *testing.T) {
	rdb := redistest.Start(t).Client()
	d := &ollamaDouble{known: map[string]*modeltest.Backend{"qwen3:8b": modeltest.New("qwen3:8b"), "gemma3:12b": modeltest.New("gemma3:12b")}, loaded: map[string]bool{}}
	srv := httptest.NewServer(d)
	defer srv.Close()
	foot := map[string]int64{"qwen3:8b": 6 << 30, "gemma3:12b": 9 << 30}
	lease := func(owner string) *ControlLease {
		return &ControlLease{RDB: rdb, Device: "rx7900", Owner: owner, TTL: 600 * time.Millisecond}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ma := NewManager(Device{Name: "rx7900", Backend: &OllamaBackend{URL: srv.URL, Footprints: foot}, Lease: lease("agent-a")})
	require.NoError(t, ma.Start(ctx))
	require.Eventually(t, func() bool { return ma.Snapshot().Phase == PhaseIdle }, 5*time.Second, 10*time.Millisecond)
	g, err := ma.Acquire(ctx, "gemma3:12b", nil)
	require.NoError(t, err)
	g.Release()
	ma.Stop()
	d.mu.Lock()
	require.True(t, d.loaded["gemma3:12b"], "Stop leaves the model loaded")
	d.mu.Unlock()

	mb := NewManager(Device{Name: "rx7900", Backend: &OllamaBackend{URL: srv.URL, Footprints: foot}, Lease: lease("agent-b")})
	require.NoError(t, mb.Start(ctx))
	defer mb.Stop()
	require.Eventually(t, func() bool { return mb.Snapshot().Phase == PhaseIdle }, 5*time.Second, 10*time.Millisecond)
	d.mu.Lock()
	require.Empty(t, d.loaded, "unloaded before the new holder served")
	d.mu.Unlock()
}
