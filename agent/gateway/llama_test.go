package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/gpu"
	"privateassistant/agent/gpu/llamatest"
	"privateassistant/runconfig"
)

// TestGatewayServesARealLlamaServer: the gateway in front of a real llama-server (skipped
// when absent) answers a run's non-streamed and streamed requests, one after the other on
// kept-alive connections, and records each one's usage and the model that answered, read
// from llama-server's own answers. (BenchmarkGatewayLlamaServer measures the same path.)
func TestGatewayServesARealLlamaServer(t *testing.T) {
	bin := llamatest.Server(t)
	dir := t.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	require.NoError(t, llamatest.TinyModel{Name: "tiny", Seed: 1}.Write(model))
	base := startLlama(t, bin, model, dir)
	mgr := gpu.NewManager(gpu.Device{Name: "d", Backend: &gpu.UpstreamBackend{URL: base + "/v1", APIKey: upstreamKey}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	require.NoError(t, mgr.Start(ctx))
	defer mgr.Stop()
	g, err := mgr.AcquireFor(ctx, "run-1", "tiny", nil)
	require.NoError(t, err)
	defer g.Release()
	sink := &memSink{}
	gw := httptest.NewServer(&Gateway{APIKey: gatewayKey,
		Routes:      func() map[string]Route { return map[string]Route{"r": {Alias: "r", Device: "d", Model: "tiny"}} },
		Devices:     map[string]Fence{"d": mgr},
		UpstreamKey: func(string) string { return upstreamKey },
		Usage:       sink,
		Tools:       func(context.Context, string) (runconfig.ToolPolicy, error) { return runconfig.ToolPolicy{"file"}, nil }})
	defer gw.Close()
	for i := range 6 {
		stream := i%2 == 1
		n := 4 + i
		body := mustJSON(map[string]any{"model": "r@run-1", "stream": stream, "max_tokens": n, "ignore_eos": true,
			"tools":    toolDefs("read_file"),
			"messages": []any{map[string]any{"role": "user", "content": "Say something short."}}})
		req, _ := http.NewRequest("POST", gw.URL+"/v1/chat/completions", bytes.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+gatewayKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		out, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.NoError(t, err)
		require.Equal(t, 200, resp.StatusCode, "request %d: %s", i, out)
		if stream {
			require.True(t, strings.HasSuffix(strings.TrimSpace(string(out)), "data: [DONE]"), "%s", out)
		} else {
			require.True(t, json.Valid(out), "%s", out)
		}
		us := sink.All()
		require.Len(t, us, i+1)
		u := us[i]
		require.Equal(t, 200, u.Status, "request %d", i)
		require.Equal(t, "tiny", u.EffectiveModel, "request %d", i)
		require.Equal(t, int64(n), u.CompletionTokens, "request %d", i)
		require.Positive(t, u.PromptTokens, "request %d", i)
	}
}
