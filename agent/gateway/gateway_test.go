package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/gpu"
	"privateassistant/modeltest"
	"privateassistant/runconfig"
)

const (
	gatewayKey  = "gw-key-for-harnesses"
	upstreamKey = "upstream-secret-never-shown"
)

type memSink struct {
	mu sync.Mutex
	us []Usage
}

func (s *memSink) Record(_ context.Context, u Usage) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.us = append(s.us, u)
}

func (s *memSink) All() []Usage {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]Usage(nil), s.us...)
}

type env struct {
	gw      *httptest.Server
	backend *modeltest.Backend
	mgr     *gpu.Manager
	sink    *memSink
	remote  *httptest.Server
}

func newEnv(t *testing.T, opts ...func(*gpu.Device)) *env {
	b := modeltest.New("qwen3-30b-q4")
	b.APIKey = upstreamKey
	b.TokenDelay = time.Millisecond
	up := httptest.NewServer(b)
	t.Cleanup(up.Close)
	dev := gpu.Device{Name: "rx7900", Backend: &gpu.UpstreamBackend{URL: up.URL + "/v1", APIKey: upstreamKey}}
	for _, o := range opts {
		o(&dev)
	}
	mgr := gpu.NewManager(dev)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, mgr.Start(ctx))
	t.Cleanup(func() { cancel(); mgr.Stop() })
	// A remote endpoint that misbehaves by echoing its credential back.
	remote := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(500)
		_, _ = io.WriteString(w, `{"error":{"message":"bad credential `+strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")+`"}}`)
	}))
	t.Cleanup(remote.Close)
	sink := &memSink{}
	g := &Gateway{
		APIKey: gatewayKey,
		Routes: func() map[string]Route {
			return map[string]Route{
				"heavy":      {Alias: "heavy", Device: "rx7900", Model: "qwen3-30b-q4", Budget: 65536},
				"elsewhere":  {Alias: "elsewhere", Device: "arc", Model: "x", Budget: 65536},
				"cloud":      {Alias: "cloud", Remote: true, Enabled: false, Endpoint: remote.URL + "/v1", Key: "cloud-key"},
				"cloud-on":   {Alias: "cloud-on", Remote: true, Enabled: true, Endpoint: remote.URL + "/v1", Key: "cloud-key-2", Budget: 131072},
				"unmanaged!": {Alias: "unmanaged!", Device: "nowhere", Model: "y"},
			}
		},
		Devices:     map[string]Fence{"rx7900": mgr},
		UpstreamKey: func(string) string { return upstreamKey },
		Usage:       sink,
		// Every run here may search the web (policy_test.go tests the policy itself).
		Tools: func(context.Context, string) (runconfig.ToolPolicy, error) { return runconfig.ToolPolicy{"web"}, nil },
	}
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	return &env{gw: gw, backend: b, mgr: mgr, sink: sink, remote: remote}
}

func (e *env) do(t *testing.T, method, path, key string, body any) (*http.Response, string) {
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, e.gw.URL+path, rd)
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func chatBody(model string, stream bool) map[string]any {
	return map[string]any{"model": model, "stream": stream,
		"messages": []any{map[string]any{"role": "user", "content": "hello gateway"}},
		"tools":    []any{map[string]any{"type": "function", "function": map[string]any{"name": "web_search", "parameters": map[string]any{"type": "object"}}}}}
}

func TestGatewayRefusals(t *testing.T) {
	e := newEnv(t)
	resp, _ := e.do(t, "GET", "/v1/models", "", nil)
	require.Equal(t, 401, resp.StatusCode)
	resp, _ = e.do(t, "GET", "/v1/models", upstreamKey, nil)
	require.Equal(t, 401, resp.StatusCode, "the upstream key is not the gateway's key")

	// Every refusal below names a run (one naming none is refused first: binding_test.go).
	const chat = "/runs/run-x/v1/chat/completions"
	resp, body := e.do(t, "POST", chat, gatewayKey, chatBody("heavy", false))
	require.Equal(t, 409, resp.StatusCode)
	require.Contains(t, body, "route_not_leased")
	require.Zero(t, e.backend.Calls(), "nothing reached the model without a lease")

	resp, body = e.do(t, "POST", chat, gatewayKey, chatBody("elsewhere", false))
	require.Equal(t, 409, resp.StatusCode)
	require.Contains(t, body, "does not manage")
	resp, body = e.do(t, "POST", chat, gatewayKey, chatBody("cloud", false))
	require.Equal(t, 409, resp.StatusCode)
	require.Contains(t, body, "route_disabled", "no cloud fallback unless the route is enabled")
	resp, body = e.do(t, "POST", chat, gatewayKey, chatBody("nope", false))
	require.Equal(t, 404, resp.StatusCode)
	require.Contains(t, body, "model_not_found")
	resp, _ = e.do(t, "POST", "/v1/chat/completions", gatewayKey, "not an object")
	require.Equal(t, 400, resp.StatusCode)
	resp, _ = e.do(t, "POST", "/v1/chat/completions", gatewayKey, map[string]any{"messages": []any{}})
	require.Equal(t, 400, resp.StatusCode)

	// A remote route that echoes its credential: the caller never sees it.
	resp, body = e.do(t, "POST", chat, gatewayKey, chatBody("cloud-on", false))
	require.Equal(t, 500, resp.StatusCode)
	require.NotContains(t, body, "cloud-key-2")
	require.Contains(t, body, "[redacted]")
}

func TestGatewayModelsReportBudget(t *testing.T) {
	e := newEnv(t)
	resp, body := e.do(t, "GET", "/v1/models", gatewayKey, nil)
	require.Equal(t, 200, resp.StatusCode)
	var ms struct {
		Data []struct {
			ID            string `json:"id"`
			ContextLength int64  `json:"context_length"`
		}
	}
	require.NoError(t, json.Unmarshal([]byte(body), &ms))
	got := map[string]int64{}
	for _, m := range ms.Data {
		got[m.ID] = m.ContextLength
	}
	require.Equal(t, int64(65536), got["heavy"], "the route's measured budget meets Hermes's 64K floor honestly")
	require.NotContains(t, got, "cloud", "a disabled remote route is not offered")
	require.NotContains(t, body, upstreamKey)
}

func TestGatewayServesLeasedRoute(t *testing.T) {
	e := newEnv(t, func(d *gpu.Device) { d.Slots = 2 })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := e.mgr.AcquireFor(ctx, "run-42", "qwen3-30b-q4", nil)
	require.NoError(t, err)
	g43, err := e.mgr.AcquireFor(ctx, "run-43", "qwen3-30b-q4", nil)
	require.NoError(t, err)
	defer g43.Release()

	resp, body := e.do(t, "POST", "/runs/run-42/v1/chat/completions", gatewayKey, chatBody("heavy", false))
	require.Equal(t, 200, resp.StatusCode, body)
	require.NotContains(t, body, upstreamKey)
	last := e.backend.Requests()[len(e.backend.Requests())-1]
	require.Equal(t, "qwen3-30b-q4", last.Model, "the alias is mapped to the backend's model")
	require.Equal(t, 1, last.Tools, "tools are passed through")

	// Streaming: events arrive as SSE, usage is recorded from the final chunk.
	req, _ := http.NewRequest("POST", e.gw.URL+"/v1/chat/completions", bytes.NewReader(mustJSON(chatBody("heavy", true))))
	req.Header.Set("Authorization", "Bearer "+gatewayKey)
	req.Header.Set("X-PA-Run", "run-43")
	sresp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	require.Equal(t, "text/event-stream", strings.Split(sresp.Header.Get("Content-Type"), ";")[0])
	sc := bufio.NewScanner(sresp.Body)
	chunks, done := 0, false
	for sc.Scan() {
		line := sc.Text()
		require.NotContains(t, line, upstreamKey)
		if strings.HasPrefix(line, "data: [DONE]") {
			done = true
		} else if strings.HasPrefix(line, "data: ") {
			chunks++
		}
	}
	sresp.Body.Close()
	require.True(t, done)
	require.Greater(t, chunks, 1)

	us := e.sink.All()
	require.GreaterOrEqual(t, len(us), 2)
	require.Equal(t, "run-42", us[0].Run)
	require.Equal(t, "heavy", us[0].Alias)
	require.Equal(t, "qwen3-30b-q4", us[0].EffectiveModel)
	require.Equal(t, g.Generation, us[0].Generation)
	require.Positive(t, us[0].CompletionTokens)
	require.Equal(t, "run-43", us[1].Run)
	require.True(t, us[1].Stream)
	require.Positive(t, us[1].CompletionTokens, "usage read from the stream's final chunk")
	require.Equal(t, "qwen3-30b-q4", us[1].EffectiveModel)

	// A caller naming a stale generation is refused; the current one is served.
	stale := func(gen string) int {
		req, _ := http.NewRequest("POST", e.gw.URL+"/v1/chat/completions", bytes.NewReader(mustJSON(chatBody("heavy", false))))
		req.Header.Set("Authorization", "Bearer "+gatewayKey)
		req.Header.Set("X-PA-Run", "run-42")
		req.Header.Set(GenerationHeader, gen)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 409, stale(strconv.FormatInt(g.Generation+1, 10)))
	require.Equal(t, 200, stale(strconv.FormatInt(g.Generation, 10)))

	// Once the run's grant ends, its requests are refused: no silent reuse of another
	// run's grant.
	g.Release()
	require.Eventually(t, func() bool {
		resp, _ := e.do(t, "POST", "/runs/run-42/v1/chat/completions", gatewayKey, chatBody("heavy", false))
		return resp.StatusCode == 409
	}, 5*time.Second, 10*time.Millisecond)
	resp, _ = e.do(t, "POST", "/runs/run-43/v1/chat/completions", gatewayKey, chatBody("heavy", false))
	require.Equal(t, 200, resp.StatusCode)
	g43.Release()
	require.Eventually(t, func() bool {
		resp, _ := e.do(t, "POST", "/runs/run-43/v1/chat/completions", gatewayKey, chatBody("heavy", false))
		return resp.StatusCode == 409
	}, 5*time.Second, 10*time.Millisecond)
}

func mustJSON(v any) []byte {
	b, _ := json.Marshal(v)
	return b
}

// chat sends a non-streamed completion for route "heavy" as run (path-scoped when run is
// set) with an optional generation header, and returns the status and the error code.
func (e *env) chat(t *testing.T, run, gen string) (int, string) {
	path := "/v1/chat/completions"
	if run != "" {
		path = "/runs/" + run + path
	}
	req, _ := http.NewRequest("POST", e.gw.URL+path, bytes.NewReader(mustJSON(chatBody("heavy", false))))
	req.Header.Set("Authorization", "Bearer "+gatewayKey)
	if gen != "" {
		req.Header.Set(GenerationHeader, gen)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var body struct {
		Error struct{ Code string } `json:"error"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&body)
	return resp.StatusCode, body.Error.Code
}

// TestGatewayRefusesStaleGeneration: a request naming a run is served only under that
// run's own live grant at the current generation, with or without the generation header.
// A run whose grant expired (its holder stopped renewing) is refused although another
// run's grant still covers the model; a wrong generation header is refused even while the
// run's grant lives.
func TestGatewayRefusesStaleGeneration(t *testing.T) {
	e := newEnv(t, func(d *gpu.Device) { d.Slots, d.GrantTTL = 2, 400*time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	ga, err := e.mgr.AcquireFor(ctx, "run-a", "qwen3-30b-q4", nil)
	require.NoError(t, err)
	defer ga.Release()
	gb, err := e.mgr.AcquireFor(ctx, "run-b", "qwen3-30b-q4", nil)
	require.NoError(t, err)
	defer gb.Release()
	genA := strconv.FormatInt(ga.Generation, 10)
	require.NoError(t, ga.Renew()) // run a beats once, then stops

	code, _ := e.chat(t, "run-a", "")
	require.Equal(t, 200, code, "the run's own live grant serves it")
	code, _ = e.chat(t, "run-a", genA)
	require.Equal(t, 200, code)
	code, errCode := e.chat(t, "run-a", strconv.FormatInt(ga.Generation+1, 10))
	require.Equal(t, 409, code, "a generation the run does not hold is refused")
	require.Equal(t, "stale_generation", errCode)
	code, errCode = e.chat(t, "run-z", "")
	require.Equal(t, 409, code, "a run holding no grant is refused although others cover the model")
	require.Equal(t, "route_not_leased", errCode)
	code, _ = e.chat(t, "run-a", "0")
	require.Equal(t, 400, code)

	// Run b keeps beating; run a stops: its grant expires and its requests go stale.
	beat, stopBeat := context.WithCancel(ctx)
	defer stopBeat()
	beats := make(chan struct{})
	go func() {
		defer close(beats)
		tk := time.NewTicker(50 * time.Millisecond)
		defer tk.Stop()
		for {
			select {
			case <-beat.Done():
				return
			case <-tk.C:
				_ = gb.Renew()
			}
		}
	}()
	select {
	case <-ga.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("an unrenewed grant never expired")
	}
	require.Contains(t, ga.Reason(), "expired")
	require.ErrorIs(t, ga.Renew(), gpu.ErrGrantEnded)
	code, errCode = e.chat(t, "run-a", "")
	require.Equal(t, 409, code, "the expired run is refused on every request, header or not")
	require.Equal(t, "stale_generation", errCode)
	code, _ = e.chat(t, "run-b", "")
	require.Equal(t, 200, code, "the run that kept beating is served")
	stopBeat()
	<-beats
}
