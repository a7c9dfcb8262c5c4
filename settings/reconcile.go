package settings

import (
	"context"
	"encoding/json"
	"errors"
	"strconv"
	"time"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/runconfig"
	"privateassistant/schema"
)

// Reconciler collects the evidence of collecting candidates. One at a time holds a
// candidate: it takes a lease (leaseHolder, leaseUntil, leaseGeneration) with a
// revision-guarded write, and writes the evidence with the revision that write produced,
// so a reconciler whose lease expired and was taken over cannot write (the fence).
type Reconciler struct {
	Admin    *Admin
	Holder   string        // who collects (e.g. the function execution or host)
	LeaseTTL time.Duration // default 2 min
	Probe    ProbeRun
	// Now is the clock (tests); nil: time.Now.
	Now func() time.Time
}

// ErrLeaseHeld: another reconciler holds the candidate's lease.
var ErrLeaseHeld = errors.New("another reconciler holds the lease")

func (r *Reconciler) now() time.Time {
	if r.Now != nil {
		return r.Now().UTC()
	}
	return time.Now().UTC()
}

// Pass collects the evidence of every collecting candidate, oldest first; a candidate
// another reconciler holds is skipped.
func (r *Reconciler) Pass(ctx context.Context) error {
	if err := r.Admin.Repair(ctx); err != nil {
		return err
	}
	items, err := r.Admin.releases().All(ctx, schema.ListQuery{Filters: []string{query.Equal("state", schema.ReleaseCollecting)}, Order: []string{query.OrderAsc("seq")}})
	if err != nil {
		return err
	}
	for i := range items {
		if _, err := r.Collect(ctx, &items[i]); err != nil && !errors.Is(err, ErrLeaseHeld) {
			return err
		}
	}
	return nil
}

// Collect takes rel's lease, checks its content against the providers and writes the
// evidence under the lease: state ready or failed, or still collecting while a harness
// is being validated (the lease is then released for the next pass).
func (r *Reconciler) Collect(ctx context.Context, rel *schema.Release) (*schema.Release, error) {
	if rel.State != schema.ReleaseCollecting {
		return rel, nil
	}
	tbl := r.Admin.releases()
	held, gen, err := r.lease(ctx, rel)
	if err != nil {
		return rel, err
	}
	c, err := releaseContent(held)
	if err != nil {
		return nil, err
	}
	based, err := r.basedOn(ctx, held)
	if err != nil {
		return nil, err
	}
	ev, err := r.Admin.checkContent(ctx, r.Holder, c, based, r.Probe)
	if err != nil {
		return nil, err
	}
	ev.Collector, ev.Generation = r.Holder, gen
	eb, _ := json.Marshal(ev)
	patch := map[string]any{"evidence": truncate(string(eb), schema.SizeReleaseText), "evidenceAt": ev.At,
		"leaseHolder": nil, "leaseUntil": nil}
	switch {
	case ev.Passed:
		patch["state"] = schema.ReleaseReady
	case ev.Waiting == "":
		patch["state"] = schema.ReleaseFailed
	}
	got, err := tbl.UpdateRevision(ctx, held.ID, held.Revision, patch)
	if errors.Is(err, schema.ErrStale) {
		return held, ErrLeaseHeld // fenced: the lease was taken over
	}
	if err != nil {
		return nil, err
	}
	if st, ok := patch["state"].(string); ok {
		_ = r.Admin.audit(ctx, "release/"+itoa(got.Seq)+"/evidence/"+itoa(gen), lastChange{Actor: r.Holder, Action: "release.evidence", From: got.Seq, To: got.Seq, At: ev.At, Detail: st})
	}
	return got, nil
}

// lease takes rel's lease when it is free, expired or already r's. A lease write that
// lost to another (or to a dead writer's claim, rolled forward) is read again once.
func (r *Reconciler) lease(ctx context.Context, rel *schema.Release) (*schema.Release, int64, error) {
	ttl := r.LeaseTTL
	if ttl <= 0 {
		ttl = 2 * time.Minute
	}
	tbl := r.Admin.releases()
	for try := 0; ; try++ {
		now := r.now()
		if rel.State != schema.ReleaseCollecting {
			return nil, 0, ErrLeaseHeld // finished by another
		}
		if rel.LeaseUntil != nil && deref(rel.LeaseHolder) != r.Holder {
			if until, err := time.Parse(time.RFC3339Nano, *rel.LeaseUntil); err == nil && until.After(now) {
				return nil, 0, ErrLeaseHeld
			}
		}
		gen := int64(1)
		if rel.LeaseGeneration != nil {
			gen = *rel.LeaseGeneration + 1
		}
		held, err := tbl.UpdateRevision(ctx, rel.ID, rel.Revision, map[string]any{
			"leaseHolder": r.Holder, "leaseUntil": now.Add(ttl).Format(time.RFC3339Nano), "leaseGeneration": gen})
		if err == nil {
			return held, gen, nil
		}
		if !errors.Is(err, schema.ErrStale) || try == 1 {
			if errors.Is(err, schema.ErrStale) {
				err = ErrLeaseHeld
			}
			return nil, 0, err
		}
		if rel, err = tbl.Get(ctx, rel.ID); err != nil {
			return nil, 0, err
		}
	}
}

// basedOn is the content rel was planned on: the release it is based on, or for the
// first candidate of an installation the live settings (none: empty). The bootstrap's
// release, live before its evidence, was planned on nothing: every route it names serves
// something new, so each is qualified where the gate asks (runconfig.Hold serves its
// roles only as their routes pass).
func (r *Reconciler) basedOn(ctx context.Context, rel *schema.Release) (runconfig.Content, error) {
	if rel.BasedOn > 0 {
		b, err := r.Admin.releases().Get(ctx, ReleaseID(rel.BasedOn))
		if err == nil {
			return releaseContent(b)
		}
		if !errors.Is(err, schema.ErrNotFound) {
			return runconfig.Content{}, err
		}
	}
	s, err := schema.For[schema.Settings](r.Admin.Store, schema.CollSettings).Get(ctx, runconfig.SystemSettingsID)
	if errors.Is(err, schema.ErrNotFound) {
		return runconfig.Content{}, nil
	}
	if err != nil {
		return runconfig.Content{}, err
	}
	if deref(s.Release) == rel.ID {
		return runconfig.Content{}, nil
	}
	return runconfig.ContentOf(s)
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }
