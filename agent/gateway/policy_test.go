package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/gpu"
	"privateassistant/agent/harness"
	"privateassistant/modeltest"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// openFence serves every request on one endpoint (the tool policy, not the GPU fence, is
// under test here).
type openFence struct{ endpoint string }

func (f openFence) Serve(run, model string, gen int64) (gpu.Serving, error) {
	return gpu.Serving{Endpoint: f.endpoint, Generation: 1}, nil
}

type policyEnv struct {
	gw      *httptest.Server
	backend *modeltest.Backend
	sink    *memSink
	mu      sync.Mutex
	bodies  []map[string]json.RawMessage // what reached the model
	loads   atomic.Int64
}

// newPolicyEnv: route "heavy" on an open fence in front of the scripted model (which
// records each body it gets); run "coder" may use the file toolset, run "chatter" nothing,
// run "broken" has a policy that cannot be read, any other run has no bindings.
func newPolicyEnv(t *testing.T) *policyEnv {
	e := &policyEnv{backend: modeltest.New("m"), sink: &memSink{}}
	e.backend.TokenDelay = time.Millisecond
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		var body map[string]json.RawMessage
		_ = json.Unmarshal(b, &body)
		e.mu.Lock()
		e.bodies = append(e.bodies, body)
		e.mu.Unlock()
		r.Body = io.NopCloser(bytes.NewReader(b))
		e.backend.ServeHTTP(w, r)
	}))
	t.Cleanup(up.Close)
	cache := &PolicyCache{Load: func(_ context.Context, run string) (runconfig.ToolPolicy, error) {
		e.loads.Add(1)
		switch run {
		case "coder":
			return runconfig.ToolPolicy{"file"}, nil
		case "chatter":
			return runconfig.ToolPolicy{}, nil
		case "broken":
			return nil, errors.New("appwrite is down")
		}
		return nil, ErrUnknownRun
	}}
	g := &Gateway{APIKey: gatewayKey,
		Routes: func() map[string]Route {
			return map[string]Route{"heavy": {Alias: "heavy", Device: "d", Model: "m", Budget: 65536}}
		},
		Devices: map[string]Fence{"d": openFence{endpoint: up.URL + "/v1"}},
		Usage:   e.sink, Tools: cache.Policy}
	e.gw = httptest.NewServer(g)
	t.Cleanup(e.gw.Close)
	return e
}

func (e *policyEnv) lastBody(t *testing.T) map[string]json.RawMessage {
	e.mu.Lock()
	defer e.mu.Unlock()
	require.NotEmpty(t, e.bodies, "nothing reached the model")
	return e.bodies[len(e.bodies)-1]
}

func (e *policyEnv) upstreamCalls() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.bodies)
}

func toolDefs(names ...string) []any {
	var out []any
	for _, n := range names {
		out = append(out, map[string]any{"type": "function", "function": map[string]any{"name": n, "parameters": map[string]any{"type": "object"}}})
	}
	return out
}

// post sends a completion as run (X-PA-Run when set) saying text, with every tool Hermes
// offers in its default api_server setup.
func (e *policyEnv) post(t *testing.T, model, run, text string, stream bool, extra map[string]any) (*http.Response, string) {
	body := map[string]any{"model": model, "stream": stream,
		"messages": []any{map[string]any{"role": "user", "content": text}},
		"tools":    toolDefs("terminal", "process_manage", "read_file", "write_file", "patch", "search_files", "web_search")}
	for k, v := range extra {
		body[k] = v
	}
	req, _ := http.NewRequest("POST", e.gw.URL+"/v1/chat/completions", bytes.NewReader(mustJSON(body)))
	req.Header.Set("Authorization", "Bearer "+gatewayKey)
	if run != "" {
		req.Header.Set("X-PA-Run", run)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func forwardedTools(t *testing.T, body map[string]json.RawMessage) []string {
	raw, ok := body["tools"]
	if !ok {
		return nil
	}
	var list []json.RawMessage
	require.NoError(t, json.Unmarshal(raw, &list))
	var names []string
	for _, x := range list {
		names = append(names, toolName(x))
	}
	return names
}

func TestPolicyRemovesToolsOutsideTheRunsPolicy(t *testing.T) {
	e := newPolicyEnv(t)
	resp, body := e.post(t, "heavy", "coder", "hello", false, map[string]any{
		"tool_choice": map[string]any{"type": "function", "function": map[string]any{"name": "terminal"}}, "parallel_tool_calls": true})
	require.Equal(t, 200, resp.StatusCode, body)
	sent := e.lastBody(t)
	require.Equal(t, []string{"read_file", "write_file", "patch", "search_files"}, forwardedTools(t, sent), "only the file toolset reaches the model")
	require.JSONEq(t, `"auto"`, string(sent["tool_choice"]), "a choice naming a removed tool is not forced")

	resp, body = e.post(t, "heavy", "chatter", "hello", false, map[string]any{"tool_choice": "required", "parallel_tool_calls": true,
		"functions": []any{map[string]any{"name": "terminal"}}, "function_call": map[string]any{"name": "terminal"}})
	require.Equal(t, 200, resp.StatusCode, body)
	sent = e.lastBody(t)
	for _, k := range []string{"tools", "tool_choice", "parallel_tool_calls", "functions", "function_call"} {
		require.NotContains(t, sent, k, "no tool reaches the model (%s)", k)
	}
	// A request naming no run, or a run never admitted, is not served at all (binding.go).
	for run, code := range map[string]string{"": "run_binding_required", "never-admitted": "unknown_run"} {
		n := e.upstreamCalls()
		resp, body = e.post(t, "heavy", run, "hello", false, nil)
		require.Equal(t, 403, resp.StatusCode, body)
		require.Contains(t, body, code)
		require.Equal(t, n, e.upstreamCalls())
	}

	// The run's policy unreadable: refused, nothing served without it.
	n := e.upstreamCalls()
	resp, body = e.post(t, "heavy", "broken", "hello", false, nil)
	require.Equal(t, 503, resp.StatusCode)
	require.Contains(t, body, "policy_unavailable")
	require.Equal(t, n, e.upstreamCalls())

	// A run's policy is read once.
	before := e.loads.Load()
	for i := 0; i < 3; i++ {
		resp, _ = e.post(t, "heavy", "coder", "hello", false, nil)
		require.Equal(t, 200, resp.StatusCode)
	}
	require.Equal(t, before, e.loads.Load(), "cached after the first read")
}

func TestPolicyRefusesAnAnswerCallingAForbiddenTool(t *testing.T) {
	e := newPolicyEnv(t)
	e.backend.SetScript("#rm", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{"Cleaning", " up."},
		ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: `{"command":"rm -rf /srv/data"}`}}}}})
	e.backend.SetScript("#write", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{"Writing."},
		ToolCalls: []modeltest.ToolCall{{Name: "write_file", Arguments: `{"path":"notes.md","content":"x"}`}}}}})

	// Not streamed: the answer without its calls, ending with the refusal.
	for _, run := range []string{"coder", "chatter"} {
		resp, body := e.post(t, "heavy", run, "go #rm", false, nil)
		require.Equal(t, 200, resp.StatusCode, "run %q: %s", run, body)
		require.NotContains(t, body, "rm -rf", "nothing of the call reaches the caller")
		require.NotContains(t, body, "tool_calls")
		var c struct {
			Choices []struct {
				Message      struct{ Content string }
				FinishReason string `json:"finish_reason"`
			}
		}
		require.NoError(t, json.Unmarshal([]byte(body), &c))
		require.Len(t, c.Choices, 1)
		require.Equal(t, "stop", c.Choices[0].FinishReason)
		require.True(t, strings.HasPrefix(c.Choices[0].Message.Content, "Cleaning up.\n\n[Refused:"), c.Choices[0].Message.Content)
		require.Contains(t, c.Choices[0].Message.Content, `"terminal"`)
	}
	resp, body := e.post(t, "heavy", "coder", "go #write", false, nil)
	require.Equal(t, 200, resp.StatusCode, "an allowed call passes")
	require.Contains(t, body, `"write_file"`)

	// Streamed: the text before the call passes, the chunk naming the tool does not; the
	// answer ends with the refusal, "stop" and [DONE].
	for _, run := range []string{"coder", "chatter"} {
		resp, body = e.post(t, "heavy", run, "go #rm", true, nil)
		require.Equal(t, 200, resp.StatusCode)
		require.NotContains(t, body, "rm -rf")
		require.NotContains(t, body, "tool_calls")
		var text strings.Builder
		var finish []string
		sc := bufio.NewScanner(strings.NewReader(body))
		var lines []string
		for sc.Scan() {
			l, ok := strings.CutPrefix(sc.Text(), "data: ")
			if !ok {
				continue
			}
			lines = append(lines, l)
			var ch struct {
				Choices []struct {
					Delta        struct{ Content string }
					FinishReason *string `json:"finish_reason"`
				}
			}
			if json.Unmarshal([]byte(l), &ch) == nil {
				for _, c := range ch.Choices {
					text.WriteString(c.Delta.Content)
					if c.FinishReason != nil {
						finish = append(finish, *c.FinishReason)
					}
				}
			}
		}
		require.Equal(t, "[DONE]", lines[len(lines)-1])
		require.Equal(t, []string{"stop"}, finish, "one end, and not tool_calls")
		require.True(t, strings.HasPrefix(text.String(), "Cleaning up.\n\n[Refused:"), text.String())
		require.Contains(t, text.String(), `"terminal"`)
	}
	resp, body = e.post(t, "heavy", "coder", "go #write", true, nil)
	require.Equal(t, 200, resp.StatusCode)
	require.Contains(t, body, `"write_file"`)
	require.Contains(t, body, "[DONE]")

	require.Eventually(t, func() bool {
		refused := map[string]int{}
		for _, u := range e.sink.All() {
			refused[u.RefusedTool]++
		}
		return refused["terminal"] == 4
	}, 5*time.Second, 5*time.Millisecond, "every refusal is recorded")
}

// A Hermes run names itself through its model, "<alias>@<run>": the route is the alias
// and the policy the run's.
func TestPolicyRunNamedByTheModel(t *testing.T) {
	e := newPolicyEnv(t)
	resp, body := e.post(t, "heavy@coder", "", "hello", true, nil)
	require.Equal(t, 200, resp.StatusCode, body)
	sent := e.lastBody(t)
	require.JSONEq(t, `"m"`, string(sent["model"]), "the alias maps to the backend model")
	require.Equal(t, []string{"read_file", "write_file", "patch", "search_files"}, forwardedTools(t, sent))
	us := e.sink.All()
	require.Equal(t, "coder", us[len(us)-1].Run)
	require.Equal(t, "heavy", us[len(us)-1].Alias)

	resp, _ = e.post(t, "heavy@coder", "chatter", "hello", false, nil)
	require.Equal(t, 400, resp.StatusCode, "a model naming another run than the request is refused")
	resp, _ = e.post(t, "nope@coder", "", "hello", false, nil)
	require.Equal(t, 404, resp.StatusCode)
}

func TestRestrictToolsAndCalledTools(t *testing.T) {
	body := map[string]json.RawMessage{
		"tools":       mustJSON(toolDefs("terminal", "read_file")),
		"tool_choice": json.RawMessage(`"required"`),
	}
	require.Equal(t, []string{"terminal"}, restrictTools(body, runconfig.ToolPolicy{"read_file"}))
	require.JSONEq(t, `"required"`, string(body["tool_choice"]), "a choice naming no tool stays")
	body["tools"] = json.RawMessage(`"not a list"`)
	require.Equal(t, []string{"tools (unreadable)"}, restrictTools(body, runconfig.ToolPolicy{"read_file"}))
	require.NotContains(t, body, "tools")
	require.NotContains(t, body, "tool_choice")

	answer := []byte(`{"choices":[{"message":{"tool_calls":[{"function":{"name":"read_file"}},{"function":{"name":"patch"}}]}}]}`)
	require.Equal(t, []string{"read_file", "patch"}, calledTools(answer))
	require.Equal(t, "patch", forbiddenCall(answer, runconfig.ToolPolicy{"read_file"}))
	require.Equal(t, "", forbiddenCall(answer, runconfig.ToolPolicy{"file"}))
	require.Equal(t, "memory", forbiddenCall([]byte(`{"choices":[{"delta":{"function_call":{"name":"memory"}}}]}`), runconfig.ToolPolicy{"file"}))
	require.Equal(t, "", forbiddenCall([]byte(`{"choices":[{"delta":{"content":"tool_calls are fine to mention"}}]}`), nil))

	alias, run := splitRunModel("heavy@r1")
	require.Equal(t, [2]string{"heavy", "r1"}, [2]string{alias, run})
	for _, m := range []string{"heavy", "@r1", "heavy@"} {
		_, run = splitRunModel(m)
		require.Empty(t, run, m)
	}
}

// The direct harness through the gateway: the gateway refuses the streamed answer and
// the run's answer ends with the refusal, although the harness's own policy would allow
// the tool; an allowed turn completes.
func TestDirectHarnessThroughTheGateway(t *testing.T) {
	e := newPolicyEnv(t)
	e.backend.SetScript("#rm", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{"Cleaning", " up."},
		ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: `{"command":"rm -rf /srv/data"}`}}}}})
	d := &harness.Direct{BaseURL: e.gw.URL + "/v1", APIKey: gatewayKey}
	run := func(key, input string) harness.Event {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		att, err := d.Submit(ctx, harness.Submission{Key: key, Input: input, Model: "heavy", Tools: runconfig.ToolPolicy{"terminal", "file"}})
		require.NoError(t, err)
		st, err := d.Stream(ctx, att.NativeRunID, -1)
		require.NoError(t, err)
		for {
			ev, err := st.Next()
			require.NoError(t, err)
			if harness.Terminal(ev.Kind) {
				return ev
			}
		}
	}
	ev := run("coder", "go #rm")
	require.Equal(t, harness.KindCompleted, ev.Kind, "the gateway's refusal ends the answer")
	require.Equal(t, "Cleaning up.\n\n"+refusalNotice("terminal", "coder"), ev.Text)
	// Usage is recorded once the answer is written: wait for it.
	require.Eventually(t, func() bool {
		us := e.sink.All()
		return len(us) == 1 && us[0].Run == "coder" && us[0].RefusedTool == "terminal"
	}, 5*time.Second, 5*time.Millisecond, "the direct harness names its run")

	ev = run("chatter", "hello")
	require.Equal(t, harness.KindCompleted, ev.Kind)
}

// The agent's policy source reads the bindings pinned at admission, once per run.
func TestBindingPolicies(t *testing.T) {
	env := schematest.New(t)
	ctx := context.Background()
	_, err := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).Create(ctx, "r1", "", &schema.RunBinding{
		OwnerID: "u1", RunID: "r1", ConversationID: "c1", MessageID: "m1", ContextSnapshotID: "s1",
		HarnessProfileID: "h", HarnessRevision: 1, RouteID: "chat", RouteRevision: 1, Queue: "q", ToolPolicy: schema.Ptr(`["file"]`)})
	require.NoError(t, err)
	_, err = schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).Create(ctx, "r2", "", &schema.RunBinding{
		OwnerID: "u1", RunID: "r2", ConversationID: "c1", MessageID: "m2", ContextSnapshotID: "s2",
		HarnessProfileID: "h", HarnessRevision: 1, RouteID: "chat", RouteRevision: 1, Queue: "q", ToolPolicy: schema.Ptr(`not json`)})
	require.NoError(t, err)
	reads := 0
	pol := BindingPolicies(func() *schema.Store { reads++; return env.Store })
	p, err := pol(ctx, "r1")
	require.NoError(t, err)
	require.True(t, p.Allows("write_file"))
	require.False(t, p.Allows("terminal"))
	_, _ = pol(ctx, "r1")
	require.Equal(t, 1, reads, "cached")
	p, err = pol(ctx, "r2")
	require.NoError(t, err)
	require.False(t, p.Allows("write_file"), "an unreadable policy allows nothing")
	for _, id := range []string{"missing", strings.Repeat("x", 5000), "../r1"} {
		_, err = pol(ctx, id)
		require.ErrorIs(t, err, ErrUnknownRun, id)
	}
}

// Hermes finds a tagged run model's context budget in /v1/models by the first id the model
// contains: the longest alias comes first, so "chat-v2@r1" gets chat-v2's budget.
func TestModelsListLongestAliasFirst(t *testing.T) {
	g := &Gateway{APIKey: gatewayKey, Routes: func() map[string]Route {
		return map[string]Route{"chat": {Alias: "chat", Budget: 65536}, "chat-v2": {Alias: "chat-v2", Budget: 131072}, "work": {Alias: "work", Budget: 98304}}
	}}
	srv := httptest.NewServer(g)
	t.Cleanup(srv.Close)
	req, _ := http.NewRequest("GET", srv.URL+"/v1/models", nil)
	req.Header.Set("Authorization", "Bearer "+gatewayKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var ms struct {
		Data []struct {
			ID            string `json:"id"`
			ContextLength int64  `json:"context_length"`
		}
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&ms))
	var ids []string
	for _, m := range ms.Data {
		ids = append(ids, m.ID)
	}
	require.Equal(t, []string{"chat-v2", "chat", "work"}, ids)
	// Hermes's lookup: exact id, else the first entry whose id the model contains.
	lookup := func(model string) int64 {
		for _, m := range ms.Data {
			if m.ID == model {
				return m.ContextLength
			}
		}
		for _, m := range ms.Data {
			if strings.Contains(model, m.ID) || strings.Contains(m.ID, model) {
				return m.ContextLength
			}
		}
		return 0
	}
	require.Equal(t, int64(131072), lookup("chat-v2@r0123abcd"))
	require.Equal(t, int64(65536), lookup("chat@r0123abcd"))
	require.Equal(t, int64(98304), lookup("work@r0123abcd"))
}
