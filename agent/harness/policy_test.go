package harness_test

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

	"privateassistant/agent/harness"
	"privateassistant/hermes"
	"privateassistant/modeltest"
	"privateassistant/runconfig"
)

// recorder passes requests to next and keeps their bodies and run headers.
type recorder struct {
	next   http.Handler
	mu     sync.Mutex
	bodies []map[string]any
	runs   []string
}

func (r *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	b, _ := io.ReadAll(req.Body)
	var m map[string]any
	_ = json.Unmarshal(b, &m)
	r.mu.Lock()
	r.bodies = append(r.bodies, m)
	r.runs = append(r.runs, req.Header.Get(harness.RunHeader))
	r.mu.Unlock()
	req.Body = io.NopCloser(bytes.NewReader(b))
	r.next.ServeHTTP(w, req)
}

func (r *recorder) last() (map[string]any, string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.bodies[len(r.bodies)-1], r.runs[len(r.runs)-1]
}

// finish follows a direct run to its terminal event.
func finish(t *testing.T, d *harness.Direct, key string, sub harness.Submission) harness.Event {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	sub.Key = key
	att, err := d.Submit(ctx, sub)
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

func scripted() *modeltest.Backend {
	m := modeltest.New("m")
	m.TokenDelay = time.Millisecond
	m.SetScript("#rm", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{"Cleaning", " up."},
		ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: `{"command":"rm -rf /srv/data"}`}}}}})
	m.SetScript("#read", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{"Reading."},
		ToolCalls: []modeltest.ToolCall{{Name: "read_file", Arguments: `{"path":"a.txt"}`}}}}})
	return m
}

// The direct harness names its run, offers no tool, and refuses an answer calling a tool
// outside the run's policy itself (against the model directly, no gateway between).
func TestDirectRefusesToolsOutsideThePolicy(t *testing.T) {
	rec := &recorder{next: scripted()}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	d := &harness.Direct{BaseURL: srv.URL + "/v1"}

	ev := finish(t, d, "run-a", harness.Submission{Input: "go #rm", Model: "chat", Tools: runconfig.ToolPolicy{"file"}})
	require.Equal(t, harness.KindFailed, ev.Kind)
	require.Contains(t, ev.Error, `"terminal"`)
	require.Contains(t, ev.Error, "tool policy does not allow")
	body, run := rec.last()
	require.Equal(t, "run-a", run, "the run is named to the endpoint")
	require.NotContains(t, body, "tools", "the direct harness offers no tool")

	ev = finish(t, d, "run-b", harness.Submission{Input: "go #rm", Model: "chat"})
	require.Equal(t, harness.KindFailed, ev.Kind, "no policy allows nothing")

	ev = finish(t, d, "run-c", harness.Submission{Input: "go #read", Model: "chat", Tools: runconfig.ToolPolicy{"file"}})
	require.Equal(t, harness.KindCompleted, ev.Kind, "a call inside the policy is not refused (and not executed)")
	require.Equal(t, "Reading.", ev.Text)
}

// The Hermes harness submits each run with the model "<alias>@<run id>", the same on
// every attempt (the gateway reads the run from it).
func TestHermesSubmitNamesTheRunInTheModel(t *testing.T) {
	var mu sync.Mutex
	var models []string
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/sessions", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(201)
		_, _ = io.WriteString(w, `{"id":"s1","object":"hermes.session"}`)
	})
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Model string }
		_ = json.NewDecoder(r.Body).Decode(&body)
		mu.Lock()
		models = append(models, body.Model)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(202)
		_, _ = io.WriteString(w, `{"run_id":"run_1","status":"started"}`)
	})
	serveCapable(mux)
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	h := &harness.Hermes{Client: &hermes.Client{BaseURL: s.URL, APIKey: "k-0123456789abcdef"}}
	for i := 0; i < 2; i++ {
		_, err := h.Submit(context.Background(), harness.Submission{Key: "r42", Input: "x", Model: "work", SessionSeed: "pa-r42"})
		require.NoError(t, err)
	}
	require.Equal(t, []string{"work@r42", "work@r42"}, models)
	require.Equal(t, "work", harness.TagModel("work", ""))
	require.Equal(t, "", harness.TagModel("", "r1"))
}

// fakeTools is a ToolCaller that records its calls.
type fakeTools struct {
	mu    sync.Mutex
	calls []string
}

func (f *fakeTools) Tools(context.Context) ([]harness.ToolDef, error) {
	return []harness.ToolDef{{Name: "mcp__pa__enqueue_job", Description: "enqueue a job", Parameters: json.RawMessage(`{"type":"object"}`)},
		{Name: "mcp__pa__list_jobs", Description: "list jobs", Parameters: json.RawMessage(`{"type":"object"}`)}}, nil
}

func (f *fakeTools) Call(_ context.Context, name, args string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls = append(f.calls, name+" "+args)
	return `{"job":"r-job-1","status":"queued"}`, nil
}

// With Tools, the direct harness offers the model exactly the tools the run's policy
// allows, runs a call through Tools, answers the model with the result and streams its
// next answer; tool events mark the call; the run's answer is both turns.
func TestDirectRunsTheToolsItOffers(t *testing.T) {
	m := scripted()
	m.SetScript("#delegate", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: []string{"Handing", " it", " on."}, ToolCalls: []modeltest.ToolCall{{Name: "mcp__pa__enqueue_job", Arguments: `{"role":"research","instructions":"x"}`}}},
		{FromToolResult: func(r string) []string { return []string{"Queued: ", r} }},
	}})
	rec := &recorder{next: m}
	srv := httptest.NewServer(rec)
	t.Cleanup(srv.Close)
	tools := &fakeTools{}
	d := &harness.Direct{BaseURL: srv.URL + "/v1", Tools: tools}
	pol := runconfig.ToolPolicy{"mcp__pa__enqueue_job"}

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	att, err := d.Submit(ctx, harness.Submission{Key: "run-d", Input: "please #delegate", Model: "chat", Tools: pol})
	require.NoError(t, err)
	st, err := d.Stream(ctx, att.NativeRunID, -1)
	require.NoError(t, err)
	var kinds []harness.EventKind
	var end harness.Event
	for {
		ev, err := st.Next()
		require.NoError(t, err)
		if ev.Kind != harness.KindDelta {
			kinds = append(kinds, ev.Kind)
		}
		if harness.Terminal(ev.Kind) {
			end = ev
			break
		}
	}
	require.Equal(t, harness.KindCompleted, end.Kind, end.Error)
	require.Equal(t, []harness.EventKind{harness.KindToolStarted, harness.KindToolCompleted, harness.KindCompleted}, kinds)
	require.Equal(t, []string{`mcp__pa__enqueue_job {"role":"research","instructions":"x"}`}, tools.calls)
	require.Contains(t, end.Text, "Handing it on.")
	require.Contains(t, end.Text, "r-job-1", "the second answer read the tool's result")
	first := rec.bodies[0]
	offered, _ := json.Marshal(first["tools"])
	require.Contains(t, string(offered), "mcp__pa__enqueue_job")
	require.NotContains(t, string(offered), "list_jobs", "only what the policy allows")
	body, run := rec.last()
	require.Equal(t, "run-d", run)
	b, _ := json.Marshal(body["messages"])
	require.Contains(t, string(b), `"tool_call_id"`, "the tool's result goes back to the model")

	// A policy allowing none of them: no tools offered, and the call is refused as before.
	ev := finish(t, d, "run-e", harness.Submission{Input: "please #delegate", Model: "chat", Tools: runconfig.ToolPolicy{"file"}})
	require.Equal(t, harness.KindFailed, ev.Kind)
	body, _ = rec.last()
	require.NotContains(t, body, "tools")
	require.Len(t, tools.calls, 1)
}
