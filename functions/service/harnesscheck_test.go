package service_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/validator"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// A failed re-validation of the live harness revision never takes work down (issue 33
// item 4): the revision stays verified and the roles bound to it keep admitting runs;
// the admin's /api/system carries an alert (a member's does not), the validator reports
// it for the pa_live_harness_check_failing gauge, and no role can be newly bound to the
// revision; a later passing validation clears all of it.
func TestFailedRevalidationKeepsLiveRolesAndAlerts(t *testing.T) {
	ctx := context.Background()
	env, admin, user := adminEnv(t)
	keyFile := filepath.Join(t.TempDir(), "hermes.key")
	require.NoError(t, os.WriteFile(keyFile, []byte(hermesKey+"\n"), 0o600))
	res := env.Do(t, "POST", "/api/harnesses", admin, map[string]any{"input": map[string]any{"profileId": "good", "kind": "hermes",
		"baseUrl": startDouble(t, true), "keyRef": "file:" + keyFile}, "expectedRevision": 0})
	require.Equal(t, 201, res.Status, string(res.Body))

	failing := -1
	val := &validator.Validator{Store: env.Store, AgentID: "check-test", Failing: func(n int) { failing = n }}
	validate := func() {
		t.Helper()
		res := env.Do(t, "POST", "/api/harnesses/good/validate?revision=1", admin, nil)
		require.Equal(t, 202, res.Status, string(res.Body))
		require.NoError(t, val.Once(ctx))
	}
	revision := func() *schema.HarnessProfile {
		t.Helper()
		hp, err := schema.For[schema.HarnessProfile](env.Store, schema.CollHarnessProfiles).Get(ctx, runconfig.RevisionDocID("good", 1))
		require.NoError(t, err)
		return hp
	}
	alerts := func(jwt string) []map[string]any {
		t.Helper()
		res := env.Do(t, "GET", "/api/system", jwt, nil)
		require.Equal(t, 200, res.Status, string(res.Body))
		var body struct {
			Alerts []map[string]any `json:"alerts"`
		}
		res.JSON(t, &body)
		return body.Alerts
	}
	sel := func(expected int64, coding string) map[string]any {
		return map[string]any{"expectedRevision": expected, "roles": map[string]any{
			"chat":     map[string]any{"harness": "direct", "harnessRevision": 1, "route": "chat", "routeRevision": 1, "tools": []string{}},
			"research": map[string]any{"harness": "good", "harnessRevision": 1, "route": "work", "routeRevision": 1, "tools": []string{"web"}},
			"coding":   map[string]any{"harness": coding, "harnessRevision": 1, "route": "work", "routeRevision": 1, "tools": []string{"terminal", "file"}},
		}}
	}
	conv := env.Conversation(t, user)
	research := func(id string) int {
		return env.Do(t, "POST", "/api/conversations/"+conv+"/messages", user, map[string]any{"requestId": id, "text": "look it up", "role": "research"}).Status
	}

	validate()
	require.True(t, revision().Verified)
	require.Equal(t, 0, failing)
	res = env.Do(t, "PUT", "/api/harness-selection", admin, sel(1, "direct"))
	require.Equal(t, 200, res.Status, string(res.Body))
	require.Equal(t, 202, research("before"))
	require.Empty(t, alerts(admin))

	// The key the agent reads goes wrong: the check fails.
	require.NoError(t, os.WriteFile(keyFile, []byte("not-the-key-0123456789abcdef0123456789\n"), 0o600))
	validate()
	hp := revision()
	require.True(t, hp.Verified, "a live revision stays verified")
	require.NotNil(t, hp.CheckFailedAt)
	require.NotEmpty(t, *hp.CheckFailure)
	require.Equal(t, 202, research("during"), "research keeps admitting")
	require.Equal(t, 1, failing, "the gauge counts it")
	al := alerts(admin)
	require.Len(t, al, 1)
	require.Equal(t, "harness_check_failed", al[0]["kind"])
	require.Equal(t, "good", al[0]["harness"])
	require.Contains(t, al[0]["message"], "Research keeps working on it")
	require.NotContains(t, al[0]["message"], "/api/")
	require.Empty(t, alerts(user), "a member sees no admin alert")
	// A change that binds another role to it is refused; one that leaves it bound becomes
	// a candidate whose promotion the failed check blocks (its evidence names it), while
	// the live roles keep serving.
	res = env.Do(t, "PUT", "/api/harness-selection", admin, sel(2, "good"))
	require.Equal(t, 400, res.Status, string(res.Body))
	require.Equal(t, "harness_check_failed", res.ErrorCode())
	res = env.Do(t, "PUT", "/api/harness-selection", admin, map[string]any{"expectedRevision": 2, "roles": sel(2, "direct")["roles"], "toolCeiling": []string{"web", "terminal", "file"}})
	require.Equal(t, 409, res.Status, string(res.Body))
	require.Equal(t, "evidence_pending", res.ErrorCode())
	require.Contains(t, string(res.Body), "its latest check failed")
	require.Equal(t, 202, research("blocked"), "research keeps admitting")

	// Fixed and validated again: the alert and the block are gone.
	require.NoError(t, os.WriteFile(keyFile, []byte(hermesKey+"\n"), 0o600))
	validate()
	hp = revision()
	require.True(t, hp.Verified)
	require.Nil(t, hp.CheckFailedAt)
	require.Nil(t, hp.CheckFailure)
	require.Equal(t, 0, failing)
	require.Empty(t, alerts(admin))
	res = env.Do(t, "PUT", "/api/harness-selection", admin, sel(3, "good"))
	require.Equal(t, 200, res.Status, string(res.Body))

	// A revision never verified still fails closed: a failing check leaves it unverified.
	res = env.Do(t, "POST", "/api/harnesses", admin, map[string]any{"input": map[string]any{"profileId": "fresh", "kind": "hermes",
		"baseUrl": startDouble(t, true), "keyRef": "file:" + filepath.Join(t.TempDir(), "missing")}, "expectedRevision": 0})
	require.Equal(t, 201, res.Status, string(res.Body))
	res = env.Do(t, "POST", "/api/harnesses/fresh/validate?revision=1", admin, nil)
	require.Equal(t, 202, res.Status, string(res.Body))
	require.NoError(t, val.Once(ctx))
	var l struct{ Harnesses []schema.HarnessProfile }
	env.Do(t, "GET", "/api/harnesses", admin, nil).JSON(t, &l)
	for _, h := range l.Harnesses {
		if h.ProfileID == "fresh" {
			require.False(t, h.Verified)
			require.Nil(t, h.CheckFailedAt)
		}
	}
}
