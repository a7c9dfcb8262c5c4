// Package stacktest runs the whole back end for agent tests: the Appwrite emulator
// (provisioned), a real Redis, the functions behind the local function host, the
// scripted model backend, a Hermes, and the resident agent itself.
//
// The Hermes is the double (hermes/hermestest, in process) by default; Options.Hermes
// "real" starts the real Hermes API server (hermes/hermesreal: skipped with the reason
// without its virtualenv, failed under CI=true), and Options.External points the agent at
// a Hermes that is already running (its URL and key) and starts none.
package stacktest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/daemon"
	"privateassistant/functions/functionstest"
	"privateassistant/functions/service"
	"privateassistant/hermes/hermesreal"
	"privateassistant/hermes/hermestest"
	"privateassistant/internal/backoff"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// HermesKey is the double's API_SERVER_KEY (32+ characters, as the contract asks).
const HermesKey = "hermes-test-key-0123456789abcdef0123"

// Hermes backends (Options.Hermes).
const (
	HermesDouble = "double" // hermes/hermestest in this process (the default)
	HermesReal   = "real"   // the real Hermes API server (hermes/hermesreal)
	// HermesExternal is Env.Backend for a Hermes given by Options.External.
	HermesExternal = "external"
)

// External is a Hermes that is already running: the agent uses it as it is.
type External struct {
	URL string // http://host:port
	Key string // its API_SERVER_KEY
	// WorkDir is its tools' working folder, if the test knows it (else a temporary one).
	WorkDir string
}

// Env is the running back end.
type Env struct {
	*functionstest.Env
	Model    *modeltest.Backend
	ModelURL string
	// Backend is HermesDouble, HermesReal or HermesExternal.
	Backend string
	// Hermes is the double (nil on the other backends).
	Hermes *hermestest.Server
	// Real is the real Hermes (nil on the other backends).
	Real      *hermesreal.Server
	HermesURL string
	// HermesAPIKey is the key the agent sends (HermesKey for the double).
	HermesAPIKey string
	// WorkDir is the only folder a test may let Hermes's tools touch (the real server's
	// terminal.cwd; a temporary folder otherwise).
	WorkDir     string
	hermesSrv   *httptest.Server
	HermesDir   string
	ArtifactDir string
	KeyFile     string
	// GatewayURL is the gateway's base URL (…/v1) with Options.Gateway.
	GatewayURL string
	Agent      *daemon.Agent
	Settings   daemon.Settings
	t          testing.TB
	onEmit     func(runID, event string, fields map[string]any, at time.Time)
}

// Options tune the environment.
type Options struct {
	ChatHarness string // "direct" (default) or "hermes"
	Settings    func(*daemon.Settings)
	OnEmit      func(runID, event string, fields map[string]any, at time.Time)
	Functions   func(*service.Config)
	// Hermes is HermesDouble ("" too) or HermesReal.
	Hermes string
	// External, when set, is the Hermes the agent uses; none is started.
	External *External
	// Model, when set, is the scripted model to use (one an external Hermes also calls);
	// else a new one.
	Model *modeltest.Backend
	// Keys adds emulator API keys (key → scopes), e.g. the stream service's.
	Keys map[string][]string
	// Gateway puts the agent's inference gateway in front of the scripted model, as a
	// deployment has it: device arc is managed (PA_GPU_CONFIG, an upstream backend), the
	// gateway listens on a port chosen here (Env.GatewayURL) and the direct harness calls
	// it with the gateway's key (GatewayKey).
	Gateway bool
}

// GatewayKey is the gateway's key with Options.Gateway.
const GatewayKey = "gateway-key-0123456789abcdef"

// New starts everything but the agent (call StartAgent).
func New(t testing.TB, opts ...Options) *Env {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.ChatHarness == "" {
		o.ChatHarness = "direct"
	}
	e := &Env{t: t, HermesDir: t.TempDir(), ArtifactDir: t.TempDir(), onEmit: o.OnEmit, Backend: o.Hermes}
	if e.Backend == "" {
		e.Backend = HermesDouble
	}
	e.Model = o.Model
	if e.Model == nil {
		e.Model = modeltest.New("demo-model")
		e.Model.TokenDelay = 2 * time.Millisecond
	}
	ms := httptest.NewServer(e.Model)
	t.Cleanup(ms.Close)
	e.ModelURL = ms.URL + "/v1"
	switch {
	case o.External != nil:
		e.Backend, e.HermesURL, e.HermesAPIKey, e.WorkDir = HermesExternal, o.External.URL, o.External.Key, o.External.WorkDir
		if e.WorkDir == "" {
			e.WorkDir = t.TempDir()
		}
	case e.Backend == HermesReal:
		// The real server calls the same scripted model (through a listener of its own).
		e.Real = hermesreal.Start(t, hermesreal.Options{Model: e.Model})
		e.HermesURL, e.HermesAPIKey, e.WorkDir = e.Real.URL, e.Real.Key, e.Real.WorkDir
	case e.Backend == HermesDouble:
		e.HermesAPIKey, e.WorkDir = HermesKey, t.TempDir()
		e.StartHermes(t)
	default:
		t.Fatalf("stacktest: unknown Hermes backend %q", e.Backend)
	}
	e.KeyFile = filepath.Join(t.TempDir(), "hermes.key")
	require.NoError(t, os.WriteFile(e.KeyFile, []byte(e.HermesAPIKey), 0o600))
	directURL, directKey, gwAddr, gpuCfg := e.ModelURL, "", "", ""
	if o.Gateway {
		l, err := netListen("127.0.0.1:0")
		require.NoError(t, err)
		gwAddr = l.Addr().String()
		require.NoError(t, l.Close())
		e.GatewayURL = "http://" + gwAddr + "/v1"
		kf := filepath.Join(t.TempDir(), "gateway.key")
		require.NoError(t, os.WriteFile(kf, []byte(GatewayKey), 0o600))
		directURL, directKey = e.GatewayURL, "file:"+kf
		gpuCfg = filepath.Join(t.TempDir(), "gpu.json")
		require.NoError(t, os.WriteFile(gpuCfg, []byte(`{"devices": [{"name": "arc", "slots": 4,
			"backend": {"kind": "upstream", "url": "`+e.ModelURL+`"},
			"models": {"demo-model": {"context": 131072}}}]}`), 0o600))
	}
	boot := fmt.Sprintf(`{
  "harnesses": [
    {"profileId": "direct", "kind": "direct", "baseUrl": %q, "keyRef": %q},
    {"profileId": "hermes", "kind": "hermes", "baseUrl": %q, "profileName": "assistant", "keyRef": %q}
  ],
  "routes": [
    {"routeId": "chat", "alias": "chat", "device": "arc", "backendModel": "demo-model", "contextBudget": 131072, "maxOutput": 4096},
    {"routeId": "work", "alias": "work", "device": "xtx", "backendModel": "demo-model", "contextBudget": 131072, "maxOutput": 8192}
  ],
  "toolCeiling": ["terminal", "write_file"],
  "roles": {
    "chat": {"harness": %q, "route": "chat", "tools": []},
    "research": {"harness": "hermes", "route": "work", "tools": ["write_file"]},
    "coding": {"harness": "hermes", "route": "work"}
  }
}`, directURL, directKey, e.HermesURL, "file:"+e.KeyFile, o.ChatHarness)
	e.Env = functionstest.New(t, functionstest.Options{Bootstrap: boot, Mutate: o.Functions, Keys: o.Keys})
	// The admin validation step (issue 7) marks a Hermes profile verified; do it here.
	hp, err := runconfig.HarnessRevision(context.Background(), e.Store, "hermes", 1)
	require.NoError(t, err)
	_, err = schema.For[schema.HarnessProfile](e.Store, schema.CollHarnessProfiles).Update(context.Background(), hp.ID, map[string]any{"verified": true, "verifiedAt": time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	e.Settings = daemon.Settings{
		AppwriteEndpoint: e.TS.URL, AppwriteProject: e.TS.Project, AppwriteKey: e.RuntimeKey, DatabaseID: e.Model0(),
		RedisAddr: e.Redis.Addr, AgentID: "test-agent", Devices: "arc:4,xtx:1", ChatDevice: "arc",
		OpsAddr: "127.0.0.1:0", OpsUser: "admin", OpsPassword: "ops-password-0123456789", ArtifactRoot: e.ArtifactDir,
		Grace: 5 * time.Second, LeaseTTL: 3 * time.Second, Heartbeat: 500 * time.Millisecond, ResumeEvery: 500 * time.Millisecond,
		OutboxEvery: time.Second, DeltaWindow: 50 * time.Millisecond, HTTPTimeout: 30 * time.Second,
	}
	if o.Gateway {
		e.Settings.GPUConfig, e.Settings.GatewayAddr, e.Settings.GatewayKey = gpuCfg, gwAddr, GatewayKey
	}
	if o.Settings != nil {
		o.Settings(&e.Settings)
	}
	return e
}

// Model0 is the database id.
func (e *Env) Model0() string { return e.Env.Env.Model.DatabaseID }

// StartHermes starts (or restarts, on the same HERMES_HOME) the Hermes double.
func (e *Env) StartHermes(t testing.TB) {
	t.Helper()
	d, err := hermestest.New(hermestest.Options{APIKey: HermesKey, ModelURL: e.ModelURL, Model: "demo-model",
		DataDir: e.HermesDir, ArtifactDir: e.ArtifactDir, Keepalive: time.Second, OnEmit: e.onEmit, MaxConcurrent: 64})
	require.NoError(t, err)
	var s *httptest.Server
	if e.HermesURL == "" {
		s = httptest.NewServer(d)
		e.HermesURL = s.URL
	} else {
		// Same address as before: the agent's configuration does not change on a restart.
		addr := strings.TrimPrefix(e.HermesURL, "http://")
		s = httptest.NewUnstartedServer(d)
		require.Eventually(t, func() bool {
			l, err := netListen(addr)
			if err != nil {
				return false
			}
			s.Listener = l
			return true
		}, 5*time.Second, 20*time.Millisecond)
		s.Start()
	}
	e.Hermes, e.hermesSrv = d, s
	t.Cleanup(func() { s.Close(); d.Close() })
}

// RestartHermes kills Hermes as a crash would and starts it again at the same address
// with the same state (the double, or the real server's process group). Runs in flight
// read back as interrupted.
func (e *Env) RestartHermes(t testing.TB) {
	t.Helper()
	switch e.Backend {
	case HermesReal:
		require.NoError(t, e.Real.Restart(context.Background(), true))
	case HermesDouble:
		e.KillHermes()
		e.StartHermes(t)
	default:
		t.Fatalf("stacktest: cannot restart an external Hermes")
	}
}

// KillHermes stops the double as a crash would (connections cut, runs unsettled).
func (e *Env) KillHermes() {
	e.hermesSrv.CloseClientConnections()
	e.Hermes.Close()
	e.hermesSrv.Close()
}

// StartAgent starts an in-process agent.
func (e *Env) StartAgent(t testing.TB) *daemon.Agent {
	t.Helper()
	return e.StartAgentWith(t, nil)
}

// StartAgentWith starts an in-process agent, letting hook adjust it between construction
// and start (e.g. a GPU pool).
func (e *Env) StartAgentWith(t testing.TB, hook func(*daemon.Agent)) *daemon.Agent {
	t.Helper()
	a, err := daemon.New(e.Settings, slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError})))
	require.NoError(t, err)
	if hook != nil {
		hook(a)
	}
	require.NoError(t, a.Start(context.Background()))
	e.Agent = a
	t.Cleanup(a.Shutdown)
	return a
}

// Admitted is the admission answer.
type Admitted struct {
	MessageID, RunID, Status, Role string
	Sequence                       int64
}

// Admit sends a message through the functions.
func (e *Env) Admit(t testing.TB, jwt, conv, requestID, text, role string) Admitted {
	t.Helper()
	body := map[string]any{"requestId": requestID, "text": text}
	if role != "" {
		body["role"] = role
	}
	res := e.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, body)
	require.Equal(t, 202, res.Status, string(res.Body))
	var a Admitted
	res.JSON(t, &a)
	return a
}

// Batch is one long-poll answer.
type Batch struct {
	Events   []queue.Event
	Next     int64
	Status   string
	Terminal bool
}

// Follow long-polls a run's events through the API until it is terminal; onEvent sees each
// event as it arrives (return false to stop early).
func (e *Env) Follow(t testing.TB, jwt, runID string, timeout time.Duration, onEvent func(queue.Event) bool) ([]queue.Event, string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	var all []queue.Event
	var after int64
	retry := backoff.Backoff{Min: 50 * time.Millisecond, Max: time.Second}
	for time.Now().Before(deadline) {
		res := e.Do(t, "GET", fmt.Sprintf("/api/runs/%s/events?after=%d&wait=5", runID, after), jwt, nil)
		if res.Status == 503 || res.Status == 429 { // a dependency is down (a chaos test), or this user
			// already has as many follows open as the API allows (a benchmark of 50 runs): ask
			// again, backing off, as the web chat does
			_ = retry.Wait(context.Background())
			continue
		}
		retry.Reset()
		require.Equal(t, 200, res.Status, string(res.Body))
		var b Batch
		res.JSON(t, &b)
		for _, ev := range b.Events {
			require.Equal(t, after+1, ev.Sequence, "events arrive contiguous")
			after = ev.Sequence
			all = append(all, ev)
			if onEvent != nil && !onEvent(ev) {
				return all, b.Status
			}
		}
		if b.Terminal {
			return all, b.Status
		}
	}
	t.Fatalf("run %s did not finish in %s (%d events so far)", runID, timeout, len(all))
	return nil, ""
}
