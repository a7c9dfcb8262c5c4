package settings_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/fault"
	"privateassistant/queue/redistest"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/settings"
)

func propose(t *testing.T, a *settings.Admin, actor string, expected int64, route string) *schema.Release {
	t.Helper()
	in := changeChat()
	in.ExpectedRevision = expected
	b := in.Roles["chat"]
	b.Route = route
	in.Roles["chat"] = b
	_, rel, err := a.ProposeSelection(context.Background(), actor, in)
	require.NoError(t, err)
	require.Equal(t, schema.ReleaseCollecting, rel.State, "nothing is live before its evidence")
	return rel
}

func collect(t *testing.T, a *settings.Admin, rel *schema.Release) *schema.Release {
	t.Helper()
	got, err := (&settings.Reconciler{Admin: a, Holder: "rec"}).Collect(context.Background(), rel)
	require.NoError(t, err)
	return got
}

func live(t *testing.T, st *schema.Store) string {
	t.Helper()
	s, err := schema.For[schema.Settings](st, schema.CollSettings).Get(context.Background(), runconfig.SystemSettingsID)
	require.NoError(t, err)
	return *s.Release
}

// TestTwoAdminRule: with two or more admins the author alone cannot promote; another
// admin's approval (or promotion) lets it go live; with one admin, or the rule off, the
// author promotes. Nothing without passing evidence.
func TestTwoAdminRule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := bootstrapped(t)
	a := admin(st)
	admins := 2
	a.Admins = func(context.Context) (int, error) { return admins, nil }

	rel := propose(t, a, "alice", 1, "work")
	_, err := a.Promote(ctx, "alice", rel.Seq)
	requireFault(t, err, fault.Conflict, "evidence_missing")
	rel = collect(t, a, rel)
	require.Equal(t, schema.ReleaseReady, rel.State, "%v", *rel.Evidence)
	require.Contains(t, *rel.Evidence, `"model":"demo-work"`, "the evidence names what it verified")

	_, err = a.Promote(ctx, "alice", rel.Seq)
	f := requireFault(t, err, fault.Conflict, "second_approver_required")
	require.ErrorIs(t, f, settings.ErrSecondApprover)
	require.Equal(t, settings.ReleaseID(1), live(t, st), "nothing moved")
	_, err = a.Approve(ctx, "bob", rel.Seq)
	require.NoError(t, err)
	got, err := a.Promote(ctx, "alice", rel.Seq)
	require.NoError(t, err)
	require.Equal(t, settings.ReleaseID(2), live(t, st))
	require.Equal(t, "alice", *got.PromotedBy)

	// Another admin may promote the author's candidate directly.
	rel = collect(t, a, propose(t, a, "alice", 2, "chat"))
	_, err = a.Promote(ctx, "bob", rel.Seq)
	require.NoError(t, err)
	require.Equal(t, settings.ReleaseID(3), live(t, st))

	// One admin, or the rule off: the author promotes.
	admins = 1
	rel = collect(t, a, propose(t, a, "alice", 3, "work"))
	_, err = a.Promote(ctx, "alice", rel.Seq)
	require.NoError(t, err)
	admins = 3
	a.SoloPromotion = true
	rel = collect(t, a, propose(t, a, "alice", 4, "chat"))
	_, err = a.Promote(ctx, "alice", rel.Seq)
	require.NoError(t, err)
	require.Equal(t, settings.ReleaseID(5), live(t, st))

	// A stale head: the candidate for revision 6 is taken by whoever proposed first.
	in := changeChat()
	in.ExpectedRevision = 4
	_, _, err = a.ProposeSelection(ctx, "bob", in)
	requireFault(t, err, fault.Conflict, "stale_revision")
}

// TestRollbackPinsAndCache: promotion and rollback move the live pointer and the plan
// cache's pointer (keyed by the release fingerprint); a resolution names the release it
// was pinned to; a rollback needs a release that was live and still passes its checks.
func TestRollbackPinsAndCache(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := bootstrapped(t)
	r := redistest.Start(t)
	rdb := r.Client()
	defer rdb.Close()
	cache := &runconfig.Cache{RDB: rdb}
	a := admin(st)
	a.Plans = cache

	p1, _, err := cache.Get(ctx, st, "chat")
	require.NoError(t, err)
	require.Equal(t, settings.ReleaseID(1), p1.Release)
	rel1, err := a.Release(ctx, 1)
	require.NoError(t, err)
	require.Equal(t, rel1.Fingerprint, p1.ReleaseFingerprint, "the bootstrap's release is what serves")

	rel2 := collect(t, a, propose(t, a, "alice", 1, "work"))
	_, err = a.Rollback(ctx, "alice", rel2.Seq)
	requireFault(t, err, fault.Conflict, "never_live")
	_, err = a.Promote(ctx, "alice", rel2.Seq)
	require.NoError(t, err)
	require.Equal(t, rel2.Fingerprint, rdb.Get(ctx, "pa:plan:current").Val(), "promotion moved the cache pointer at once")
	p2, _, err := cache.Get(ctx, st, "chat")
	require.NoError(t, err)
	require.Equal(t, "work", p2.RouteID)
	require.Equal(t, settings.ReleaseID(2), p2.Release)
	require.NotEqual(t, p1.Fingerprint, p2.Fingerprint)

	// Rollback: release 1 is live again; a run pinned to release 2 keeps its plan (it
	// carries its own bindings and fingerprint).
	_, err = a.Rollback(ctx, "bob", 1)
	require.NoError(t, err)
	require.Equal(t, settings.ReleaseID(1), live(t, st))
	require.Equal(t, rel1.Fingerprint, rdb.Get(ctx, "pa:plan:current").Val(), "the pointer moves back: a rollback is a later live revision")
	p3, hit, err := cache.Get(ctx, st, "chat")
	require.NoError(t, err)
	require.True(t, hit, "release 1's plan is still cached by its fingerprint")
	require.Equal(t, p1, p3)
	require.Equal(t, "work", p2.RouteID, "the pinned plan is unchanged")
	h, err := a.Head(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, h.Seq, "a rollback does not move the head")

	// Rolling back to a release, or promoting a checked candidate, whose harness fails its
	// checks since is refused.
	rel3 := collect(t, a, propose(t, a, "alice", 2, "chat"))
	require.Equal(t, schema.ReleaseReady, rel3.State)
	_, err = schema.For[schema.HarnessProfile](st, schema.CollHarnessProfiles).Update(ctx, runconfig.RevisionDocID("direct", 1),
		map[string]any{"checkFailedAt": time.Now().UTC().Format(time.RFC3339Nano), "checkFailure": "gone"})
	require.NoError(t, err)
	_, err = a.Rollback(ctx, "bob", 2)
	requireFault(t, err, fault.Conflict, "evidence_failed")
	_, err = a.Promote(ctx, "bob", rel3.Seq)
	f := requireFault(t, err, fault.Conflict, "evidence_failed")
	require.Contains(t, f.Message, "its latest check failed (gone)")
	require.Equal(t, settings.ReleaseID(1), live(t, st))
}

// TestReconcilerLeaseFences: one reconciler at a time; a reconciler whose lease expired
// and was taken over cannot write its evidence.
func TestReconcilerLeaseFences(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st := bootstrapped(t)
	a := admin(st)
	rel := propose(t, a, "alice", 1, "work")
	t0 := time.Now()
	var late *schema.Release
	slow := &settings.Reconciler{Admin: a, Holder: "slow", LeaseTTL: time.Minute, Now: func() time.Time { return t0 },
		Probe: func(ctx context.Context, _, role string, _ *schema.HarnessProfile, _ *schema.ModelRoute) (settings.ProbeOutcome, error) {
			if late != nil {
				return settings.ProbeOutcome{Done: true, OK: true, Detail: "ok"}, nil
			}
			cur, err := a.Release(ctx, 2)
			require.NoError(t, err)
			_, err = (&settings.Reconciler{Admin: a, Holder: "other", Now: func() time.Time { return t0 }}).Collect(ctx, cur)
			require.ErrorIs(t, err, settings.ErrLeaseHeld, "the lease is held")
			// The slow one stalls past its lease; another takes over and finishes.
			late, err = (&settings.Reconciler{Admin: a, Holder: "next", Now: func() time.Time { return t0.Add(2 * time.Minute) },
				Probe: func(context.Context, string, string, *schema.HarnessProfile, *schema.ModelRoute) (settings.ProbeOutcome, error) {
					return settings.ProbeOutcome{Done: true, OK: true, Detail: "answered"}, nil
				}}).Collect(ctx, cur)
			require.NoError(t, err)
			return settings.ProbeOutcome{Done: true, OK: true, Detail: "ok"}, nil
		}}
	_, err := slow.Collect(ctx, rel)
	require.True(t, errors.Is(err, settings.ErrLeaseHeld), "fenced: %v", err)
	got, err := a.Release(ctx, 2)
	require.NoError(t, err)
	require.Equal(t, schema.ReleaseReady, got.State)
	require.Contains(t, *got.Evidence, `"collector":"next"`)
	require.Contains(t, *got.Evidence, `"detail":"answered"`)
	require.Equal(t, late.Revision, got.Revision, "nothing written after the takeover")

	// A probe nobody answered yet keeps the candidate collecting, saying so; one that
	// failed fails the evidence with its reason: it cannot be promoted.
	rel = propose(t, a, "alice", 2, "chat")
	var answered bool
	probe := func(_ context.Context, fp, role string, _ *schema.HarnessProfile, _ *schema.ModelRoute) (settings.ProbeOutcome, error) {
		require.Len(t, fp, 64, "the release's content fingerprint")
		if !answered {
			return settings.ProbeOutcome{Detail: "waiting for the probe run on device arc"}, nil
		}
		return settings.ProbeOutcome{Done: true, Detail: "no answer"}, nil
	}
	got, err = (&settings.Reconciler{Admin: a, Holder: "rec", Probe: probe}).Collect(ctx, rel)
	require.NoError(t, err)
	require.Equal(t, schema.ReleaseCollecting, got.State)
	require.Contains(t, *got.Evidence, `"waiting":"role chat: waiting for the probe run on device arc"`)
	answered = true
	got, err = (&settings.Reconciler{Admin: a, Holder: "rec", Probe: probe}).Collect(ctx, got)
	require.NoError(t, err)
	require.Equal(t, schema.ReleaseFailed, got.State)
	require.Contains(t, *got.Evidence, "the probe run failed: no answer")
	_, err = a.Promote(ctx, "alice", 3)
	requireFault(t, err, fault.Conflict, "evidence_missing")
}
