package settings_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/fault"
	"privateassistant/queue/redistest"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/settings"
)

// TestEnvironmentReleases (issue 35 item 3): an environment runs production's release
// until one is promoted to it; promotion to staging goes through the same checks (passing
// evidence, the two-admin rule), moves staging's pointer only and leaves production (and
// other environments) on theirs; each environment's plan comes from its own release
// (cached by fingerprint); rollback works per environment; the moves are audited.
func TestEnvironmentReleases(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := bootstrapped(t)
	r := redistest.Start(t)
	rdb := r.Client()
	defer rdb.Close()
	cache := &runconfig.Cache{RDB: rdb}
	a := admin(st)
	a.Plans = cache
	a.Admins = func(context.Context) (int, error) { return 2, nil }

	route := func(env string) string {
		t.Helper()
		p, _, err := cache.GetIn(ctx, st, env, "chat")
		require.NoError(t, err)
		return p.RouteID
	}
	require.Equal(t, "chat", route(""))
	require.Equal(t, "chat", route("staging"), "never promoted separately: production's release")
	require.Equal(t, "=", rdb.Get(ctx, "pa:plan:env:staging").Val(), "staging's pointer follows production's")

	rel := propose(t, a, "alice", 1, "work")
	_, err := a.PromoteIn(ctx, "alice", rel.Seq, "staging")
	requireFault(t, err, fault.Conflict, "evidence_missing")
	rel = collect(t, a, rel)
	_, err = a.PromoteIn(ctx, "alice", rel.Seq, "staging")
	requireFault(t, err, fault.Conflict, "second_approver_required")
	_, err = a.PromoteIn(ctx, "bob", rel.Seq, "Staging!")
	requireFault(t, err, fault.Invalid, "invalid_environment")
	_, err = a.PromoteIn(ctx, "bob", 99, "staging")
	requireFault(t, err, fault.NotFound, "not_found")

	got, err := a.PromoteIn(ctx, "bob", rel.Seq, "staging")
	require.NoError(t, err)
	require.NotNil(t, got.PromotedAt)
	require.Equal(t, settings.ReleaseID(1), live(t, st), "production keeps its release")
	require.Equal(t, rel.Fingerprint, rdb.Get(ctx, "pa:plan:env:staging").Val(), "staging's pointer moved at once")
	require.Equal(t, "work", route("staging"))
	require.Equal(t, "chat", route(""))
	require.Equal(t, "chat", route("development"), "another environment keeps production's")
	envs, err := a.EnvReleases(ctx)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"staging": settings.ReleaseID(2)}, envs)
	_, err = schema.For[schema.Audit](st, schema.CollAudit).Get(ctx, settings.AuditID("settings/"+runconfig.EnvSettingsID("staging"), 1))
	require.NoError(t, err, "the environment's move is audited")

	// Production's pointer moving (a later promotion) does not move staging's.
	rel3 := collect(t, a, propose(t, a, "alice", 2, "chat"))
	_, err = a.PromoteIn(ctx, "bob", rel3.Seq, "production")
	require.NoError(t, err)
	require.Equal(t, settings.ReleaseID(3), live(t, st))
	require.Equal(t, "work", route("staging"))

	// Rollback per environment: staging back to release 1; production stays on 3.
	_, err = a.RollbackIn(ctx, "alice", 1, "staging")
	require.NoError(t, err)
	require.Equal(t, "chat", route("staging"))
	envs, err = a.EnvReleases(ctx)
	require.NoError(t, err)
	require.Equal(t, settings.ReleaseID(1), envs["staging"])
	require.Equal(t, settings.ReleaseID(3), live(t, st))
	// A release never live anywhere cannot be rolled back to, in any environment.
	rel4 := collect(t, a, propose(t, a, "alice", 3, "work"))
	_, err = a.RollbackIn(ctx, "alice", rel4.Seq, "staging")
	requireFault(t, err, fault.Conflict, "never_live")

	// After the pointers expire, the plans still come from each environment's document.
	require.NoError(t, rdb.FlushAll(ctx).Err())
	require.Equal(t, "chat", route("staging"))
	p, hit, err := cache.GetIn(ctx, st, "staging", "chat")
	require.NoError(t, err)
	require.True(t, hit)
	require.Equal(t, settings.ReleaseID(1), p.Release)
	require.NoError(t, a.Repair(ctx))
}
