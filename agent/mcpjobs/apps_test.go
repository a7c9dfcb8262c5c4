package mcpjobs

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/apptools"
	"privateassistant/queue/redistest"
)

// hostApp is a host app's callback endpoint: it verifies every callback with the secret
// its declaration returned and records the verified ones.
type hostApp struct {
	mu       sync.Mutex
	verifier *apptools.Verifier
	calls    []apptools.Callback
	srv      *httptest.Server
}

func newHostApp(t *testing.T) *hostApp {
	h := &hostApp{verifier: &apptools.Verifier{}}
	h.srv = httptest.NewServer(h.verifier.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var cb apptools.Callback
		if err := json.NewDecoder(r.Body).Decode(&cb); err != nil {
			http.Error(w, "bad body", 400)
			return
		}
		h.mu.Lock()
		h.calls = append(h.calls, cb)
		h.mu.Unlock()
		var args struct{ Room string }
		_ = json.Unmarshal(cb.Arguments, &args)
		_, _ = w.Write([]byte(`{"lights":"on","room":"` + args.Room + `"}`))
	})))
	t.Cleanup(h.srv.Close)
	return h
}

func (h *hostApp) received() []apptools.Callback {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]apptools.Callback(nil), h.calls...)
}

type appSetup struct {
	*setup
	home, garage *hostApp
}

// newAppSetup: run-h was started by the app "homeauto" (turn_on_lights), run-g by "garage"
// (open_door), run-a by a member on the web (no app).
func newAppSetup(t *testing.T) *appSetup {
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	home, garage := newHostApp(t), newHostApp(t)
	allow := apptools.AllowList{home.srv.URL + "/pa/", garage.srv.URL + "/pa/"}
	reg := &apptools.Registry{RDB: rdb}
	schema := json.RawMessage(`{"type":"object","properties":{"room":{"type":"string","enum":["kitchen","hall"]}},"required":["room"]}`)
	sec, err := reg.Declare(ctx, "homeauto", []apptools.Tool{{Name: "turn_on_lights", Description: "Turn on the lights in a room.",
		Schema: schema, CallbackURL: home.srv.URL + "/pa/lights"}}, allow)
	require.NoError(t, err)
	home.verifier.Secret = []byte(sec)
	sec, err = reg.Declare(ctx, "garage", []apptools.Tool{{Name: "open_door", Description: "Open the garage door.",
		Schema: json.RawMessage(`{"type":"object"}`), CallbackURL: garage.srv.URL + "/pa/door"}}, allow)
	require.NoError(t, err)
	garage.verifier.Secret = []byte(sec)

	s := &setup{reg: &Registry{RDB: rdb, Server: "pa"}}
	srv := &Server{Registry: s.reg, Key: testKey, MatchWait: 200 * time.Millisecond,
		Apps: &AppTools{Registry: reg, Client: &apptools.Client{Allow: allow}},
		Runs: func(_ context.Context, run string) (Caller, error) {
			switch run {
			case "run-h":
				return Caller{Owner: "a-home-user", Conversation: "conv-h", App: "homeauto"}, nil
			case "run-g":
				return Caller{Owner: "a-garage-user", Conversation: "conv-g", App: "garage"}, nil
			case "run-a":
				return Caller{Owner: "alice", Conversation: "conv-a"}, nil
			}
			return Caller{}, errors.New("no such run")
		}}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	s.url = hs.URL + "/mcp"
	return &appSetup{setup: s, home: home, garage: garage}
}

func TestAppToolIsListed(t *testing.T) {
	s := newAppSetup(t)
	res, err := s.session(t).ListTools(context.Background(), nil)
	require.NoError(t, err)
	var names []string
	for _, tl := range res.Tools {
		names = append(names, tl.Name)
	}
	require.ElementsMatch(t, []string{"enqueue_job", "job_status", "list_jobs", "app_tool"}, names)
}

// A run started by an app calls its tool: the callback is signed, the app verifies it,
// and the app's answer is the tool's result; a retry of the call answers the same result
// without a second callback.
func TestAppToolCallsTheAppSigned(t *testing.T) {
	s := newAppSetup(t)
	cs := s.session(t)
	args := map[string]any{"name": "turn_on_lights", "arguments": map[string]any{"room": "kitchen"}}
	s.model(t, "run-h", "call_1", "app_tool", args)
	out, msg := call(t, cs, "app_tool", args)
	require.Empty(t, msg)
	require.Equal(t, "turn_on_lights", out["tool"])
	require.Equal(t, map[string]any{"lights": "on", "room": "kitchen"}, out["result"])
	got := s.home.received()
	require.Len(t, got, 1)
	require.Equal(t, "homeauto", got[0].App)
	require.Equal(t, "resp_run-h", got[0].Response, "the app learns which of its responses asked")
	require.JSONEq(t, `{"room":"kitchen"}`, string(got[0].Arguments))

	again, msg := call(t, cs, "app_tool", args) // Hermes replays the call
	require.Empty(t, msg)
	require.Equal(t, out, again)
	require.Len(t, s.home.received(), 1, "a retry does not call the app again")
}

// Each run reaches only the tools of the app that started it; a run of no app has none.
func TestARunCannotCallAnotherAppsTools(t *testing.T) {
	s := newAppSetup(t)
	cs := s.session(t)
	lights := map[string]any{"name": "turn_on_lights", "arguments": map[string]any{"room": "hall"}}
	s.model(t, "run-g", "call_1", "app_tool", lights)
	_, msg := call(t, cs, "app_tool", lights)
	require.Contains(t, msg, `the application offers no tool "turn_on_lights"`)
	door := map[string]any{"name": "open_door", "arguments": map[string]any{}}
	s.model(t, "run-h", "call_2", "app_tool", door)
	_, msg = call(t, cs, "app_tool", door)
	require.Contains(t, msg, `the application offers no tool "open_door"`)
	s.model(t, "run-a", "call_3", "app_tool", lights)
	_, msg = call(t, cs, "app_tool", lights)
	require.Contains(t, msg, "not started by an application")
	require.Empty(t, s.home.received())
	require.Empty(t, s.garage.received())

	// Nor by naming a call it did not make: an unregistered call is refused.
	_, msg = call(t, cs, "app_tool", map[string]any{"name": "turn_on_lights", "arguments": map[string]any{"room": "kitchen"}})
	require.Contains(t, msg, "does not match a tool call")
	require.Empty(t, s.home.received())
}

// Arguments outside the schema never reach the app.
func TestAppToolChecksTheSchema(t *testing.T) {
	s := newAppSetup(t)
	cs := s.session(t)
	bad := map[string]any{"name": "turn_on_lights", "arguments": map[string]any{"room": "vault"}}
	s.model(t, "run-h", "call_1", "app_tool", bad)
	_, msg := call(t, cs, "app_tool", bad)
	require.Contains(t, msg, "do not match turn_on_lights's schema")
	require.Empty(t, s.home.received())
}

// A replayed or tampered callback is refused by the host app: a copy of a delivered
// callback, and the same callback with its body changed.
func TestTheHostAppRefusesReplayedAndTamperedCallbacks(t *testing.T) {
	s := newAppSetup(t)
	// Capture what the agent sends, on its way to the app.
	var mu sync.Mutex
	var sent *http.Request
	var sentBody []byte
	tap := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		sent, sentBody = r.Clone(context.Background()), b
		mu.Unlock()
		fwd, _ := http.NewRequest("POST", s.home.srv.URL+r.URL.Path, bytes.NewReader(b))
		fwd.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(fwd)
		if err != nil {
			http.Error(w, err.Error(), 502)
			return
		}
		defer resp.Body.Close()
		w.WriteHeader(resp.StatusCode)
		_, _ = io.Copy(w, resp.Body)
	}))
	t.Cleanup(tap.Close)
	c := &apptools.Client{Allow: apptools.AllowList{tap.URL + "/pa/"}}
	sec, err := (&apptools.Registry{RDB: s.reg.RDB}).Secret(context.Background(), "homeauto")
	require.NoError(t, err)
	tool := apptools.Tool{App: "homeauto", Name: "turn_on_lights", CallbackURL: tap.URL + "/pa/lights"}
	_, err = c.Call(context.Background(), tool, sec, apptools.NewDelivery(), json.RawMessage(`{"room":"kitchen"}`), "resp_run-h")
	require.NoError(t, err)
	require.Len(t, s.home.received(), 1)

	mu.Lock()
	hdr, body := sent.Header.Clone(), append([]byte(nil), sentBody...)
	mu.Unlock()
	post := func(b []byte) int {
		r, _ := http.NewRequest("POST", s.home.srv.URL+"/pa/lights", bytes.NewReader(b))
		r.Header = hdr.Clone()
		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	require.Equal(t, 401, post(body), "a replayed callback is refused")
	tampered := []byte(string(body[:len(body)-1]) + `,"extra":"open all doors"}`)
	require.Equal(t, 401, post(tampered), "a tampered callback is refused")
	require.Len(t, s.home.received(), 1, "the app acted once")
}
