// Package homestest starts a homes.Supervisor over the real Hermes (hermes/hermesreal's
// virtualenv) and bubblewrap for tests, with the scripted model (modeltest) as the
// only LLM of every member's Hermes. Without Hermes or bubblewrap the test is skipped
// with the reason, except under CI=true, where it fails.
package homestest

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"privateassistant/agent/harness"
	"privateassistant/agent/homes"
	"privateassistant/hermes"
	"privateassistant/hermes/hermesreal"
	"privateassistant/modeltest"
)

// GatewayKey is the agent's gateway key the supervisor knows (members get their own).
const GatewayKey = "agent-gateway-key-0123456789abcdef"

// Require returns the Hermes venv, or skips (fails under CI=true) without Hermes or bwrap.
func Require(t testing.TB) string {
	t.Helper()
	venv := hermesreal.Require(t)
	if _, err := exec.LookPath("bwrap"); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("bubblewrap is required in CI (scripts/install-deps.sh): %v", err)
		}
		t.Skipf("bubblewrap not installed (apt-get install bubblewrap): %v", err)
	}
	return venv
}

// Options shape a test supervisor.
type Options struct {
	Model     *modeltest.Backend // nil: a new one, model id "scripted"
	Toolsets  []string           // the API server's toolsets (default terminal, file)
	IdleAfter time.Duration
	// Env is the template's .env (written beside config.yaml).
	Env string
	// Config holds extra top-level config.yaml keys of the template (each replaces the
	// helper's value for that key).
	Config map[string]any
	// MaxRunning is homes.Options.MaxRunning.
	MaxRunning int
	// Check replaces the check of each started Hermes (default: harness.Hermes.Ready).
	Check func(ctx context.Context, h homes.Home) error
}

// Env is a running supervisor and what it was made from.
type Env struct {
	*homes.Supervisor
	Root     string // the members' homes
	Template string // the operator's config.yaml
	Model    *modeltest.Backend
	ModelURL string
}

// WriteTemplate writes an operator's profile template in dir (config.yaml, and .env when
// opts.Env is set) whose only model is the scripted one at modelURL, and returns the
// config.yaml's path.
func WriteTemplate(t testing.TB, dir, modelURL string, opts Options) string {
	t.Helper()
	if opts.Model == nil {
		opts.Model = modeltest.New("scripted")
	}
	if len(opts.Toolsets) == 0 {
		opts.Toolsets = []string{"terminal", "file"}
	}
	cfg := map[string]any{
		"model": map[string]any{"provider": "custom", "base_url": modelURL, "default": opts.Model.Model,
			"api_key": "scripted-model-key", "context_length": opts.Model.ContextLength},
		"approvals":         map[string]any{"mode": "manual", "timeout": 60},
		"platform_toolsets": map[string]any{"api_server": opts.Toolsets},
		// Nothing that would reach the internet (agent/validator LocalOnly, as the shipped
		// deploy/hermes/config.yaml; TestTheTemplateIsLocalOnly).
		"updates":       map[string]any{"check": false},
		"model_catalog": map[string]any{"enabled": false},
		"curator":       map[string]any{"enabled": false},
		"plugins":       map[string]any{"auto_update_check_hours": 0},
		"security":      map[string]any{"allow_lazy_installs": false},
		// The shared profile's own inbound settings: a member's Hermes never gets them.
		"gateway":  map[string]any{"api_server": map[string]any{"host": "0.0.0.0", "port": 8642, "key": "operator-shared-api-key-never-in-a-member-home"}},
		"terminal": map[string]any{"cwd": "/var/lib/privateassistant/hermes-work"},
	}
	for k, v := range opts.Config {
		cfg[k] = v
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	path := filepath.Join(dir, "config.yaml")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o600); err != nil {
		t.Fatal(err)
	}
	if opts.Env != "" {
		if err := os.WriteFile(filepath.Join(dir, ".env"), []byte(opts.Env), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return path
}

// Start writes a profile template whose model is the scripted backend and starts a
// supervisor over it; both stop on t.Cleanup.
func Start(t testing.TB, opts Options) *Env {
	t.Helper()
	venv := Require(t)
	if opts.Model == nil {
		opts.Model = modeltest.New("scripted")
	}
	if len(opts.Toolsets) == 0 {
		opts.Toolsets = []string{"terminal", "file"}
	}
	ms := httptest.NewServer(opts.Model)
	t.Cleanup(func() { ms.CloseClientConnections(); ms.Close() })
	dir := t.TempDir()
	e := &Env{Root: filepath.Join(dir, "homes"), Model: opts.Model, ModelURL: ms.URL + "/v1"}
	e.Template = WriteTemplate(t, filepath.Join(dir, "profile"), e.ModelURL, opts)
	if opts.Check == nil {
		// As the daemon does: a member's Hermes must offer durable run idempotency.
		opts.Check = func(ctx context.Context, h homes.Home) error {
			_, err := (&harness.Hermes{Client: &hermes.Client{BaseURL: h.URL, APIKey: h.Key}}).Ready(ctx)
			return err
		}
	}
	sup, err := homes.New(homes.Options{Root: e.Root, Venv: venv, Template: e.Template, IdleAfter: opts.IdleAfter, GatewayKey: GatewayKey,
		Check: opts.Check, MaxRunning: opts.MaxRunning,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := sup.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(sup.Stop)
	e.Supervisor = sup
	return e
}
