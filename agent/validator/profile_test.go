package validator_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"privateassistant/agent/validator"
	"privateassistant/hermes"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
	"privateassistant/settings"
)

const gwURL = "http://127.0.0.1:8091/v1"

var gw = validator.Gateway{URL: gwURL, Aliases: []string{"chat", "work"}}

// exampleConfig is deploy/hermes/config.yaml, the profile an operator merges.
func exampleConfig(t *testing.T) map[string]any {
	t.Helper()
	b, err := os.ReadFile("../../deploy/hermes/config.yaml")
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, yaml.Unmarshal(b, &m))
	return m
}

func marshal(t *testing.T, m map[string]any) []byte {
	t.Helper()
	b, err := yaml.Marshal(m)
	require.NoError(t, err)
	return b
}

func section(m map[string]any, k string) map[string]any {
	s, _ := m[k].(map[string]any)
	if s == nil {
		s = map[string]any{}
		m[k] = s
	}
	return s
}

func TestTheExampleProfileIsAccepted(t *testing.T) {
	b, err := os.ReadFile("../../deploy/hermes/config.yaml")
	require.NoError(t, err)
	env, err := validator.ReadEnvFile("../../deploy/hermes/hermes.env.example")
	require.NoError(t, err)
	require.NoError(t, validator.CheckHermesConfig(b, env, gw, nil))
}

// Every way the config lets inference leave the gateway is refused, with a reason that
// names the setting.
func TestABypassingProfileIsRefused(t *testing.T) {
	cases := map[string]struct {
		mutate func(m map[string]any)
		env    map[string]string
		why    string
	}{
		"delegation to another endpoint": {func(m map[string]any) {
			section(m, "delegation")["base_url"] = "https://openrouter.ai/api/v1"
		}, nil, `delegation.base_url "https://openrouter.ai/api/v1" is not the agent's gateway`},
		"delegation to the model server": {func(m map[string]any) {
			section(m, "delegation")["base_url"] = "http://127.0.0.1:8081/v1"
		}, nil, "is not the agent's gateway " + gwURL},
		"delegation to a named provider": {func(m map[string]any) {
			d := section(m, "delegation")
			d["provider"], d["base_url"] = "openrouter", ""
		}, nil, `delegation.provider "openrouter"`},
		"delegation to a model that is not a route alias": {func(m map[string]any) {
			section(m, "delegation")["model"] = "qwen3-30b-a3b-q4"
		}, nil, `delegation.model "qwen3-30b-a3b-q4" is not a route alias`},
		"a child's fallback provider": {func(m map[string]any) {
			section(m, "delegation")["fallback_providers"] = []any{map[string]any{"provider": "openrouter", "model": "x"}}
		}, nil, "delegation.fallback_providers must be empty"},
		"a child on another wire": {func(m map[string]any) {
			section(m, "delegation")["api_mode"] = "anthropic_messages"
		}, nil, `delegation.api_mode "anthropic_messages"`},
		"a variable the .env does not set": {func(m map[string]any) {
			section(m, "delegation")["base_url"] = "${CHILD_URL}"
		}, nil, "names a variable the profile's .env does not set"},
		"a variable that resolves elsewhere": {func(m map[string]any) {
			section(m, "delegation")["base_url"] = "${CHILD_URL}"
		}, map[string]string{"CHILD_URL": "http://10.0.0.9:8000/v1"}, `delegation.base_url "${CHILD_URL}" is not the agent's gateway`},
		"an inheriting child of a main model off the gateway": {func(m map[string]any) {
			delete(section(m, "delegation"), "base_url")
			section(m, "model")["base_url"] = "http://127.0.0.1:8081/v1"
		}, nil, `model.base_url "http://127.0.0.1:8081/v1" is not the agent's gateway`},
		"a main fallback provider": {func(m map[string]any) {
			m["fallback_providers"] = []any{map[string]any{"provider": "openrouter"}}
		}, nil, "fallback_providers must be empty"},
		"an auxiliary model elsewhere": {func(m map[string]any) {
			section(m, "auxiliary")["compression"] = map[string]any{"provider": "openrouter"}
		}, nil, `auxiliary.compression.provider "openrouter"`},
		// A pinned auxiliary route, even the gateway and a route alias, sends a model that
		// names no run: real Hermes's compression then calls "work" and the gateway refuses
		// it (TestCompressionOnRealHermesNamesTheRun, checked with this pin).
		"an auxiliary model pinned on the gateway": {func(m map[string]any) {
			section(m, "auxiliary")["compression"] = map[string]any{"provider": "custom", "base_url": gwURL, "model": "work"}
		}, nil, `auxiliary.compression.model "work": leave it empty`},
		"an auxiliary endpoint pinned on the gateway": {func(m map[string]any) {
			section(m, "auxiliary")["vision"] = map[string]any{"base_url": gwURL}
		}, nil, "auxiliary.vision.base_url"},
		"an auxiliary task on the main provider by name": {func(m map[string]any) {
			section(m, "auxiliary")["approval"] = map[string]any{"provider": "main"}
		}, nil, `auxiliary.approval.provider "main"`},
		"titles on the catalog's fast model": {func(m map[string]any) {
			section(m, "auxiliary")["title_generation"] = map[string]any{"prefer_fast_model": true}
		}, nil, "auxiliary.title_generation.prefer_fast_model"},
		// Cloud providers and fallbacks of any kind.
		"a named cloud provider": {func(m map[string]any) {
			m["providers"] = map[string]any{"openrouter": map[string]any{"key_env": "OPENROUTER_API_KEY"}}
		}, nil, "providers.openrouter names no endpoint"},
		"a named provider elsewhere": {func(m map[string]any) {
			m["providers"] = map[string]any{"lab": map[string]any{"base_url": "https://api.example.com/v1"}}
		}, nil, `providers.lab.base_url "https://api.example.com/v1" is not the agent's gateway`},
		"a legacy custom provider elsewhere": {func(m map[string]any) {
			m["custom_providers"] = []any{map[string]any{"name": "x", "base_url": "https://api.example.com/v1"}}
		}, nil, `custom_providers[0].base_url "https://api.example.com/v1"`},
		"an API server model route to a cloud provider": {func(m map[string]any) {
			section(section(m, "gateway"), "api_server")["model_routes"] = map[string]any{"big": map[string]any{"model": "x", "provider": "anthropic"}}
		}, nil, `gateway.api_server.model_routes.big.provider "anthropic"`},
		"a delegation route elsewhere": {func(m map[string]any) {
			section(m, "delegation")["routes"] = map[string]any{"fast": map[string]any{"base_url": "https://api.example.com/v1"}}
		}, nil, `delegation.routes.fast.base_url`},
		"a fallback model": {func(m map[string]any) {
			m["fallback_model"] = map[string]any{"provider": "openrouter", "model": "anthropic/claude-sonnet-4"}
		}, nil, "fallback_model must be absent"},
		"a fallback chain": {func(m map[string]any) {
			m["fallback_model"] = []any{map[string]any{"provider": "nous", "model": "x"}}
		}, nil, "fallback_model must be absent"},
		"an auxiliary fallback chain": {func(m map[string]any) {
			section(m, "auxiliary")["compression"] = map[string]any{"provider": "auto", "fallback_chain": []any{map[string]any{"provider": "openrouter"}}}
		}, nil, "auxiliary.compression.fallback_chain must be empty"},
		// Outbound calls no role asked for.
		"the model catalog left on by default": {func(m map[string]any) {
			delete(m, "model_catalog")
		}, nil, "model_catalog.enabled is not set to false"},
		"update checks on": {func(m map[string]any) {
			section(m, "updates")["check"] = true
		}, nil, "updates.check is on"},
		"plugin update checks on": {func(m map[string]any) {
			section(m, "plugins")["auto_update_check_hours"] = 24
		}, nil, "plugins.auto_update_check_hours is on"},
		"lazy installs left on by default": {func(m map[string]any) {
			delete(m, "security")
		}, nil, "security.allow_lazy_installs is not set to false"},
		"telemetry sent": {func(m map[string]any) {
			m["telemetry"] = map[string]any{"shared_metrics": map[string]any{"enabled": true, "send": "yes"}}
		}, nil, "telemetry.shared_metrics.send is on"},
		"OTLP export": {func(m map[string]any) {
			m["monitoring"] = map[string]any{"export": map[string]any{"otlp": map[string]any{"enabled": true, "endpoint": "https://otel.example.com"}}}
		}, nil, "monitoring.export.otlp.enabled is on"},
		"the job tools behind tool_search": {func(m map[string]any) {
			section(m, "platform_toolsets")["api_server"] = []any{"terminal", "file", "pa"}
			delete(m, "tools")
		}, nil, "tools.tool_search is not off"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			m := exampleConfig(t)
			c.mutate(m)
			err := validator.CheckHermesConfig(marshal(t, m), c.env, gw, nil)
			require.Error(t, err)
			require.True(t, errors.Is(err, validator.ErrProfileConfig))
			require.Contains(t, err.Error(), c.why)
			require.NotContains(t, err.Error(), "10.0.0.9", "a value from .env is never echoed")
		})
	}
}

// Auxiliary tasks left to inherit the run's model are accepted, however Hermes spells it.
func TestAuxiliaryTasksOnAutoAreAccepted(t *testing.T) {
	m := exampleConfig(t)
	m["auxiliary"] = map[string]any{
		"compression":       map[string]any{"provider": "auto", "model": "", "timeout": 300},
		"title_generation":  map[string]any{"enabled": false, "provider": "", "prefer_fast_model": false},
		"vision":            map[string]any{"model": "AUTO"},
		"transient_retries": 2,
	}
	require.NoError(t, validator.CheckHermesConfig(marshal(t, m), nil, gw, nil))
}

// The MCP job tools are accepted with tool_search off, however Hermes spells off.
func TestJobToolsNeedToolSearchOff(t *testing.T) {
	for _, off := range []any{"off", false, "false", map[string]any{"enabled": false}, map[string]any{"enabled": "no"}} {
		m := exampleConfig(t)
		section(m, "platform_toolsets")["api_server"] = []any{"terminal", "file", "web", "pa"}
		if mm, ok := off.(map[string]any); ok {
			m["tools"] = map[string]any{"tool_search": mm}
		} else if b, ok := off.(bool); ok {
			m["tools"] = map[string]any{"tool_search": b}
		} else {
			m["tools"] = map[string]any{"tool_search": map[string]any{"enabled": off}}
		}
		require.NoError(t, validator.CheckHermesConfig(marshal(t, m), nil, gw, nil), "%v", off)
	}
	// Offered per Hermes's own report (GET /v1/toolsets names mcp-pa) but tool_search on.
	m := exampleConfig(t)
	m["tools"] = map[string]any{"tool_search": map[string]any{"enabled": "on"}}
	err := validator.CheckHermesConfig(marshal(t, m), nil, gw, map[string][]string{"mcp-pa": {"mcp__pa__enqueue_job"}})
	require.ErrorContains(t, err, "tool_search")
	// A bare YAML off (PyYAML reads false; Go's YAML the string "off") is off too.
	m = exampleConfig(t)
	delete(m, "tools")
	b := append([]byte("tools:\n  tool_search:\n    enabled: off\n"), marshal(t, m)...)
	ok, err := validator.OffersJobTools(b, map[string][]string{"pa": nil})
	require.NoError(t, err)
	require.True(t, ok)
	require.NoError(t, validator.CheckHermesConfig(b, nil, gw, map[string][]string{"pa": nil}))
}

// The agent's validator reads the profile's config beside Hermes: a bypassing profile is
// left unverified with the reason in the audit entry, the example profile is verified,
// and with no config path an agent with a gateway fails closed.
func TestValidatorChecksTheProfileConfig(t *testing.T) {
	ctx := context.Background()
	env := schematest.New(t)
	adm := &settings.Admin{Store: env.Store, Devices: func(context.Context) ([]string, error) { return []string{"arc"}, nil }}
	for _, alias := range []string{"chat", "work"} {
		_, _, err := adm.CommitRoute(ctx, "admin", settings.RouteInput{RouteID: alias, Alias: alias, Device: "arc", BackendModel: "m", ContextBudget: 65536, MaxOutput: 4096}, 0)
		require.NoError(t, err)
	}
	url := startDouble(t, true)
	write := func(m map[string]any) string {
		dir := t.TempDir()
		p := filepath.Join(dir, "config.yaml")
		require.NoError(t, os.WriteFile(p, marshal(t, m), 0o600))
		return p
	}
	good := write(exampleConfig(t))
	bypass := exampleConfig(t)
	section(bypass, "delegation")["base_url"] = "https://api.example.com/v1"
	bad := write(bypass)

	run := func(id, config string) {
		register(t, adm, id, url, keyFile(t, hermesKey))
		_, _, err := adm.Validate(ctx, "admin", id, 1)
		require.NoError(t, err)
		v := &validator.Validator{Store: env.Store, AgentID: "test-agent", GatewayURL: func() string { return gwURL }, HermesConfig: config}
		require.NoError(t, v.Once(ctx))
	}
	run("good", good)
	require.True(t, revision(t, env.Store, "good").Verified, auditDetail(t, env.Store, "good"))

	run("bypass", bad)
	require.False(t, revision(t, env.Store, "bypass").Verified)
	require.Contains(t, auditDetail(t, env.Store, "bypass"), `delegation.base_url \"https://api.example.com/v1\" is not the agent's gateway`)

	run("unknown", "")
	require.False(t, revision(t, env.Store, "unknown").Verified)
	require.Contains(t, auditDetail(t, env.Store, "unknown"), "PA_AGENT_HERMES_CONFIG")
}

// Approval settings under which a guarded call of a bound role is denied or run without
// asking are refused (what real Hermes does: hermes/hermesreal
// TestUnattendedModeOnRealHermes): for a role with guarded tools, approvals.mode off and
// an approving unattended_mode; for a role allowed execute_code on a profile offering it,
// any unattended_mode, Hermes's default deny included (bug #98728: denied at once, no
// approval.request). Bound to no such role, the same profile passes.
func TestApprovalSettingsThatNeverAskAreRefused(t *testing.T) {
	guarded := validator.Gateway{URL: gw.URL, Aliases: gw.Aliases, ApprovalRoles: []string{"coding", "research"}}
	code := validator.Gateway{URL: gw.URL, Aliases: gw.Aliases, ApprovalRoles: []string{"coding"}, ExecuteCodeRoles: []string{"coding"}}
	offerCode := func(m map[string]any) {
		section(m, "platform_toolsets")["api_server"] = []any{"terminal", "file", "web", "code_execution"}
	}
	cases := map[string]struct {
		gw     validator.Gateway
		mutate func(m map[string]any)
		why    string
	}{
		"unattended deny and execute_code (#98728)": {code, func(m map[string]any) {
			offerCode(m)
			section(m, "approvals")["unattended_mode"] = "deny"
		}, "role coding allows execute_code, which this profile offers, but Hermes's API server never asks before execute_code: it resolves it from approvals.unattended_mode deny (a deny comes at once without an approval request: Hermes bug #98728)"},
		"Hermes's default deny and execute_code": {code, offerCode,
			"approvals.unattended_mode deny (Hermes's default when unset)"},
		"execute_code by Hermes's default toolsets": {code, func(m map[string]any) { delete(section(m, "platform_toolsets"), "api_server") },
			"role coding allows execute_code, which this profile offers"},
		"unattended approve": {guarded, func(m map[string]any) { section(m, "approvals")["unattended_mode"] = "approve" },
			"approvals.unattended_mode approve lets the API server run guarded tool calls (execute_code) without asking, but role coding, research needs approvals"},
		"yolo": {guarded, func(m map[string]any) { section(m, "approvals")["mode"] = "off" },
			"approvals.mode off runs every guarded tool call without asking"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			m := exampleConfig(t)
			c.mutate(m)
			err := validator.CheckHermesConfig(marshal(t, m), nil, c.gw, nil)
			require.ErrorIs(t, err, validator.ErrProfileConfig)
			require.Contains(t, err.Error(), c.why)
			// Bound to no role that needs approvals, the same profile passes.
			require.NoError(t, validator.CheckHermesConfig(marshal(t, m), nil, gw, nil))
		})
	}
	// Terminal and file writes ask whatever unattended_mode says: an explicit deny (or a
	// PyYAML bool) is accepted for roles without execute_code, and a role allowed
	// execute_code is fine on a profile that does not offer it.
	for _, v := range []any{"deny", false, true} {
		m := exampleConfig(t)
		section(m, "approvals")["unattended_mode"] = v
		require.NoError(t, validator.CheckHermesConfig(marshal(t, m), nil, guarded, nil), "%v", v)
	}
	require.NoError(t, validator.CheckHermesConfig(marshal(t, exampleConfig(t)), nil, code, nil), "the shipped profile offers no code_execution")
	err := validator.CheckHermesConfig(marshal(t, exampleConfig(t)), nil, code, map[string][]string{"code_execution": {"execute_code"}})
	require.ErrorContains(t, err, "allows execute_code, which this profile offers", "Hermes's own report counts")
}

// The shipped profile sets every local-only setting to its off value (and so does the
// dev/test profile: hermes/hermesreal TestTheDevProfileIsLocalOnly).
func TestTheExampleProfileIsLocalOnly(t *testing.T) {
	require.Empty(t, validator.LocalOnlyReasons(exampleConfig(t)))
	require.NotEmpty(t, validator.LocalOnlyReasons(map[string]any{}), "Hermes's defaults call out")
}

// The agent's validator reads the roles bound to the profile from the settings: a profile
// offering execute_code, which Hermes's API server never asks about, is refused when a role
// allowed execute_code is bound to it, and verified when none is (a role bound elsewhere
// does not count). The build the agent reads beside Hermes is recorded with the validation: the
// commit, or "unknown: <why>".
func TestValidatorChecksApprovalsForTheBoundRolesAndRecordsTheBuild(t *testing.T) {
	ctx := context.Background()
	env := schematest.New(t)
	adm := &settings.Admin{Store: env.Store, Devices: func(context.Context) ([]string, error) { return []string{"arc"}, nil }}
	for _, alias := range []string{"chat", "work"} {
		_, _, err := adm.CommitRoute(ctx, "admin", settings.RouteInput{RouteID: alias, Alias: alias, Device: "arc", BackendModel: "m", ContextBudget: 65536, MaxOutput: 4096}, 0)
		require.NoError(t, err)
	}
	roles, _ := json.Marshal(map[string]runconfig.RoleBinding{
		"research": {Harness: "guarded", HarnessRevision: 1, Route: "work", RouteRevision: 1, Tools: []string{"terminal", "file", "web", "code_execution"}},
		"chat":     {Harness: "other", HarnessRevision: 1, Route: "chat", RouteRevision: 1, Tools: []string{"code_execution"}},
	})
	ceiling, _ := json.Marshal([]string{"terminal", "file", "web", "code_execution"})
	_, err := schema.For[schema.Settings](env.Store, schema.CollSettings).Create(ctx, runconfig.SystemSettingsID, "", &schema.Settings{
		OwnerID: runconfig.SystemSettingsID, Revision: 1, Roles: schema.Ptr(string(roles)), ToolCeiling: schema.Ptr(string(ceiling))})
	require.NoError(t, err)

	m := exampleConfig(t)
	section(m, "approvals")["unattended_mode"] = "deny"
	section(m, "platform_toolsets")["api_server"] = []any{"terminal", "file", "code_execution"}
	dir := t.TempDir()
	config := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(config, marshal(t, m), 0o600))
	url := startDouble(t, true)
	builds := map[string]hermes.Build{
		"guarded":  {Version: "0.22.2-test", CommitUnknown: "installed from a package index (test)"},
		"readonly": {Version: "0.22.2-test", Commit: "c8992a283a1e932d3f87df06d6ca397a3e80dc41"},
	}
	for _, id := range []string{"guarded", "readonly"} {
		register(t, adm, id, url, keyFile(t, hermesKey))
		_, _, err := adm.Validate(ctx, "admin", id, 1)
		require.NoError(t, err)
		v := &validator.Validator{Store: env.Store, AgentID: "test-agent", GatewayURL: func() string { return gwURL }, HermesConfig: config,
			Build: func(version string) hermes.Build { require.Equal(t, "0.22.2-test", version); return builds[id] }}
		require.NoError(t, v.Once(ctx))
	}
	g := revision(t, env.Store, "guarded")
	require.False(t, g.Verified)
	require.Contains(t, auditDetail(t, env.Store, "guarded"), "role research allows execute_code, which this profile offers, but Hermes's API server never asks before execute_code")
	require.NotNil(t, g.HermesCommit)
	require.Equal(t, "unknown: installed from a package index (test)", *g.HermesCommit)

	r := revision(t, env.Store, "readonly")
	require.True(t, r.Verified, auditDetail(t, env.Store, "readonly"))
	require.Equal(t, "c8992a283a1e932d3f87df06d6ca397a3e80dc41", *r.HermesCommit)
	require.Equal(t, "0.22.2-test", *r.HermesVersion)
	require.Contains(t, *r.Capabilities, `"runs_idempotency":{"supported":true,"durable":true,"retention_seconds":86400}`)
}
