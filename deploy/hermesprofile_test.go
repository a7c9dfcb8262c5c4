package deploy_test

import (
	"os"
	"testing"

	"github.com/stretchr/testify/require"

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
