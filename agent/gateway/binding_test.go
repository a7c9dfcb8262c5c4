package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/gpu"
	"privateassistant/agent/memberkey"
	"privateassistant/modeltest"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// errorCode reads the gateway's error envelope.
func errorCode(t *testing.T, body string) (code, msg string) {
	var e struct {
		Error struct{ Code, Message string } `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &e), body)
	return e.Error.Code, e.Error.Message
}

// A request without a valid run binding is refused with a 4xx naming why, and nothing
// reaches the model: no run named (no path, header or tagged model), a run with no
// bindings, a run whose bindings cannot be read (503, retryable), a run naming a route it
// is not pinned to, a run that holds no grant on the device, a run whose grant is not at
// the generation it says it holds. The run holding the device is served.
func TestRequestWithoutAValidRunBindingIsRefused(t *testing.T) {
	b := modeltest.New("qwen3-30b-q4")
	b.TokenDelay = time.Millisecond
	up := httptest.NewServer(b)
	t.Cleanup(up.Close)
	mgr := gpu.NewManager(gpu.Device{Name: "rx7900", Slots: 2, Backend: &gpu.UpstreamBackend{URL: up.URL + "/v1"}})
	require.NoError(t, mgr.Start(context.Background()))
	t.Cleanup(mgr.Stop)
	sink := &memSink{}
	// "run-held" and "run-idle" are pinned to heavy, "run-broken"'s bindings cannot be
	// read, any other run was never admitted.
	g := &Gateway{APIKey: gatewayKey, Devices: map[string]Fence{"rx7900": mgr}, Usage: sink,
		Routes: func() map[string]Route {
			return map[string]Route{"heavy": {Alias: "heavy", Device: "rx7900", Model: "qwen3-30b-q4", Budget: 65536},
				"light": {Alias: "light", Device: "rx7900", Model: "qwen3-4b", Budget: 65536}}
		},
		Pinned: func(_ context.Context, run string) (Route, error) {
			switch run {
			case "run-held", "run-idle":
				return Route{Alias: "heavy", Revision: 3, Device: "rx7900", Model: "qwen3-30b-q4", Budget: 65536}, nil
			case "run-broken":
				return Route{}, errors.New("appwrite is down")
			}
			return Route{}, ErrUnknownRun
		},
		Tools: func(context.Context, string) (runconfig.ToolPolicy, error) { return runconfig.ToolPolicy{"web"}, nil }}
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	e := &env{gw: gw, backend: b, mgr: mgr, sink: sink}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	gr, err := e.mgr.AcquireFor(ctx, "run-held", "qwen3-30b-q4", nil)
	require.NoError(t, err)
	defer gr.Release()

	cases := []struct {
		name, path, model, gen string
		status                 int
		code                   string
	}{
		{"no run", "/v1/chat/completions", "heavy", "", 403, "run_binding_required"},
		{"no run, any grant live", "/v1/chat/completions", "heavy", "", 403, "run_binding_required"},
		{"never admitted (path)", "/runs/run-ghost/v1/chat/completions", "heavy", "", 403, "unknown_run"},
		{"never admitted (model)", "/v1/chat/completions", "heavy@run-ghost", "", 403, "unknown_run"},
		{"bindings unreadable", "/runs/run-broken/v1/chat/completions", "heavy", "", 503, "binding_unavailable"},
		{"another route than pinned", "/runs/run-held/v1/chat/completions", "light", "", 409, "route_not_pinned"},
		{"not the device's holder", "/runs/run-idle/v1/chat/completions", "heavy", "", 409, "route_not_leased"},
		{"stale generation", "/runs/run-held/v1/chat/completions", "heavy", "99", 409, "stale_generation"},
	}
	loaded := e.backend.Calls() // the load's readiness check
	for _, c := range cases {
		status, body := e.post(t, c.path, c.model, c.gen)
		require.Equal(t, c.status, status, "%s: %s", c.name, body)
		code, msg := errorCode(t, body)
		require.Equal(t, c.code, code, c.name)
		require.NotEmpty(t, msg, c.name)
	}
	require.Equal(t, loaded, e.backend.Calls(), "nothing reached the model")
	require.Empty(t, e.sink.All(), "nothing was served, so no usage")

	status, body := e.post(t, "/v1/chat/completions", "heavy@run-held", "")
	require.Equal(t, 200, status, body)
	status, body = e.post(t, "/runs/run-held/v1/chat/completions", "heavy", "")
	require.Equal(t, 200, status, body)
}

// post sends a non-streamed completion for model on path with an optional generation
// header and returns the status and body.
func (e *env) post(t *testing.T, path, model, gen string) (int, string) {
	req, _ := http.NewRequest("POST", e.gw.URL+path, bytes.NewReader(mustJSON(chatBody(model, false))))
	req.Header.Set("Authorization", "Bearer "+gatewayKey)
	if gen != "" {
		req.Header.Set(GenerationHeader, gen)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// setRoute writes revision rev of route "work" (alias "work" on device "xtx") serving model.
func setRoute(t *testing.T, st *schema.Store, rev int64, model string) {
	_, err := schema.For[schema.ModelRoute](st, schema.CollModelRoutes).Create(context.Background(), runconfig.RevisionDocID("work", rev), "",
		&schema.ModelRoute{RouteID: "work", Revision: rev, Alias: "work", Device: "xtx", BackendModel: model, ContextBudget: 65536, Enabled: true})
	require.NoError(t, err)
}

// pinRun writes the bindings admission pins for run: route "work" at revision rev.
func pinRun(t *testing.T, st *schema.Store, run string, rev int64) {
	_, err := schema.For[schema.RunBinding](st, schema.CollRunBindings).Create(context.Background(), run, "", &schema.RunBinding{
		OwnerID: "u1", RunID: run, ConversationID: "c1", MessageID: "m-" + run, ContextSnapshotID: "s-" + run,
		HarnessProfileID: "h", HarnessRevision: 1, RouteID: "work", RouteRevision: rev, Queue: "q", ToolPolicy: schema.Ptr(`["web"]`)})
	require.NoError(t, err)
}

// The gateway serves the route revision a run is pinned to, not the latest: an admin
// switches route "work" to another model while a run pinned to the old revision is live;
// that run's requests still reach the old model (its GPU grant is on it), a run admitted
// after the change gets the new one once the device swaps. The pinned route and the tool
// policy are read from the run's bindings (Appwrite emulator), once per run.
func TestGatewayServesThePinnedRouteRevision(t *testing.T) {
	db := schematest.New(t)
	st := db.Store
	b := modeltest.New("served")
	b.TokenDelay = time.Millisecond
	up := httptest.NewServer(b)
	t.Cleanup(up.Close)
	mgr := gpu.NewManager(gpu.Device{Name: "xtx", Slots: 1, Backend: &gpu.UpstreamBackend{URL: up.URL + "/v1"}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, mgr.Start(ctx))
	t.Cleanup(mgr.Stop)

	latest := map[string]Route{}
	reads := 0
	store := func() *schema.Store { reads++; return st }
	g := &Gateway{APIKey: gatewayKey, Devices: map[string]Fence{"xtx": mgr},
		// The latest revision of each route (what /v1/models lists).
		Routes: func() map[string]Route { return latest },
		Pinned: BindingRoutes(store), Tools: BindingPolicies(store)}
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	e := &env{gw: gw, backend: b}

	setRoute(t, st, 1, "model-old")
	latest["work"] = Route{Alias: "work", Revision: 1, Device: "xtx", Model: "model-old", Budget: 65536}
	pinRun(t, st, "run-old", 1)
	gOld, err := mgr.AcquireFor(ctx, "run-old", "model-old", nil)
	require.NoError(t, err)

	servedModel := func() string {
		reqs := b.Requests()
		require.NotEmpty(t, reqs)
		return reqs[len(reqs)-1].Model
	}
	status, body := e.post(t, "/v1/chat/completions", "work@run-old", "")
	require.Equal(t, 200, status, body)
	require.Equal(t, "model-old", servedModel())

	// The admin switches the route to another model (revision 2); a run admitted now is
	// pinned to it.
	setRoute(t, st, 2, "model-new")
	latest["work"] = Route{Alias: "work", Revision: 2, Device: "xtx", Model: "model-new", Budget: 65536}
	pinRun(t, st, "run-new", 2)

	for i := 0; i < 2; i++ {
		status, body = e.post(t, "/v1/chat/completions", "work@run-old", "")
		require.Equal(t, 200, status, "the live run keeps its pinned revision: %s", body)
		require.Equal(t, "model-old", servedModel(), "served the model of the revision the run is pinned to")
	}

	// The new run waits for the device (the old run holds model-old), then gets model-new.
	got := make(chan *gpu.Grant, 1)
	go func() {
		g, err := mgr.AcquireFor(ctx, "run-new", "model-new", nil)
		if err == nil {
			got <- g
		}
		close(got)
	}()
	status, body = e.post(t, "/runs/run-new/v1/chat/completions", "work", "")
	require.Equal(t, 409, status, "the new run holds no grant while the old one runs: %s", body)
	gOld.Release()
	gNew := <-got
	require.NotNil(t, gNew)
	defer gNew.Release()
	status, body = e.post(t, "/runs/run-new/v1/chat/completions", "work", "")
	require.Equal(t, 200, status, body)
	require.Equal(t, "model-new", servedModel())
	status, body = e.post(t, "/v1/chat/completions", "work@run-old", "")
	require.Equal(t, 409, status, "the old run's grant ended: %s", body)

	readsBefore := reads
	for i := 0; i < 3; i++ {
		status, _ = e.post(t, "/v1/chat/completions", "work@run-new", "")
		require.Equal(t, 200, status)
	}
	require.Equal(t, readsBefore, reads, "a run's bindings are read once")
}

// A member's key (agent/memberkey; a member's own Hermes holds it, never the gateway's
// key) is served for that member's runs only: another member's run, admitted and holding
// the device, answers exactly as a run never admitted, and nothing reaches the model. A
// forged or foreign key, or any member key when the gateway knows no owners, is 401.
func TestMemberKeyServesOnlyThatMembersRuns(t *testing.T) {
	b := modeltest.New("qwen3-30b-q4")
	up := httptest.NewServer(b)
	t.Cleanup(up.Close)
	mgr := gpu.NewManager(gpu.Device{Name: "rx7900", Slots: 2, Backend: &gpu.UpstreamBackend{URL: up.URL + "/v1"}})
	require.NoError(t, mgr.Start(context.Background()))
	t.Cleanup(mgr.Stop)
	owners := map[string]string{"run-alice": "alice", "run-bob": "bob"}
	g := &Gateway{APIKey: gatewayKey, Devices: map[string]Fence{"rx7900": mgr}, Usage: &memSink{},
		Routes: func() map[string]Route {
			return map[string]Route{"heavy": {Alias: "heavy", Device: "rx7900", Model: "qwen3-30b-q4"}}
		},
		Pinned: func(_ context.Context, run string) (Route, error) {
			if owners[run] == "" {
				return Route{}, ErrUnknownRun
			}
			return Route{Alias: "heavy", Revision: 1, Device: "rx7900", Model: "qwen3-30b-q4"}, nil
		},
		Tools: func(context.Context, string) (runconfig.ToolPolicy, error) { return nil, nil },
		Owner: func(_ context.Context, run string) (string, error) {
			if o := owners[run]; o != "" {
				return o, nil
			}
			return "", ErrUnknownRun
		}}
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for _, run := range []string{"run-alice", "run-bob"} {
		gr, err := mgr.AcquireFor(ctx, run, "qwen3-30b-q4", nil)
		require.NoError(t, err)
		defer gr.Release()
	}
	post := func(key, model string) (int, string) {
		req, _ := http.NewRequest("POST", gw.URL+"/v1/chat/completions", bytes.NewReader(mustJSON(chatBody(model, false))))
		req.Header.Set("Authorization", "Bearer "+key)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	alice := memberkey.Derive(gatewayKey, "alice")
	loaded := b.Calls()
	status, body := post(alice, "heavy@run-bob")
	require.Equal(t, 403, status, body)
	code, _ := errorCode(t, body)
	require.Equal(t, "unknown_run", code, "another member's run looks exactly like a missing one")
	_, missing := post(alice, "heavy@run-ghost")
	require.Equal(t, strings.ReplaceAll(missing, "run-ghost", "run-bob"), body)
	for _, key := range []string{memberkey.Derive("another-gateway-key-0123456789", "alice"), alice[:len(alice)-5] + "bob"} {
		status, _ = post(key, "heavy@run-bob")
		require.Equal(t, 401, status)
	}
	require.Equal(t, loaded, b.Calls(), "nothing reached the model")

	status, body = post(alice, "heavy@run-alice")
	require.Equal(t, 200, status, body)
	status, body = post(gatewayKey, "heavy@run-bob")
	require.Equal(t, 200, status, "the gateway's own key serves every run: %s", body)

	g.Owner = nil
	status, _ = post(alice, "heavy@run-alice")
	require.Equal(t, 401, status, "without owners, member keys are refused")
}
