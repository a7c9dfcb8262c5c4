package deploy_test

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"privateassistant/agent/validator"
	"privateassistant/runconfig"
)

// TestHermesProfilePassesHarnessValidation: the example Hermes profile passes the agent's
// own config check (agent/validator.CheckHermesConfig) against the shipped gateway address
// and route aliases: main model, native delegation and any auxiliary model on the gateway,
// route aliases only, no fallback provider. When it offers the MCP job tools (pa), its
// tool_search is off and every role bound to Hermes allows them (else harness validation
// refuses the profile for the roles' tool policy).
func TestHermesProfilePassesHarnessValidation(t *testing.T) {
	t.Parallel()
	s := load(t)
	gw := validator.Gateway{URL: "http://" + s.agentEnv["PA_GATEWAY_ADDR"] + "/v1"}
	for _, r := range s.boot.Routes {
		gw.Aliases = append(gw.Aliases, r.Alias)
	}
	// Checked as validation checks it for the roles the bootstrap binds to Hermes that
	// need approvals (their tools include one Hermes guards).
	for name, r := range s.boot.Roles {
		if r.Harness == "hermes" && runconfig.ToolPolicy(runconfig.EffectiveTools(s.boot.ToolCeiling, r.Tools)).NeedsApprovals() {
			gw.ApprovalRoles = append(gw.ApprovalRoles, name)
		}
	}
	require.NotEmpty(t, gw.ApprovalRoles, "research and coding run terminal and file tools")
	require.NoError(t, validator.CheckHermesConfigFile("hermes/config.yaml", gw, nil))
	b, err := os.ReadFile("hermes/config.yaml")
	require.NoError(t, err)
	offers, err := validator.OffersJobTools(b, nil)
	require.NoError(t, err)
	if !offers {
		return
	}
	require.Equal(t, "off", s.hermes.Tools.ToolSearch.Enabled, "a profile offering pa turns tools.tool_search off")
	for name, r := range s.boot.Roles {
		if r.Harness != "hermes" {
			continue
		}
		p := runconfig.ToolPolicy(runconfig.EffectiveTools(s.boot.ToolCeiling, r.Tools))
		require.True(t, p.Covers("pa"), "role %s runs on the profile offering pa but its policy does not allow the job tools", name)
	}
}

// TestHermesProfileIsLocalOnly: the shipped profile makes no outbound call that no role
// asked for. Every LocalOnly setting (on by default in Hermes 0.22.2: the model catalog,
// update and plugin checks, lazy installs; telemetry and OTLP export) is set off; there is
// no cloud provider, no fallback of any kind and no approvals.unattended_mode; and the
// .env example holds no cloud provider key and no proxy variable. (The real Hermes with
// these settings, behind a trap proxy: agent/executor TestNoOutboundCallsDuringAResearchRun.)
func TestHermesProfileIsLocalOnly(t *testing.T) {
	t.Parallel()
	s := load(t)
	b, err := os.ReadFile("hermes/config.yaml")
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal(b, &cfg))
	require.Empty(t, validator.LocalOnlyReasons(cfg))
	for _, ls := range validator.LocalOnly {
		if ls.OnByDefault {
			top, _, _ := strings.Cut(ls.Path, ".")
			require.Contains(t, cfg, top, "%s is set explicitly (on by default: %s)", ls.Path, ls.What)
		}
	}
	for _, k := range []string{"fallback_model", "fallback_providers", "providers", "custom_providers"} {
		require.NotContains(t, cfg, k)
	}
	approvals, _ := cfg["approvals"].(map[string]any)
	require.Equal(t, "manual", approvals["mode"])
	require.NotContains(t, approvals, "unattended_mode", "never approve; deny is Hermes's default")
	require.Empty(t, s.hermes.Delegation.FallbackProviders)
	for k := range s.hermesEnv {
		upper := strings.ToUpper(k)
		require.False(t, strings.HasSuffix(upper, "_PROXY"), "hermes.env.example sets %s", k)
		require.False(t, strings.HasSuffix(upper, "_API_KEY") && k != "GATEWAY_API_KEY", "hermes.env.example sets a provider key %s", k)
	}
}
