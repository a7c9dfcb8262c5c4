package settings_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/fault"
	"privateassistant/functions/functionstest"
	"privateassistant/runconfig"
	"privateassistant/schema/appwritetest"
	"privateassistant/schema/schematest"
	"privateassistant/settings"
)

// Two admin ids that differ only in case are refused, and a selection must name a
// profile or route exactly — with the same answers on every engine: Appwrite 1.9.6's ids
// are unique regardless of case on MongoDB and MariaDB, and MariaDB's string equality
// ignores case where MongoDB's does not (schema/appwritetest/doc.go: Mongo.php:494-503,
// MariaDB.php:163, 182, SQL.php:396). Before the check, on mariadb "LOCAL" became
// revision 2 of "Local" and a selection of "CHAT@1" resolved to "chat"; on mongodb
// "LOCAL" was a stale revision 1.
func TestIDsThatDifferOnlyInCaseAreRefused(t *testing.T) {
	t.Parallel()
	for _, e := range []appwritetest.Engine{appwritetest.EngineMongoDB, appwritetest.EngineMariaDB, appwritetest.EngineIdeal} {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := schematest.NewOn(t, e)
			f, err := runconfig.ParseBootstrap([]byte(functionstest.Bootstrap))
			require.NoError(t, err)
			require.NoError(t, runconfig.Bootstrap(ctx, env.Store, f, "test"))
			a := admin(env.Store)

			h := settings.HarnessInput{ProfileID: "Local", Kind: "direct", BaseURL: "http://127.0.0.1:2/v1"}
			_, _, err = a.CommitHarness(ctx, "admin", h, 0)
			require.NoError(t, err)
			for _, twin := range []string{"local", "LOCAL", "lOcAl"} {
				h.ProfileID = twin
				_, err = a.PlanHarness(ctx, h)
				fe := requireFault(t, err, fault.Conflict, "id_case_conflict")
				require.Equal(t, "Local", fe.Details["existingId"])
				_, _, err = a.CommitHarness(ctx, "admin", h, 1)
				requireFault(t, err, fault.Conflict, "id_case_conflict")
			}
			h.ProfileID = "Local" // the exact id still takes new revisions
			h.BaseURL = "http://127.0.0.1:3/v1"
			p, _, err := a.CommitHarness(ctx, "admin", h, 1)
			require.NoError(t, err)
			require.EqualValues(t, 2, p.NextRevision)

			r := settings.RouteInput{RouteID: "CHAT", Alias: "chat", Device: "arc", BackendModel: "m", ContextBudget: 131072}
			_, err = a.PlanRoute(ctx, r)
			fe := requireFault(t, err, fault.Conflict, "id_case_conflict")
			require.Equal(t, "chat", fe.Details["existingId"])

			// A selection names revisions exactly.
			sel := settings.SelectionInput{ExpectedRevision: 1, Roles: map[string]runconfig.RoleBinding{
				"chat": {Harness: "direct", HarnessRevision: 1, Route: "CHAT", RouteRevision: 1}}}
			_, err = a.PlanSelection(ctx, sel)
			requireFault(t, err, fault.Invalid, "unknown_route")
			sel.Roles["chat"] = runconfig.RoleBinding{Harness: "DIRECT", HarnessRevision: 1, Route: "chat", RouteRevision: 1}
			_, err = a.PlanSelection(ctx, sel)
			requireFault(t, err, fault.Invalid, "unknown_harness")
			sel.Roles = map[string]runconfig.RoleBinding{
				"chat": {Harness: "direct", HarnessRevision: 1, Route: "chat", RouteRevision: 1},
				"Chat": {Harness: "direct", HarnessRevision: 1, Route: "chat", RouteRevision: 1}}
			_, err = a.PlanSelection(ctx, sel)
			requireFault(t, err, fault.Invalid, "invalid_role")
			delete(sel.Roles, "Chat")
			_, err = a.PlanSelection(ctx, sel)
			require.NoError(t, err)
		})
	}
}
