package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/schema"
)

// TestEnvironmentRunsItsRelease (issue 35 item 3): an admin promotes a reviewed release to
// staging only (POST /api/releases/{seq}/promote {"environment": "staging"}); a runtime
// response made with a staging key is planned on staging's release, one made with a
// production key on production's; a rollback in staging moves staging back; a member's
// promote or rollback answers exactly like a missing release; the listing says which
// environment runs what.
func TestEnvironmentRunsItsRelease(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	ctx := context.Background()
	adminID, admin := env.SignUp(t, "envrel-admin@example.com", "password-envrel")
	env.Label(t, adminID, "member", "admin")
	_, member := env.SignUp(t, "envrel-member@example.com", "password-envrel-m")

	// Candidate 2: chat on the work route; its evidence passes.
	work := map[string]any{"harness": "direct", "harnessRevision": 1, "route": "work", "routeRevision": 1, "tools": []string{}}
	res := env.Do(t, "PUT", "/api/harness-selection", admin, map[string]any{"propose": true, "expectedRevision": 1,
		"roles": map[string]any{"chat": work, "research": work, "coding": work}})
	require.Equal(t, 200, res.Status, string(res.Body))
	res = env.Do(t, "POST", "/api/releases/2/evidence", admin, map[string]any{})
	require.Equal(t, 200, res.Status, string(res.Body))
	require.Contains(t, string(res.Body), `"state":"ready"`)

	// A member: exactly what an admin gets for a missing release.
	for _, op := range []string{"/promote", "/rollback"} {
		seq := map[string]string{"/promote": "2", "/rollback": "1"}[op]
		mine := env.Do(t, "POST", "/api/releases/"+seq+op, member, map[string]any{"environment": "staging"})
		missing := env.Do(t, "POST", "/api/releases/99"+op, admin, map[string]any{"environment": "staging"})
		require.Equal(t, 404, mine.Status, string(mine.Body))
		require.Equal(t, missing.Status, mine.Status)
		require.Equal(t, missing.ErrorCode(), mine.ErrorCode())
	}
	res = env.Do(t, "POST", "/api/releases/2/promote", admin, map[string]any{"environment": "Staging!"})
	require.Equal(t, 400, res.Status, string(res.Body))
	require.Equal(t, "invalid_environment", res.ErrorCode())

	res = env.Do(t, "POST", "/api/releases/2/promote", admin, map[string]any{"environment": "staging"})
	require.Equal(t, 200, res.Status, string(res.Body))
	var one struct {
		Release struct {
			Live   bool
			LiveIn []string
		}
	}
	res.JSON(t, &one)
	require.False(t, one.Release.Live, "production keeps release 1")
	require.Equal(t, []string{"staging"}, one.Release.LiveIn)

	key := func(environment string) string {
		res := env.Do(t, "POST", "/api/runtime-keys", admin, map[string]any{"appId": "envapp", "roles": []string{"chat"}, "environment": environment})
		require.Equal(t, 201, res.Status, string(res.Body))
		var k struct{ Secret string }
		res.JSON(t, &k)
		return k.Secret
	}
	prod, stag := key("production"), key("staging")
	routeOf := func(secret, idem string) string {
		t.Helper()
		res := env.Do(t, "POST", "/api/v1/responses", "", map[string]any{"model": "chat", "input": "which route?"},
			"Authorization", "Bearer "+secret, "X-App-User", "alice", "Idempotency-Key", idem)
		require.Equal(t, 200, res.Status, string(res.Body))
		var r struct{ ID string }
		res.JSON(t, &r)
		b, err := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).List(ctx, schema.ListQuery{
			Filters: []string{query.Equal("runId", strings.TrimPrefix(r.ID, "resp_"))}, Limit: 1})
		require.NoError(t, err)
		require.Len(t, b.Items, 1)
		return b.Items[0].RouteID
	}
	require.Equal(t, "work", routeOf(stag, "s1"), "staging runs release 2")
	require.Equal(t, "chat", routeOf(prod, "p1"), "production still runs release 1")

	// Rollback in staging: release 1 there again; production unchanged.
	res = env.Do(t, "POST", "/api/releases/1/rollback", admin, map[string]any{"environment": "staging"})
	require.Equal(t, 200, res.Status, string(res.Body))
	require.Equal(t, "chat", routeOf(stag, "s2"))
	res = env.Do(t, "GET", "/api/releases", admin, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	var list struct {
		Releases []struct {
			Seq    int64
			Live   bool
			LiveIn []string
		}
	}
	res.JSON(t, &list)
	for _, r := range list.Releases {
		switch r.Seq {
		case 1:
			require.True(t, r.Live)
			require.Equal(t, []string{"staging"}, r.LiveIn)
		case 2:
			require.False(t, r.Live)
			require.Empty(t, r.LiveIn)
		}
	}
	// A promote without a body is production's (as before).
	res = env.Do(t, "POST", "/api/releases/2/promote", admin, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	require.Equal(t, "work", routeOf(prod, "p2"))
	require.Equal(t, "chat", routeOf(stag, "s3"), "staging stays on its own release")

	// Staging goes back to following production: it runs release 2 with production, and
	// later production moves take it along; a member's call reads as a missing route.
	mine := env.Do(t, "POST", "/api/environments/staging/follow-production", member, nil)
	require.Equal(t, 404, mine.Status, string(mine.Body))
	res = env.Do(t, "POST", "/api/environments/Staging!/follow-production", admin, nil)
	require.Equal(t, 400, res.Status, string(res.Body))
	res = env.Do(t, "POST", "/api/environments/production/follow-production", admin, nil)
	require.Equal(t, 400, res.Status, string(res.Body))
	res = env.Do(t, "POST", "/api/environments/staging/follow-production", admin, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	require.Equal(t, "work", routeOf(stag, "s4"), "staging follows production's release 2")
	res = env.Do(t, "POST", "/api/releases/1/rollback", admin, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	require.Equal(t, "chat", routeOf(prod, "p3"))
	require.Equal(t, "chat", routeOf(stag, "s5"), "and moves with it")
	res = env.Do(t, "GET", "/api/releases", admin, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	res.JSON(t, &list)
	for _, r := range list.Releases {
		require.Empty(t, r.LiveIn, "no environment runs a release of its own")
	}
	res = env.Do(t, "POST", "/api/environments/staging/follow-production", admin, nil)
	require.Equal(t, 200, res.Status, "following already: nothing to do")
	// A later promotion to staging wins over the follow (its pointer moves forward).
	res = env.Do(t, "POST", "/api/releases/2/promote", admin, map[string]any{"environment": "staging"})
	require.Equal(t, 200, res.Status, string(res.Body))
	require.Equal(t, "work", routeOf(stag, "s6"))
	require.Equal(t, "chat", routeOf(prod, "p4"))
	var audit struct {
		Audit []struct{ Action, Target string }
	}
	res = env.Do(t, "GET", "/api/audit", admin, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	res.JSON(t, &audit)
	follows := 0
	for _, e := range audit.Audit {
		if e.Action == "release.follow" && e.Target == "settings/env-staging" {
			follows++
		}
	}
	require.Equal(t, 1, follows, "the follow is audited once: %s", res.Body)
}
