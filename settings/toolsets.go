package settings

import (
	"context"
	"fmt"
	"sort"
	"strings"

	"privateassistant/runconfig"
	"privateassistant/schema"
)

// A Hermes profile's toolsets (what its API server offers a run's model: GET /v1/toolsets,
// recorded by validation in the revision's capabilities) must fit the tool policy of the
// roles bound to it. Validation refuses to verify a profile that offers a toolset outside
// the admin ceiling or outside the effective policy of a role bound to it, and a selection
// that binds a role to a profile offering more than the role's policy is refused
// (harness_tools_exceed_policy). When the toolsets are unknown (a Hermes without
// /v1/toolsets) the selection only warns: the inference gateway still removes every tool
// outside the run's policy from each model call and refuses an answer calling one.

func quoted(list []string) string {
	if len(list) == 0 {
		return "none"
	}
	return strings.Join(list, ", ")
}

// toolsetsVerdict turns a verified probe of profileID unverified when the toolsets it
// found exceed the ceiling or a bound role's policy.
func (a *Admin) toolsetsVerdict(ctx context.Context, profileID string, pr Probe) Probe {
	if !pr.Verified {
		return pr
	}
	ts, ok := runconfig.ProfileToolsets(&pr.Capabilities)
	if !ok {
		return pr
	}
	_, roles, ceiling, err := a.currentSettings(ctx)
	if err != nil {
		return pr // not configured yet: the selection checks it when a role is bound
	}
	if out := runconfig.ToolPolicy(ceiling).Uncovered(ts); len(out) > 0 {
		pr.Verified = false
		pr.Reason = fmt.Sprintf("the profile offers toolsets outside the admin tool ceiling: %s (the ceiling allows %s); limit the profile's platform_toolsets.api_server", quoted(out), quoted(ceiling))
		return pr
	}
	names := make([]string, 0, len(roles))
	for r := range roles {
		names = append(names, r)
	}
	sort.Strings(names)
	for _, r := range names {
		b := roles[r]
		if b.Harness != profileID {
			continue
		}
		pol := runconfig.EffectiveTools(ceiling, b.Tools)
		if out := runconfig.ToolPolicy(pol).Uncovered(ts); len(out) > 0 {
			pr.Verified = false
			pr.Reason = fmt.Sprintf("the profile offers toolsets outside the tool policy of role %s, which is bound to it: %s (the role allows %s); limit the profile's platform_toolsets.api_server or bind the role to another profile", r, quoted(out), quoted(pol))
			return pr
		}
	}
	return pr
}

// toolsetsFit checks a role's binding to harness h under ceiling: an error when h offers
// toolsets outside the role's effective policy, a warning when they are unknown.
func toolsetsFit(role string, b runconfig.RoleBinding, h *schema.HarnessProfile, ceiling []string) (warning string, err error) {
	if h.Kind != "hermes" {
		return "", nil
	}
	ts, ok := runconfig.ProfileToolsets(h.Capabilities)
	if !ok {
		return fmt.Sprintf("role %s: which toolsets harness %s revision %d offers is unknown (its Hermes did not list them when validated); the inference gateway still removes tools outside the role's policy", role, h.ProfileID, h.Revision), nil
	}
	pol := runconfig.EffectiveTools(ceiling, b.Tools)
	if out := runconfig.ToolPolicy(pol).Uncovered(ts); len(out) > 0 {
		return "", bad("harness_tools_exceed_policy", "role %s: harness %s revision %d offers toolsets outside the role's tool policy: %s (the role allows %s); bind a profile whose platform_toolsets.api_server fits the role, or widen the role's tools",
			role, h.ProfileID, h.Revision, quoted(out), quoted(pol))
	}
	return "", nil
}
