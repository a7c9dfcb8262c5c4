// Package functionstest runs the functions for tests the way they run in production: a
// provisioned Appwrite emulator, a real Redis, the bootstrap configuration, and every
// function behind the local function host, called over HTTP with real JWTs.
package functionstest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/open-runtimes/types-for-go/v4/openruntimes"

	"privateassistant/functions/functionhost"
	"privateassistant/functions/runtimehttp"
	"privateassistant/functions/service"
	"privateassistant/queue/redistest"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// Bootstrap is the configuration tests run with: a direct chat role on "arc" and work
// roles on "xtx".
const Bootstrap = `{
  "harnesses": [{"profileId": "direct", "kind": "direct", "baseUrl": "http://127.0.0.1:1/v1", "profileName": "", "keyRef": "GATEWAY_API_KEY"}],
  "routes": [
    {"routeId": "chat", "alias": "chat", "device": "arc", "backendModel": "demo-chat", "contextBudget": 131072, "maxOutput": 1024},
    {"routeId": "work", "alias": "work", "device": "xtx", "backendModel": "demo-work", "contextBudget": 131072, "maxOutput": 4096}
  ],
  "toolCeiling": ["terminal", "file", "web"],
  "roles": {
    "chat": {"harness": "direct", "route": "chat", "tools": []},
    "research": {"harness": "direct", "route": "work", "tools": ["web"]},
    "coding": {"harness": "direct", "route": "work", "tools": ["terminal", "file"]}
  }
}`

// FunctionKey is the emulator key a function's executions carry in tests.
func FunctionKey(name string) string { return "fn-" + name + "-key-0123456789" }

// Env is a running functions stack.
type Env struct {
	*schematest.Env
	Redis *redistest.Server
	Svc   *service.Service
	Cfg   service.Config
	URL   string // the function host origin
	Host  *httptest.Server
	// Functions is the function host; a test starts its schedules (StartSchedules) when
	// it wants them to run (they stop when it ends).
	Functions *functionhost.Host
}

// Options tune the stack.
type Options struct {
	Mutate func(*service.Config)
	// Bootstrap replaces the default configuration file.
	Bootstrap string
	// Keys adds emulator API keys (key → scopes) beside the functions' (the stream
	// service's read-only key).
	Keys map[string][]string
	// Unchecked leaves the bootstrap's release 1 collecting (no reconciler pass after
	// the bootstrap): its roles are held until its evidence passes.
	Unchecked bool
}

// New starts everything and stops it when the test ends.
func New(t testing.TB, opts ...Options) *Env {
	t.Helper()
	// Each function gets a key with exactly its own scopes, as Appwrite's per-execution
	// key would have.
	fnKeys := map[string][]string{}
	for _, fn := range service.Functions {
		fnKeys[FunctionKey(fn.Name)] = fn.Scopes
	}
	for _, o := range opts {
		for k, sc := range o.Keys {
			fnKeys[k] = sc
		}
	}
	se := schematest.New(t, fnKeys)
	r := redistest.Start(t)
	boot := Bootstrap
	for _, o := range opts {
		if o.Bootstrap != "" {
			boot = o.Bootstrap
		}
	}
	f, err := runconfig.ParseBootstrap([]byte(boot))
	if err != nil {
		t.Fatal(err)
	}
	if err := runconfig.Bootstrap(context.Background(), se.Store, f, "test"); err != nil {
		t.Fatal(err)
	}
	cfg := service.Config{Endpoint: se.TS.URL, ProjectID: se.TS.Project, DatabaseID: se.Model.DatabaseID,
		RedisAddr: r.Addr, CORSOrigins: []string{"http://127.0.0.1:8080"}, JWTCacheTTL: 5 * time.Second,
		AdmitRate: 1000, AdmitWindow: time.Minute, HeartbeatStale: 30 * time.Second,
		LongPollMax: 2 * time.Second, LongPollWaiters: 1, Coalesce: 5 * time.Millisecond}
	for _, o := range opts {
		if o.Mutate != nil {
			o.Mutate(&cfg)
		}
	}
	svc, err := service.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = svc.Close() })
	// Release 1 is live before its evidence, its roles held until it passes
	// (runconfig.Hold): the admin function's schedule would collect it within a minute.
	unchecked := false
	for _, o := range opts {
		unchecked = unchecked || o.Unchecked
	}
	if !unchecked {
		err := svc.Reconcile(context.Background(), FunctionKey("admin"), "bootstrap")
		switch {
		case errors.Is(err, schema.ErrUnavailable):
			// A test's Mutate pointed the functions at an Appwrite that is down: they
			// cannot check anything, and that test is about exactly that.
			t.Logf("functionstest: no reconciler pass (Appwrite unavailable to the functions): %v", err)
		case err != nil:
			t.Fatal(err)
		}
	}
	api, err := svc.API("all")
	if err != nil {
		t.Fatal(err)
	}
	// Each function's Main, built exactly like the real ones but on this test's service.
	main := func(c openruntimes.Context) openruntimes.Response {
		return runtimehttp.Serve(&c, api, runtimehttp.ExecutionBudget)
	}
	// The executions' logs (Context.Log), in a file as the runtime keeps them.
	logs, err := os.Create(filepath.Join(t.TempDir(), "executions.log"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = logs.Close() })
	host := &functionhost.Host{Logs: logs}
	for _, fn := range service.Functions {
		host.Functions = append(host.Functions, functionhost.Function{Name: fn.Name, Prefixes: fn.Prefixes, Main: main, Key: FunctionKey(fn.Name),
			Schedule: fn.Schedule, Timeout: 30 * time.Second})
	}
	hs := httptest.NewServer(host)
	t.Cleanup(hs.Close)
	t.Cleanup(host.StopSchedules) // before the service and Redis stop
	return &Env{Env: se, Redis: r, Svc: svc, Cfg: cfg, URL: hs.URL, Host: hs, Functions: host}
}

// Response is a decoded API answer.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON decodes the body into v.
func (r Response) JSON(t testing.TB, v any) {
	t.Helper()
	if err := json.Unmarshal(r.Body, v); err != nil {
		t.Fatalf("decode %s: %v", r.Body, err)
	}
}

// ErrorCode returns the envelope's code ("" when not an error envelope).
func (r Response) ErrorCode() string {
	var e struct {
		Error struct {
			Code string `json:"code"`
		} `json:"error"`
	}
	_ = json.Unmarshal(r.Body, &e)
	return e.Error.Code
}

// Do calls the API. body may be nil, a []byte/string (sent raw) or a value (JSON).
func (e *Env) Do(t testing.TB, method, path, jwt string, body any, hdr ...string) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		rd = bytes.NewReader(b)
	case string:
		rd = bytes.NewReader([]byte(b))
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, e.URL+path, rd)
	if err != nil {
		t.Fatal(err)
	}
	if rd != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if jwt != "" {
		req.Header.Set("Authorization", "Bearer "+jwt)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// SignUp makes a member: an account through Appwrite's public sign-up that an admin then
// admitted (the member label), with a fresh JWT. Stranger is the same account without the
// admission.
func (e *Env) SignUp(t testing.TB, email, password string) (userID, jwt string) {
	t.Helper()
	id, j := e.Env.SignUp(t, email, password)
	e.Label(t, id, "member")
	return id, j
}

// Stranger signs up through Appwrite's public sign-up only: verified, but not a member.
func (e *Env) Stranger(t testing.TB, email, password string) (userID, jwt string) {
	t.Helper()
	return e.Env.SignUp(t, email, password)
}

// Label replaces a user's labels (as an admin would in the Console).
func (e *Env) Label(t testing.TB, userID string, labels ...string) {
	t.Helper()
	users := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(e.TS.URL), appwrite.WithProject(e.TS.Project), appwrite.WithKey(e.TS.AdminKey)))
	if labels == nil {
		labels = []string{}
	}
	if _, err := users.UpdateLabels(userID, labels); err != nil {
		t.Fatalf("functionstest: labels: %v", err)
	}
}

// Conversation creates a conversation for jwt's user and returns its id.
func (e *Env) Conversation(t testing.TB, jwt string) string {
	t.Helper()
	r := e.Do(t, "POST", "/api/conversations", jwt, map[string]any{"title": "test"})
	if r.Status != 201 {
		t.Fatalf("create conversation: %d %s", r.Status, r.Body)
	}
	var c struct{ ID string }
	r.JSON(t, &c)
	return c.ID
}
