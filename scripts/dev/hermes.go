package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"time"

	"go.yaml.in/yaml/v3"

	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/settings"
)

// Which Hermes runs research and coding (Config.Hermes).
const (
	// HermesDouble is the in-process Hermes double (hermes/hermestest): the package's
	// tests, and make dev with PA_SKIP_HERMES=1 or without the real Hermes installed.
	HermesDouble = ""
	// HermesMembers is the real Hermes `make deps` installs (.cache/hermes/venv), one
	// `hermes gateway run` per member in bubblewrap (agent/homes), as production with
	// PA_AGENT_HERMES_HOMES: make dev's default.
	HermesMembers = "members"
)

// devCeiling is the dev roles' tool ceiling: a real Hermes profile offers its whole
// toolsets (file is read_file, write_file, patch and search_files), and validation refuses
// a profile offering more than a bound role's policy, so research and coding both get
// terminal and file.
var devCeiling = []string{"terminal", "file", "mcp__pa__enqueue_job", "mcp__pa__job_status"}

// devRoleTools are the dev roles' tools: research and coding get the Hermes toolsets; chat
// (the direct harness) the MCP job server's enqueue_job and job_status, so it can hand a
// research or coding job on and keep chatting (issue 30 item 5).
var devRoleTools = map[string][]string{
	"research": {"terminal", "file"},
	"coding":   {"terminal", "file"},
	"chat":     {"mcp__pa__enqueue_job", "mcp__pa__job_status"},
}

// realHermes returns the Hermes virtualenv to run members' Hermes from, or why it cannot.
func realHermes(cfg Config) (venv, why string) {
	venv = cfg.HermesVenv
	if venv == "" {
		venv = filepath.Join(cfg.Root, ".cache", "hermes", "venv")
	}
	if _, err := os.Stat(filepath.Join(venv, "bin", "hermes")); err != nil {
		return "", "the real Hermes is not installed in " + venv + " (make deps installs it)"
	}
	if _, err := exec.LookPath("bwrap"); err != nil {
		return "", "bubblewrap is not installed (make deps installs it)"
	}
	return venv, ""
}

// writeTemplate writes the members' Hermes profile template (PA_AGENT_HERMES_CONFIG) in
// dir: the operator's deploy/hermes/config.yaml with the dev stack's gateway as the only
// model provider (main model and delegation), the API server on loopback, the toolsets of
// the dev roles and no MCP server (mcpURL "") or the dev agent's; and its .env beside it
// holding the gateway key (each member's Hermes gets a member key derived from it).
func writeTemplate(root, dir, gatewayURL, gatewayKey, mcpURL string) (string, error) {
	b, err := os.ReadFile(filepath.Join(root, "deploy", "hermes", "config.yaml"))
	if err != nil {
		return "", err
	}
	cfg := map[string]any{}
	if err := yaml.Unmarshal(b, &cfg); err != nil {
		return "", fmt.Errorf("deploy/hermes/config.yaml: %w", err)
	}
	sub := func(m map[string]any, k string) map[string]any {
		c, _ := m[k].(map[string]any)
		if c == nil {
			c = map[string]any{}
			m[k] = c
		}
		return c
	}
	api := sub(sub(cfg, "gateway"), "api_server")
	api["host"], api["port"] = "127.0.0.1", 0 // each member's own port (agent/homes)
	sub(cfg, "model")["base_url"] = gatewayURL
	sub(cfg, "model")["context_length"] = 131072 // the dev routes' budget
	sub(cfg, "delegation")["base_url"] = gatewayURL
	sub(cfg, "platform_toolsets")["api_server"] = devCeiling
	if mcpURL == "" {
		delete(cfg, "mcp_servers")
	} else {
		sub(sub(cfg, "mcp_servers"), "pa")["url"] = mcpURL
	}
	sub(cfg, "approvals")["timeout"] = 300
	out, err := yaml.Marshal(cfg)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	path := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(path, out, 0o600); err != nil {
		return "", err
	}
	return path, os.WriteFile(filepath.Join(dir, ".env"), []byte("GATEWAY_API_KEY=\""+gatewayKey+"\"\n"), 0o600)
}

// hermesSync brings an existing data directory's Hermes profile to the Hermes this start
// uses, through the admin code an operator's console uses (settings): a new
// revision when the base URL or key reference changed (a data directory made with the
// double, then HERMES_URL or the real Hermes, or back), the tool ceiling the dev roles
// need, and — for a real Hermes — a validation request the agent's validator answers
// (awaitVerified), after which the roles are pinned to the verified revision. The double
// is vouched for by the stack itself (it has no profile config to check).
type hermesSync struct {
	adm      *settings.Admin
	want     settings.HarnessInput
	real     bool
	revision int64 // the revision this start uses
	validate bool  // a validation request is pending for it
}

func (h *hermesSync) latest(ctx context.Context) (*schema.HarnessProfile, error) {
	ps, err := schema.For[schema.HarnessProfile](h.adm.Store, schema.CollHarnessProfiles).All(ctx, schema.ListQuery{})
	if err != nil {
		return nil, err
	}
	var cur *schema.HarnessProfile
	for i := range ps {
		if ps[i].ProfileID == h.want.ProfileID && (cur == nil || ps[i].Revision > cur.Revision) {
			cur = &ps[i]
		}
	}
	if cur == nil {
		return nil, fmt.Errorf("no %s harness profile", h.want.ProfileID)
	}
	return cur, nil
}

// prepare runs before the agent starts: the ceiling, the revision, the request.
func (h *hermesSync) prepare(ctx context.Context) error {
	if err := h.pin(ctx, 0); err != nil { // the ceiling first: validation checks the bound roles' policy
		return err
	}
	cur, err := h.latest(ctx)
	if err != nil {
		return err
	}
	if cur.BaseURL != h.want.BaseURL || deref(cur.KeyRef) != h.want.KeyRef || cur.Kind != h.want.Kind {
		if _, cur, err = h.adm.CommitHarness(ctx, "make-dev", h.want, cur.Revision); err != nil {
			return fmt.Errorf("register the dev Hermes: %w", err)
		}
	}
	h.revision = cur.Revision
	if !h.real {
		if !cur.Verified {
			_, err = schema.For[schema.HarnessProfile](h.adm.Store, schema.CollHarnessProfiles).Update(ctx, cur.ID,
				map[string]any{"verified": true, "verifiedAt": time.Now().UTC().Format(time.RFC3339Nano)})
			if err != nil {
				return err
			}
		}
		return h.check(ctx)
	}
	if cur.Verified && cur.ValidationRequestedAt == nil {
		return h.check(ctx)
	}
	// As the admin console's Validate: a request the agent's validator answers.
	if _, _, err := h.adm.Validate(ctx, "make-dev", cur.ProfileID, cur.Revision); err != nil {
		return fmt.Errorf("request the dev Hermes's validation: %w", err)
	}
	h.validate = true
	return nil
}

// finish runs once the agent runs: waits for the validation and pins the roles.
func (h *hermesSync) finish(ctx context.Context, timeout time.Duration) error {
	if h.validate {
		deadline := time.Now().Add(timeout)
		for {
			hp, err := runconfig.HarnessRevision(ctx, h.adm.Store, h.want.ProfileID, h.revision)
			if err != nil {
				return err
			}
			if hp.ValidationRequestedAt == nil {
				if !hp.Verified {
					return fmt.Errorf("the agent did not verify the dev Hermes (harness %s revision %d): %s", hp.ProfileID, hp.Revision, h.reason(ctx))
				}
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("the agent did not validate the dev Hermes within %v", timeout)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(250 * time.Millisecond):
			}
		}
	}
	if err := h.pin(ctx, h.revision); err != nil {
		return err
	}
	return h.check(ctx)
}

// check collects the evidence of the configuration still being checked (the bootstrap's
// release 1 is live before it, its roles held until it passes: runconfig.Hold), as the
// admin function's schedule would within a minute, so the dev roles answer at once. The
// dev stack's functions run without the qualification gate (PA_ROUTE_QUALIFICATION=off:
// its scripted backends are not measured), so the evidence says "not checked".
func (h *hermesSync) check(ctx context.Context) error {
	if err := (&settings.Reconciler{Admin: h.adm, Holder: "make-dev"}).Pass(ctx); err != nil {
		return fmt.Errorf("check the dev configuration: %w", err)
	}
	return nil
}

// reason is the last validation's reason, from its audit entry.
func (h *hermesSync) reason(ctx context.Context) string {
	es, err := schema.For[schema.Audit](h.adm.Store, schema.CollAudit).All(ctx, schema.ListQuery{})
	if err != nil {
		return err.Error()
	}
	last, at := "", ""
	for _, e := range es {
		if e.Action == "harness.validate" && e.At >= at {
			last, at = deref(e.Detail), e.At
		}
	}
	return last
}

// pin commits a selection when the dev roles' ceiling or tools differ from what they need,
// or (rev > 0) when a role on the dev Hermes is not on revision rev.
func (h *hermesSync) pin(ctx context.Context, rev int64) error {
	s, err := schema.For[schema.Settings](h.adm.Store, schema.CollSettings).Get(ctx, runconfig.SystemSettingsID)
	if err != nil {
		return err
	}
	roles := map[string]runconfig.RoleBinding{}
	var ceiling []string
	if s.Roles != nil {
		if err := json.Unmarshal([]byte(*s.Roles), &roles); err != nil {
			return err
		}
	}
	if s.ToolCeiling != nil {
		if err := json.Unmarshal([]byte(*s.ToolCeiling), &ceiling); err != nil {
			return err
		}
	}
	change := !slices.Equal(ceiling, devCeiling)
	for name, b := range roles {
		if want, ok := devRoleTools[name]; ok && !slices.Equal(b.Tools, want) {
			b.Tools, change = want, true
		}
		if rev > 0 && b.Harness == h.want.ProfileID && b.HarnessRevision != rev {
			b.HarnessRevision, change = rev, true
		}
		roles[name] = b
	}
	if !change {
		return nil
	}
	head, err := h.adm.HeadRevision(ctx)
	if err != nil {
		return err
	}
	_, err = h.adm.CommitSelection(ctx, "make-dev", settings.SelectionInput{ExpectedRevision: head, Roles: roles, ToolCeiling: devCeiling})
	if err != nil {
		return fmt.Errorf("the dev roles' selection: %w", err)
	}
	return nil
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
