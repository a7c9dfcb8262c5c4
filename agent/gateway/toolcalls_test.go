package gateway

import (
	"bufio"
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/modeltest"
	"privateassistant/runconfig"
)

type callLog struct {
	mu    sync.Mutex
	calls map[string][]ToolCall
}

func (c *callLog) sink(_ context.Context, run string, calls []ToolCall) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.calls == nil {
		c.calls = map[string][]ToolCall{}
	}
	c.calls[run] = append(c.calls[run], calls...)
}

func (c *callLog) of(run string) []ToolCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]ToolCall(nil), c.calls[run]...)
}

// The gateway reports the tool calls of each answer it serves for a run (what the MCP job
// server matches Hermes's calls against), streamed or not, before the answer's end reaches
// the caller; never a call the policy refused, nor one of a request naming no run.
func TestGatewayReportsTheToolCallsOfEachAnswer(t *testing.T) {
	backend := modeltest.New("m")
	backend.TokenDelay = time.Millisecond
	backend.SetScript("#enqueue", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{"Queuing."},
		ToolCalls: []modeltest.ToolCall{{Name: "mcp__pa__enqueue_job", Arguments: `{"role":"research","instructions":"compare GPUs"}`}}}}})
	backend.SetScript("#rm", modeltest.Script{Turns: []modeltest.Turn{{ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: `{"command":"rm -rf /"}`}}}}})
	up := httptest.NewServer(backend)
	t.Cleanup(up.Close)
	log := &callLog{}
	g := &Gateway{APIKey: gatewayKey,
		Routes: func() map[string]Route {
			return map[string]Route{"heavy": {Alias: "heavy", Device: "d", Model: "m", Budget: 65536}}
		},
		Devices: map[string]Fence{"d": openFence{endpoint: up.URL + "/v1"}},
		Tools: func(_ context.Context, run string) (runconfig.ToolPolicy, error) {
			return runconfig.ToolPolicy{"mcp__pa__enqueue_job"}, nil
		},
		ToolCalls: log.sink}
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)

	var postStatus func(model, text string, stream bool, status int, reportedBeforeEnd func() bool) string
	// post sends text as model and, for a streamed answer, checks that the call was reported
	// before the chunk that ends the answer arrived.
	post := func(model, text string, stream bool, reportedBeforeEnd func() bool) string {
		return postStatus(model, text, stream, 200, reportedBeforeEnd)
	}
	postStatus = func(model, text string, stream bool, status int, reportedBeforeEnd func() bool) string {
		body := map[string]any{"model": model, "stream": stream,
			"messages": []any{map[string]any{"role": "user", "content": text}},
			"tools":    toolDefs("mcp__pa__enqueue_job", "terminal")}
		req, _ := http.NewRequest("POST", gw.URL+"/v1/chat/completions", bytes.NewReader(mustJSON(body)))
		req.Header.Set("Authorization", "Bearer "+gatewayKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, status, resp.StatusCode)
		var all strings.Builder
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			line := sc.Text()
			if stream && strings.Contains(line, `"finish_reason":"tool_calls"`) && reportedBeforeEnd != nil {
				require.True(t, reportedBeforeEnd(), "the call is reported before the answer ends")
			}
			all.WriteString(line + "\n")
		}
		return all.String()
	}

	post("heavy@run-a", "go #enqueue", false, nil)
	got := log.of("run-a")
	require.Len(t, got, 1)
	require.Equal(t, "mcp__pa__enqueue_job", got[0].Name)
	require.JSONEq(t, `{"role":"research","instructions":"compare GPUs"}`, got[0].Arguments)
	require.NotEmpty(t, got[0].ID)

	out := post("heavy@run-b", "go #enqueue", true, func() bool { return len(log.of("run-b")) == 1 })
	require.Contains(t, out, "[DONE]")
	got = log.of("run-b")
	require.Len(t, got, 1, "reported once")
	require.Equal(t, "mcp__pa__enqueue_job", got[0].Name)
	require.JSONEq(t, `{"role":"research","instructions":"compare GPUs"}`, got[0].Arguments)
	require.Contains(t, out, got[0].ID, "the id the harness receives")

	// A refused call is never reported; nor is a call of a request naming no run.
	for _, stream := range []bool{false, true} {
		out = post("heavy@run-c", "go #rm", stream, nil)
		require.Contains(t, out, "Refused")
		require.Contains(t, postStatus("heavy", "go #enqueue", stream, 403, nil), "run_binding_required")
	}
	require.Empty(t, log.of("run-c"))
	require.Empty(t, log.of(""))
}
