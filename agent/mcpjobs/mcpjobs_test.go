package mcpjobs

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"privateassistant/admit"
	"privateassistant/agent/gateway"
	"privateassistant/agent/memberkey"
	"privateassistant/fault"
	"privateassistant/queue/redistest"
)

const testKey = "mcp-test-key-0123456789"

// fakeAdmission answers like admit: ids derived from (owner, request id), a
// repeat answers the same ids; the role "coding" needs the label "coder".
type fakeAdmission struct {
	mu   sync.Mutex
	reqs []admit.Request
}

func (f *fakeAdmission) Admit(_ context.Context, req admit.Request) (admit.Result, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reqs = append(f.reqs, req)
	run, msg := admit.IDs(req.Owner, req.RequestID)
	if req.Role == "coding" && !slices.Contains(req.Labels, "coder") {
		return admit.Result{}, fault.E(fault.Forbidden, "role_not_allowed", `you may not use the "coding" role`, admit.ErrRoleNotAllowed)
	}
	return admit.Result{RunID: run, MessageID: msg, Role: req.Role, Status: "queued"}, nil
}

func (f *fakeAdmission) requestIDs() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []string
	for _, r := range f.reqs {
		if !slices.Contains(out, r.RequestID) {
			out = append(out, r.RequestID)
		}
	}
	return out
}

type bearer struct{ key string }

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

type setup struct {
	reg     *Registry
	adm     *fakeAdmission
	url     string
	mu      sync.Mutex
	states  map[string]RunState
	waiting chan struct{} // a call found no registration and waits for one
}

func newSetup(t *testing.T) *setup {
	rs := redistest.Start(t)
	rdb := rs.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	s := &setup{reg: &Registry{RDB: rdb, Server: "pa"}, adm: &fakeAdmission{}, states: map[string]RunState{}}
	srv := &Server{Registry: s.reg, Key: testKey, MatchWait: 200 * time.Millisecond, AllowedOrigins: []string{"http://allowed.example"},
		Runs: func(_ context.Context, run string) (Caller, error) {
			switch run {
			case "run-a", "run-a2":
				return Caller{Owner: "alice", Conversation: "conv-a"}, nil
			case "run-b":
				return Caller{Owner: "bob", Conversation: "conv-b"}, nil
			}
			return Caller{}, errors.New("no such run")
		},
		Admit: s.adm.Admit,
		Labels: func(_ context.Context, owner string) ([]string, error) {
			return map[string][]string{"bob": {"coder"}}[owner], nil
		},
		State: func(_ context.Context, run string) (RunState, error) {
			s.mu.Lock()
			defer s.mu.Unlock()
			st, ok := s.states[run]
			if !ok {
				st = RunState{Status: "queued"}
			}
			return st, nil
		}}
	s.waiting = make(chan struct{}, 1)
	s.reg.waiting = func() {
		select {
		case s.waiting <- struct{}{}:
		default:
		}
	}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	s.url = hs.URL + "/mcp"
	return s
}

// session connects the official Go SDK client, as Hermes connects (Streamable HTTP with
// the profile's static bearer header).
func (s *setup) session(t *testing.T) *mcp.ClientSession {
	c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url,
		HTTPClient: &http.Client{Transport: bearer{testKey}}, DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	t.Cleanup(func() { _ = cs.Close() })
	return cs
}

// model registers a tool call of run as the gateway does when it serves the answer.
func (s *setup) model(t *testing.T, run, id, tool string, args any) {
	b, _ := json.Marshal(args)
	n, err := s.reg.register(context.Background(), run, []gateway.ToolCall{{ID: id, Name: "mcp__pa__" + tool, Arguments: string(b)}})
	require.NoError(t, err)
	require.Equal(t, 1, n)
}

// call makes Hermes's tools/call; it returns the structured answer or the tool error.
func call(t *testing.T, cs *mcp.ClientSession, tool string, args any) (map[string]any, string) {
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: tool, Arguments: args})
	require.NoError(t, err)
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if res.IsError {
		return nil, text.String()
	}
	out := map[string]any{}
	b, _ := json.Marshal(res.StructuredContent)
	require.NoError(t, json.Unmarshal(b, &out))
	return out, ""
}

func TestToolsAreListed(t *testing.T) {
	s := newSetup(t)
	res, err := s.session(t).ListTools(context.Background(), nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	require.ElementsMatch(t, []string{"enqueue_job", "job_status", "list_jobs"}, names)
}

func TestAKeyIsRequired(t *testing.T) {
	s := newSetup(t)
	resp, err := http.Post(s.url, "application/json", strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 401, resp.StatusCode)
}

// A call no answer of a run made is refused, and admits nothing.
func TestAnUnregisteredCallIsRefused(t *testing.T) {
	s := newSetup(t)
	cs := s.session(t)
	args := map[string]any{"role": "research", "instructions": "compare GPUs"}
	_, msg := call(t, cs, "enqueue_job", args)
	require.Contains(t, msg, "does not match a tool call")
	// Registered for another tool, or other arguments: still no match.
	s.model(t, "run-a", "call_1", "enqueue_job", map[string]any{"role": "research", "instructions": "something else"})
	_, msg = call(t, cs, "enqueue_job", args)
	require.Contains(t, msg, "does not match a tool call")
	require.Empty(t, s.adm.requestIDs())
}

// One job per tool call: the call is attributed to the run whose answer made it (its
// owner, its conversation), Hermes's retry answers the same job, a second call made by
// the model is a second job; key order and unknown fields do not matter.
func TestOneJobPerToolCall(t *testing.T) {
	s := newSetup(t)
	cs := s.session(t)
	s.model(t, "run-a", "call_1", "enqueue_job", map[string]any{"instructions": "compare GPUs", "role": "research", "title": "GPUs", "extra": 1})
	args := map[string]any{"role": "research", "instructions": "compare GPUs", "title": "GPUs"}
	out, msg := call(t, cs, "enqueue_job", args)
	require.Empty(t, msg)
	want, _ := admit.IDs("alice", RequestID("run-a", "call_1"))
	require.Equal(t, want, out["job"])
	require.Equal(t, "queued", out["status"])
	req := s.adm.reqs[0]
	require.Equal(t, "alice", req.Owner)
	require.Equal(t, "conv-a", req.ConversationID)
	require.Equal(t, "research", req.Role)
	require.Contains(t, req.Text, "compare GPUs")

	again, msg := call(t, cs, "enqueue_job", args) // Hermes replays the call
	require.Empty(t, msg)
	require.Equal(t, want, again["job"])
	require.Len(t, s.adm.requestIDs(), 1, "a retry admits nothing new")

	s.model(t, "run-a", "call_2", "enqueue_job", args) // the model asks again
	second, _ := call(t, cs, "enqueue_job", args)
	require.NotEqual(t, want, second["job"])
	require.Len(t, s.adm.requestIDs(), 2)
}

// Only roles the user may use: admission's label check answers.
func TestOnlyRolesTheUserMayUse(t *testing.T) {
	s := newSetup(t)
	cs := s.session(t)
	args := map[string]any{"role": "coding", "instructions": "fix the tests"}
	s.model(t, "run-a", "call_1", "enqueue_job", args)
	_, msg := call(t, cs, "enqueue_job", args)
	require.Contains(t, msg, `you may not use the "coding" role`)
	s.model(t, "run-b", "call_1", "enqueue_job", args)
	out, msg := call(t, cs, "enqueue_job", args)
	require.Empty(t, msg)
	require.NotEmpty(t, out["job"], "bob carries the label")
}

// job_status and list_jobs answer the caller's own jobs only, with progress only in the
// units the harness reported; the same call pending for two users is refused, not guessed.
func TestStatusAndListAreTheCallersOwn(t *testing.T) {
	s := newSetup(t)
	cs := s.session(t)
	enq := func(run, id, title string) string {
		args := map[string]any{"role": "research", "instructions": "job " + title, "title": title}
		s.model(t, run, id, "enqueue_job", args)
		out, msg := call(t, cs, "enqueue_job", args)
		require.Empty(t, msg)
		return out["job"].(string)
	}
	j1 := enq("run-a", "c1", "first")
	j2 := enq("run-a2", "c2", "second")
	jb := enq("run-b", "c3", "bob's")
	total, done := int64(5), int64(2)
	s.mu.Lock()
	s.states[j1] = RunState{Status: "running", Phase: "researching", Completed: &done, Total: &total}
	s.states[j2] = RunState{Status: "running", Completed: &done} // a bare count: no progress
	s.mu.Unlock()

	s.model(t, "run-a", "c4", "job_status", map[string]any{"job": j1})
	st, msg := call(t, cs, "job_status", map[string]any{"job": j1})
	require.Empty(t, msg)
	require.Equal(t, "running", st["status"])
	require.EqualValues(t, 2, st["completed"])
	require.EqualValues(t, 5, st["total"])
	s.model(t, "run-a", "c5", "job_status", map[string]any{"job": j2})
	st, _ = call(t, cs, "job_status", map[string]any{"job": j2})
	require.NotContains(t, st, "completed")
	require.NotContains(t, st, "total")

	s.model(t, "run-a", "c6", "job_status", map[string]any{"job": jb})
	_, msg = call(t, cs, "job_status", map[string]any{"job": jb})
	require.Contains(t, msg, "no job", "bob's job reads like a missing one")

	s.model(t, "run-a", "c7", "list_jobs", map[string]any{})
	list, msg := call(t, cs, "list_jobs", nil)
	require.Empty(t, msg)
	var ids []string
	for _, j := range list["jobs"].([]any) {
		ids = append(ids, j.(map[string]any)["job"].(string))
	}
	require.Equal(t, []string{j2, j1}, ids, "newest first, alice's only")

	// Both users' models list at once: the caller is unclear, so neither is answered.
	s.model(t, "run-a", "c8", "list_jobs", map[string]any{})
	s.model(t, "run-b", "c9", "list_jobs", map[string]any{})
	_, msg = call(t, cs, "list_jobs", nil)
	require.Contains(t, msg, "ask again")
}

// A call that arrives just before the gateway's registration waits for it.
func TestACallWaitsForItsRegistration(t *testing.T) {
	s := newSetup(t)
	cs := s.session(t)
	args := map[string]any{"role": "research", "instructions": "later"}
	type answer struct {
		res *mcp.CallToolResult
		err error
	}
	done := make(chan answer, 1)
	go func() {
		res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "enqueue_job", Arguments: args})
		done <- answer{res, err}
	}()
	select { // the call is at the server, unmatched, before the registration
	case <-s.waiting:
	case <-time.After(5 * time.Second):
		t.Fatal("the call did not wait for its registration")
	}
	s.model(t, "run-a", "call_1", "enqueue_job", args)
	got := <-done
	require.NoError(t, got.err)
	require.False(t, got.res.IsError, "%+v", got.res.Content)
	want, _ := admit.IDs("alice", RequestID("run-a", "call_1"))
	require.Equal(t, want, got.res.StructuredContent.(map[string]any)["job"])
}

// A member key (agent/memberkey: a member's own Hermes holds it) is accepted, and answers
// only that member's calls: bob's key never claims alice's pending call (which stays
// hers), and names nothing of it; a forged key is 401.
func TestAMemberKeyAnswersOnlyThatMembersCalls(t *testing.T) {
	s := newSetup(t)
	connect := func(key string) *mcp.ClientSession {
		c := mcp.NewClient(&mcp.Implementation{Name: "test", Version: "1"}, nil)
		cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: s.url,
			HTTPClient: &http.Client{Transport: bearer{key}}, DisableStandaloneSSE: true}, nil)
		require.NoError(t, err)
		t.Cleanup(func() { _ = cs.Close() })
		return cs
	}
	args := map[string]any{"role": "research", "instructions": "compare GPUs"}
	s.model(t, "run-a", "call_1", "enqueue_job", args)
	_, msg := call(t, connect(memberkey.Derive(testKey, "bob")), "enqueue_job", args)
	require.Contains(t, msg, "does not match a tool call")
	require.NotContains(t, msg, "alice")
	require.Empty(t, s.adm.requestIDs(), "nothing admitted for bob's key")

	out, msg := call(t, connect(memberkey.Derive(testKey, "alice")), "enqueue_job", args)
	require.Empty(t, msg)
	want, _ := admit.IDs("alice", RequestID("run-a", "call_1"))
	require.Equal(t, want, out["job"], "alice's call was still pending: bob's key claimed nothing")

	forged := memberkey.Derive("another-key-0123456789abcdef", "alice")
	req, _ := http.NewRequest("POST", s.url, strings.NewReader(`{"jsonrpc":"2.0","id":1,"method":"tools/list"}`))
	req.Header.Set("Authorization", "Bearer "+forged)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 401, resp.StatusCode)
}
