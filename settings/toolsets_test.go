package settings_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/fault"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/settings"
)

// A Hermes profile's toolsets (recorded by validation from GET /v1/toolsets) must fit the
// tool policy of the roles bound to it: validation refuses to verify one that exceeds the
// admin ceiling or a bound role's policy, and a selection binding a role to a profile that
// offers more than the role's policy is refused with the reason. Unknown toolsets only warn.
func TestHarnessToolsetsMustFitTheRolesPolicy(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := bootstrapped(t) // ceiling terminal, file, web; research: web; coding: terminal, file
	offers := `{"toolsets":{"terminal":["process_manage","terminal"],"file":["patch","read_file","search_files","write_file"]}}`
	a := admin(st)
	// A Hermes profile is validated by the agent (it holds the key): the admin's Validate
	// records the request, the agent probes and stores the result with CompleteValidation.
	validate := func() (*schema.HarnessProfile, settings.Probe, error) {
		rec, pr, err := a.Validate(ctx, "admin", "hp", 1)
		if err != nil {
			return rec, pr, err
		}
		require.True(t, pr.Pending)
		require.NotNil(t, rec.ValidationRequestedAt)
		return a.CompleteValidation(ctx, "agent:test", rec, settings.Probe{Verified: true, Version: "0.22.2", Capabilities: offers})
	}
	_, _, err := a.CommitHarness(ctx, "admin", settings.HarnessInput{ProfileID: "hp", Kind: "hermes", BaseURL: "http://127.0.0.1:1", KeyRef: "env:K"}, 0)
	require.NoError(t, err)
	rec, pr, err := validate()
	require.NoError(t, err)
	require.True(t, pr.Verified, pr.Reason)
	require.True(t, rec.Verified)

	sel := func(rev int64, role string, tools []string) settings.SelectionInput {
		roles := map[string]runconfig.RoleBinding{
			"chat":     {Harness: "direct", HarnessRevision: 1, Route: "chat", RouteRevision: 1, Tools: []string{}},
			"research": {Harness: "direct", HarnessRevision: 1, Route: "work", RouteRevision: 1, Tools: []string{"web"}},
			"coding":   {Harness: "direct", HarnessRevision: 1, Route: "work", RouteRevision: 1, Tools: []string{"terminal", "file"}},
		}
		roles[role] = runconfig.RoleBinding{Harness: "hp", HarnessRevision: 1, Route: "work", RouteRevision: 1, Tools: tools}
		return settings.SelectionInput{ExpectedRevision: rev, Roles: roles}
	}
	_, err = a.PlanSelection(ctx, sel(1, "research", []string{"web"}))
	f := requireFault(t, err, fault.Invalid, "harness_tools_exceed_policy")
	require.Contains(t, f.Message, "role research")
	require.Contains(t, f.Message, "file, terminal")
	_, err = a.PlanSelection(ctx, sel(1, "coding", []string{"terminal"}))
	f = requireFault(t, err, fault.Invalid, "harness_tools_exceed_policy")
	require.Contains(t, f.Message, ": file (the role allows terminal)")
	p, err := a.CommitSelection(ctx, "admin", sel(1, "coding", nil)) // nil: the whole ceiling
	require.NoError(t, err, "%v", p)

	// Validating again: a profile now offering web too exceeds coding's policy; one
	// offering browser exceeds the admin ceiling itself.
	offers = `{"toolsets":{"terminal":["terminal"],"file":["read_file"],"web":["web_extract","web_search"]}}`
	_, pr, err = validate()
	require.NoError(t, err)
	require.True(t, pr.Verified, "coding's policy is the whole ceiling, web included: %s", pr.Reason)
	_, err = a.CommitSelection(ctx, "admin", sel(2, "coding", []string{"terminal", "file"}))
	requireFault(t, err, fault.Invalid, "harness_tools_exceed_policy")
	rec, pr, err = validate()
	require.NoError(t, err)
	require.True(t, pr.Verified)
	offers = `{"toolsets":{"browser":["browser_click"]}}`
	rec, pr, err = validate()
	require.NoError(t, err)
	require.False(t, pr.Verified)
	// Coding is bound to it: it stays verified (coding keeps serving, the gateway still
	// removes tools outside its policy), the failure is recorded, which raises an alert
	// and refuses binding another role to it.
	require.True(t, rec.Verified, "a live revision stays verified")
	require.NotNil(t, rec.CheckFailure)
	require.Contains(t, *rec.CheckFailure, "outside the admin tool ceiling: browser")
	require.Contains(t, pr.Reason, "outside the admin tool ceiling: browser")
	offers = `{"toolsets":{"terminal":["terminal"],"file":["read_file"],"web":["web_search"]}}`
	_, err = a.CommitSelection(ctx, "admin", sel(2, "research", []string{"web"}))
	requireFault(t, err, fault.Invalid, "harness_check_failed")
	_, pr, err = validate()
	require.NoError(t, err)
	require.True(t, pr.Verified)
	offers = `{"toolsets":{"terminal":["terminal"],"file":["read_file"],"web":["web_search"],"memory":["memory"]}}`
	_, pr, err = validate()
	require.NoError(t, err)
	require.False(t, pr.Verified)
	require.Contains(t, pr.Reason, "outside the admin tool ceiling: memory")

	// Unknown toolsets (a Hermes that does not list them): the selection warns only.
	offers = `{"runs_idempotency":{"supported":true}}`
	_, pr, err = validate()
	require.NoError(t, err)
	require.True(t, pr.Verified)
	plan, err := a.PlanSelection(ctx, sel(2, "research", []string{"web"}))
	require.NoError(t, err)
	require.Contains(t, plan.Warnings, "role research: which toolsets harness hp revision 1 offers is unknown (its Hermes did not list them when validated); the inference gateway still removes tools outside the role's policy")
}
