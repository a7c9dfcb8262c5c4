package settings

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/fault"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// Errors a caller classifies (each wrapped in a *fault.Error with a stable code).
var (
	// ErrSecondApprover: with two or more admins, the author alone cannot promote.
	ErrSecondApprover = errors.New("a second admin must approve")
	// ErrNoEvidence: the candidate's evidence has not passed (yet).
	ErrNoEvidence = errors.New("no passing evidence")
)

// ReleaseID is the document id of the candidate at head revision seq: $id uniqueness
// makes exactly one candidate per head revision on every engine.
func ReleaseID(seq int64) string { return runconfig.RevisionDocID("release", seq) }

// Approval is one admin's approval of a candidate.
type Approval struct {
	By string `json:"by"`
	At string `json:"at"`
}

func (a *Admin) releases() schema.Table[schema.Release] {
	return schema.For[schema.Release](a.Store, schema.CollReleases)
}

// Head is the desired-state head: the newest candidate, or nil before the first one.
func (a *Admin) Head(ctx context.Context) (*schema.Release, error) {
	p, err := a.releases().List(ctx, schema.ListQuery{Order: []string{query.OrderDesc("seq")}, Limit: 1})
	if err != nil || len(p.Items) == 0 {
		return nil, err
	}
	return &p.Items[0], nil
}

// HeadRevision is the revision a change is planned on (SelectionInput.ExpectedRevision).
func (a *Admin) HeadRevision(ctx context.Context) (int64, error) {
	n, _, err := a.headContent(ctx)
	return n, err
}

// headContent is the head's revision and content: the newest candidate's, or the live
// settings' (an installation from before releases: its settings revision is the head).
func (a *Admin) headContent(ctx context.Context) (int64, runconfig.Content, error) {
	h, err := a.Head(ctx)
	if err != nil {
		return 0, runconfig.Content{}, err
	}
	if h != nil {
		c, err := releaseContent(h)
		return h.Seq, c, err
	}
	s, _, _, err := a.currentSettings(ctx)
	if err != nil {
		return 0, runconfig.Content{}, err
	}
	c, err := runconfig.ContentOf(s)
	return s.Revision, c, err
}

func releaseContent(r *schema.Release) (runconfig.Content, error) {
	var c runconfig.Content
	if err := json.Unmarshal([]byte(r.Content), &c); err != nil {
		return c, fmt.Errorf("release %d: content: %w", r.Seq, err)
	}
	return c, nil
}

// Release reads candidate seq (fault.NotFound when there is none).
func (a *Admin) Release(ctx context.Context, seq int64) (*schema.Release, error) {
	r, err := a.releases().Get(ctx, ReleaseID(seq))
	if errors.Is(err, schema.ErrNotFound) {
		return nil, fault.Missing("resource", err) // exactly what a member gets
	}
	return r, err
}

// Releases lists the candidates and releases, newest first.
func (a *Admin) Releases(ctx context.Context, limit int) ([]schema.Release, error) {
	p, err := a.releases().List(ctx, schema.ListQuery{Order: []string{query.OrderDesc("seq")}, Limit: limit})
	if err != nil {
		return nil, err
	}
	return p.Items, nil
}

// propose writes candidate p.NextRevision of content c: the candidate, its plan, its
// operation state (collecting) and its outbox entry for the reconciler (the state itself:
// the reconciler takes every collecting candidate) are one document, so one create is
// the commit point; the audit entry follows under a deterministic id, and Repair writes
// it if a crash lost it.
func (a *Admin) propose(ctx context.Context, actor string, p ChangePreview, c runconfig.Content) (*schema.Release, error) {
	cb, _ := json.Marshal(c)
	pb, _ := json.Marshal(p)
	at := now()
	rel, err := a.releases().Create(ctx, ReleaseID(p.NextRevision), "", &schema.Release{Seq: p.NextRevision, Revision: 1, BasedOn: p.BasedOn,
		State: schema.ReleaseCollecting, Fingerprint: c.Fingerprint(), Content: string(cb), Plan: schema.Ptr(string(pb)),
		CreatedBy: actor, CreatedAt: at})
	if errors.Is(err, schema.ErrConflict) {
		if h, _ := a.Head(ctx); h != nil {
			return nil, stale(h.Seq)
		}
		return nil, stale(p.NextRevision)
	}
	if err != nil {
		return nil, err
	}
	return rel, a.auditRelease(ctx, rel)
}

func (a *Admin) auditRelease(ctx context.Context, r *schema.Release) error {
	detail := ""
	if r.Plan != nil {
		var p ChangePreview
		if json.Unmarshal([]byte(*r.Plan), &p) == nil {
			b, _ := json.Marshal(map[string]any{"fingerprint": r.Fingerprint, "changes": p.Changes})
			detail = string(b)
		}
	}
	return a.audit(ctx, fmt.Sprintf("release/%d", r.Seq), lastChange{Actor: r.CreatedBy, Action: "release.propose", From: r.BasedOn, To: r.Seq, At: r.CreatedAt, Detail: detail})
}

// Repair completes what a crash left unfinished: the audit entry of the head candidate,
// the audit entry of the live pointer's revision, and the promotion mark of the live
// release. Every step is idempotent (deterministic ids, revision-guarded patches).
func (a *Admin) Repair(ctx context.Context) error {
	h, err := a.Head(ctx)
	if err != nil {
		return err
	}
	if h != nil {
		if err := a.auditRelease(ctx, h); err != nil {
			return err
		}
	}
	if err := a.RepairAudit(ctx); err != nil {
		return err
	}
	all, err := schema.For[schema.Settings](a.Store, schema.CollSettings).All(ctx, schema.ListQuery{})
	if err != nil {
		return err
	}
	for i := range all {
		if err := a.repairPointer(ctx, &all[i]); err != nil {
			return err
		}
	}
	return nil
}

// repairPointer completes a live pointer's move (the system document or an
// environment's): its audit entry (an environment's; RepairAudit does the system's) and
// the promotion mark of the release it names.
func (a *Admin) repairPointer(ctx context.Context, s *schema.Settings) error {
	if s.ID != runconfig.SystemSettingsID && !strings.HasPrefix(s.ID, "env-") {
		return nil
	}
	var lc lastChange
	if s.LastChange != nil {
		_ = json.Unmarshal([]byte(*s.LastChange), &lc)
	}
	if s.ID != runconfig.SystemSettingsID && lc.To == s.Revision {
		if err := a.audit(ctx, "settings/"+s.ID, lc); err != nil {
			return err
		}
	}
	if s.Release == nil {
		return nil // an environment following production's release
	}
	r, err := a.releases().Get(ctx, *s.Release)
	if err != nil || r.PromotedAt != nil {
		return err
	}
	_, err = a.releases().UpdateRevision(ctx, r.ID, r.Revision, map[string]any{"promotedAt": lc.At, "promotedBy": lc.Actor})
	if errors.Is(err, schema.ErrStale) {
		return nil // another writer got there
	}
	return err
}

// Evidence is what the reconciler verified about a candidate against the providers.
type Evidence struct {
	Passed    bool              `json:"passed"`
	Waiting   string            `json:"waiting,omitempty"` // why it is not complete yet
	Problems  []string          `json:"problems"`
	Harnesses []HarnessEvidence `json:"harnesses"`
	Routes    []RouteEvidence   `json:"routes"`
	Probes    []ProbeEvidence   `json:"probes"`
	// ProbeSkipped says why no probe ran (no prober is wired in this deployment).
	ProbeSkipped string `json:"probeSkipped,omitempty"`
	Collector    string `json:"collector"`
	Generation   int64  `json:"generation"` // the lease generation it was collected under
	At           string `json:"at"`
}

// HarnessEvidence is a harness revision's validation and the provider versions it saw.
type HarnessEvidence struct {
	ID           string `json:"id"`
	Revision     int64  `json:"revision"`
	Kind         string `json:"kind"`
	Verified     bool   `json:"verified"`
	VerifiedAt   string `json:"verifiedAt,omitempty"`
	Version      string `json:"version,omitempty"`
	Commit       string `json:"commit,omitempty"`
	Capabilities string `json:"capabilities,omitempty"` // sha256 of the capabilities it reported
	CheckFailure string `json:"checkFailure,omitempty"`
}

// RouteEvidence is a route revision's model and GPU qualification.
type RouteEvidence struct {
	ID            string `json:"id"`
	Revision      int64  `json:"revision"`
	Device        string `json:"device"`
	Model         string `json:"model"`
	ContextBudget int64  `json:"contextBudget"`
	Qualification string `json:"qualification"` // "passed: …", "not needed", or why not
}

// ProbeEvidence is one probe run through a role's harness and route.
type ProbeEvidence struct {
	Role   string `json:"role"`
	OK     bool   `json:"ok"`
	Detail string `json:"detail"`
}

// ProbeRun asks for a short probe run through a role's harness revision and route
// revision (on the gateway) for the release whose content fingerprint is fp, and says
// where it stands: not done yet (the evidence waits: the next pass looks again), or its
// outcome. It is called on every pass until it is done, so it must be idempotent.
type ProbeRun func(ctx context.Context, fp, role string, h *schema.HarnessProfile, r *schema.ModelRoute) (ProbeOutcome, error)

// ProbeOutcome is where a probe run stands.
type ProbeOutcome struct {
	Done   bool
	OK     bool
	Detail string // what answered (model, tokens, latency), or why it failed or is waiting
}

// checkContent verifies content against the providers' recorded state: each harness
// revision validated (a Hermes one is validated by the agent: an unverified one gets a
// validation request and the evidence waits), each route enabled and, where its model,
// device or budget differs from the based-on content's, qualified (RouteGate); then a
// probe run per role.
func (a *Admin) checkContent(ctx context.Context, actor string, c, based runconfig.Content, probe ProbeRun) (Evidence, error) {
	ev := Evidence{Problems: []string{}, Harnesses: []HarnessEvidence{}, Routes: []RouteEvidence{}, Probes: []ProbeEvidence{}}
	roles := make([]string, 0, len(c.Roles))
	for r := range c.Roles {
		roles = append(roles, r)
	}
	sort.Strings(roles)
	seenH, seenR := map[string]bool{}, map[string]bool{}
	for _, role := range roles {
		b := c.Roles[role]
		h, err := runconfig.HarnessRevision(ctx, a.Store, b.Harness, b.HarnessRevision)
		if errors.Is(err, schema.ErrNotFound) {
			ev.Problems = append(ev.Problems, fmt.Sprintf("role %s: harness %s revision %d does not exist", role, b.Harness, b.HarnessRevision))
			continue
		}
		if err != nil {
			return ev, err
		}
		r, err := runconfig.RouteRevision(ctx, a.Store, b.Route, b.RouteRevision)
		if errors.Is(err, schema.ErrNotFound) {
			ev.Problems = append(ev.Problems, fmt.Sprintf("role %s: route %s revision %d does not exist", role, b.Route, b.RouteRevision))
			continue
		}
		if err != nil {
			return ev, err
		}
		hk := runconfig.RevisionDocID(h.ProfileID, h.Revision)
		if !seenH[hk] {
			seenH[hk] = true
			he := HarnessEvidence{ID: h.ProfileID, Revision: h.Revision, Kind: h.Kind, Verified: h.Verified || h.Kind == "direct" && h.VerifiedAt != nil,
				VerifiedAt: deref(h.VerifiedAt), Version: deref(h.HermesVersion), Commit: deref(h.HermesCommit), CheckFailure: deref(h.CheckFailure)}
			if h.Capabilities != nil {
				sum := sha256.Sum256([]byte(*h.Capabilities))
				he.Capabilities = hex.EncodeToString(sum[:8])
			}
			ev.Harnesses = append(ev.Harnesses, he)
			switch {
			case h.CheckFailedAt != nil:
				ev.Problems = append(ev.Problems, fmt.Sprintf("harness %s revision %d: its latest check failed (%s)", h.ProfileID, h.Revision, deref(h.CheckFailure)))
			case !h.Verified && h.ValidationRequestedAt != nil:
				ev.Waiting = fmt.Sprintf("harness %s revision %d is being validated", h.ProfileID, h.Revision)
			case !h.Verified && h.Kind == "hermes":
				if _, err := a.requestValidation(ctx, actor, h); err != nil {
					return ev, err
				}
				ev.Waiting = fmt.Sprintf("harness %s revision %d is being validated", h.ProfileID, h.Revision)
			case !h.Verified:
				ev.Problems = append(ev.Problems, fmt.Sprintf("harness %s revision %d is not verified", h.ProfileID, h.Revision))
			}
		}
		rk := runconfig.RevisionDocID(r.RouteID, r.Revision)
		if !seenR[rk] {
			seenR[rk] = true
			re := RouteEvidence{ID: r.RouteID, Revision: r.Revision, Device: r.Device, Model: r.BackendModel, ContextBudget: r.ContextBudget, Qualification: "not needed: already live for a role"}
			if a.RouteGate == nil {
				re.Qualification = "not checked: no qualification gate here"
			}
			if !r.Enabled {
				ev.Problems = append(ev.Problems, fmt.Sprintf("route %s revision %d is disabled", r.RouteID, r.Revision))
			}
			if a.RouteGate != nil && routeServesNew(based, r) {
				if err := a.RouteGate(ctx, r); errors.Is(err, runconfig.ErrUnqualified) {
					re.Qualification = err.Error()
					ev.Problems = append(ev.Problems, err.Error())
				} else if err != nil {
					return ev, err
				} else if q, _ := runconfig.RouteQualification(r); q != nil {
					re.Qualification = "passed: " + q.Summary()
				} else {
					re.Qualification = "not needed: no agent manages " + r.Device
				}
			}
			ev.Routes = append(ev.Routes, re)
		}
		if probe == nil {
			continue
		}
		if h.Kind == "hermes" && !h.Verified {
			continue // probed once it is validated
		}
		out, err := probe(ctx, c.Fingerprint(), role, h, r)
		if err != nil {
			return ev, fmt.Errorf("role %s: probe: %w", role, err)
		}
		if !out.Done {
			if ev.Waiting == "" {
				ev.Waiting = fmt.Sprintf("role %s: %s", role, out.Detail)
			}
			continue
		}
		pe := ProbeEvidence{Role: role, OK: out.OK, Detail: truncate(out.Detail, 256)}
		if !out.OK {
			ev.Problems = append(ev.Problems, fmt.Sprintf("role %s: the probe run failed: %s", role, pe.Detail))
		}
		ev.Probes = append(ev.Probes, pe)
	}
	if probe == nil {
		ev.ProbeSkipped = "this deployment has no prober"
	}
	ev.Passed = len(ev.Problems) == 0 && ev.Waiting == ""
	ev.At = now()
	return ev, nil
}

// routeServesNew: r's device, model or budget is not what any role of based served with
// that route revision (a route revision already live for a role needs no new
// qualification).
func routeServesNew(based runconfig.Content, r *schema.ModelRoute) bool {
	for _, b := range based.Roles {
		if b.Route == r.RouteID && b.RouteRevision == r.Revision {
			return false
		}
	}
	return true
}

// approvals decodes a candidate's approvals.
func approvals(r *schema.Release) []Approval {
	out := []Approval{}
	if r.Approvals != nil {
		_ = json.Unmarshal([]byte(*r.Approvals), &out)
	}
	return out
}

// Approve records actor's approval of candidate seq (idempotent). The candidate's
// evidence must have passed.
func (a *Admin) Approve(ctx context.Context, actor string, seq int64) (*schema.Release, error) {
	var got *schema.Release
	for try := 0; ; try++ {
		r, err := a.Release(ctx, seq)
		if err != nil {
			return nil, err
		}
		if r.State != schema.ReleaseReady {
			return nil, fault.E(fault.Conflict, "evidence_missing", fmt.Sprintf("release %d has no passing evidence (it is %s)", seq, r.State), ErrNoEvidence)
		}
		ap := approvals(r)
		if slices.ContainsFunc(ap, func(x Approval) bool { return x.By == actor }) {
			return r, nil
		}
		ap = append(ap, Approval{By: actor, At: now()})
		b, _ := json.Marshal(ap)
		got, err = a.releases().UpdateRevision(ctx, r.ID, r.Revision, map[string]any{"approvals": string(b)})
		if errors.Is(err, schema.ErrStale) && try == 0 {
			continue // another approval (or a dead writer's, rolled forward) landed: read again
		}
		if errors.Is(err, schema.ErrStale) {
			return nil, fault.E(fault.Conflict, "release_changed", fmt.Sprintf("release %d changed meanwhile; try again", seq), err)
		}
		if err != nil {
			return nil, err
		}
		break
	}
	_ = a.audit(ctx, fmt.Sprintf("release/%d/approve/%s", seq, actor), lastChange{Actor: actor, Action: "release.approve", From: seq, To: seq, At: now()})
	return got, nil
}

// Promote makes candidate seq live: its evidence must have passed, and with two or more
// admins (a.Admins) and the rule on (!a.SoloPromotion) an admin other than its author
// must approve it (the promoting admin's approval counts). The live pointer (the system
// settings document) moves in one revision-guarded write: that is the commit point; its
// audit entry and the release's promotion mark follow and Repair completes them.
func (a *Admin) Promote(ctx context.Context, actor string, seq int64) (*schema.Release, error) {
	return a.PromoteIn(ctx, actor, seq, "")
}

// PromoteIn is Promote for one runtime environment (env; "" and "production" are the
// system document): the same evidence, two-admin rule and recheck, then that
// environment's live pointer (its settings document, runconfig.EnvSettingsID) moves.
// Other environments keep their release.
func (a *Admin) PromoteIn(ctx context.Context, actor string, seq int64, env string) (*schema.Release, error) {
	env, err := checkEnv(env)
	if err != nil {
		return nil, err
	}
	r, err := a.Release(ctx, seq)
	if err != nil {
		return nil, err
	}
	if r.State != schema.ReleaseReady {
		return nil, fault.E(fault.Conflict, "evidence_missing", fmt.Sprintf("release %d has no passing evidence (it is %s): it cannot go live", seq, r.State), ErrNoEvidence)
	}
	if err := a.secondApprover(ctx, r, actor); err != nil {
		return nil, err
	}
	if err := a.recheck(ctx, actor, r, env); err != nil {
		return nil, err
	}
	if r, err = a.Approve(ctx, actor, seq); err != nil {
		return nil, err
	}
	return a.moveLive(ctx, actor, r, "release.promote", env)
}

func (a *Admin) secondApprover(ctx context.Context, r *schema.Release, actor string) error {
	if a.SoloPromotion || a.Admins == nil {
		return nil
	}
	n, err := a.Admins(ctx)
	if err != nil {
		return err
	}
	if n < 2 {
		return nil
	}
	if actor != r.CreatedBy || slices.ContainsFunc(approvals(r), func(x Approval) bool { return x.By != r.CreatedBy }) {
		return nil
	}
	return fault.E(fault.Conflict, "second_approver_required",
		fmt.Sprintf("release %d was proposed by you: another admin must approve it first (there are %d admins)", r.Seq, n), ErrSecondApprover)
}

// Rollback makes an earlier release live again: one that was live before, whose
// evidence is checked again now (a harness that fails its checks since, or a route that
// lost its qualification, refuses the rollback). It was reviewed when it was first
// promoted, so it needs no second approver.
func (a *Admin) Rollback(ctx context.Context, actor string, seq int64) (*schema.Release, error) {
	return a.RollbackIn(ctx, actor, seq, "")
}

// RollbackIn is Rollback for one runtime environment (env; "" is production): a release
// that was live (in any environment: it passed the review then) goes live there again.
func (a *Admin) RollbackIn(ctx context.Context, actor string, seq int64, env string) (*schema.Release, error) {
	env, err := checkEnv(env)
	if err != nil {
		return nil, err
	}
	r, err := a.Release(ctx, seq)
	if err != nil {
		return nil, err
	}
	if r.PromotedAt == nil {
		return nil, fault.E(fault.Conflict, "never_live", fmt.Sprintf("release %d was never live: promote it instead", seq), ErrNoEvidence)
	}
	if err := a.recheck(ctx, actor, r, env); err != nil {
		return nil, err
	}
	return a.moveLive(ctx, actor, r, "release.rollback", env)
}

// recheck checks r's content again against the providers' state now (a harness whose
// check failed since, a route disabled or no longer qualified): what changed since its
// evidence was collected blocks it going live.
func (a *Admin) recheck(ctx context.Context, actor string, r *schema.Release, env string) error {
	c, err := releaseContent(r)
	if err != nil {
		return err
	}
	s, _, err := runconfig.LiveSettings(ctx, a.Store, env)
	if errors.Is(err, runconfig.ErrNotConfigured) {
		_, _, _, err = a.currentSettings(ctx) // its fault
	}
	if err != nil {
		return err
	}
	liveC, err := runconfig.ContentOf(s)
	if err != nil {
		return err
	}
	ev, err := a.checkContent(ctx, actor, c, liveC, nil)
	if err != nil {
		return err
	}
	if len(ev.Problems) > 0 || ev.Waiting != "" {
		why := ev.Waiting
		if len(ev.Problems) > 0 {
			why = ev.Problems[0]
		}
		return fault.E(fault.Conflict, "evidence_failed", fmt.Sprintf("release %d no longer passes its checks: %s", r.Seq, why), ErrNoEvidence)
	}
	return nil
}

// moveLive points environment env's live pointer at r: the system document for
// production (""), else env's own document, created by its first promotion.
func (a *Admin) moveLive(ctx context.Context, actor string, r *schema.Release, action, env string) (*schema.Release, error) {
	c, err := releaseContent(r)
	if err != nil {
		return nil, err
	}
	if _, _, _, err := a.currentSettings(ctx); err != nil {
		return nil, err // not bootstrapped
	}
	tbl := schema.For[schema.Settings](a.Store, schema.CollSettings)
	id := runconfig.EnvSettingsID(env)
	s, err := tbl.Get(ctx, id)
	if err != nil && !errors.Is(err, schema.ErrNotFound) {
		return nil, err
	}
	from, rev := "", int64(0)
	if s != nil {
		from, rev = deref(s.Release), s.Revision
	}
	det := map[string]any{"release": r.Seq, "fingerprint": r.Fingerprint, "from": from}
	if env != "" {
		det["environment"] = env
	}
	d, _ := json.Marshal(det)
	lc := lastChange{Actor: actor, Action: action, From: rev, To: rev + 1, At: now(), Detail: string(d)}
	lcb, _ := json.Marshal(lc)
	patch := c.Patch()
	patch["release"], patch["lastChange"] = r.ID, truncate(string(lcb), 2048)
	if s == nil {
		ns := &schema.Settings{OwnerID: id, Revision: 1, Roles: schema.Ptr(patch["roles"].(string)), ToolCeiling: schema.Ptr(patch["toolCeiling"].(string)),
			Release: schema.Ptr(r.ID), LastChange: schema.Ptr(patch["lastChange"].(string))}
		if c.DefaultHarness != "" {
			ns.DefaultHarness, ns.DefaultHarnessRevision = schema.Ptr(c.DefaultHarness), schema.Ptr(c.DefaultHarnessRevision)
		}
		_, err = tbl.Create(ctx, id, "", ns) // server only, like the system document
		if errors.Is(err, schema.ErrConflict) {
			err = schema.ErrStale
		}
	} else {
		_, err = tbl.UpdateRevision(ctx, id, rev, patch)
	}
	if errors.Is(err, schema.ErrStale) {
		// A claim of the same move by a writer that died was rolled forward: finish it.
		if s, gerr := tbl.Get(ctx, id); gerr == nil && deref(s.Release) == r.ID {
			if err := a.Repair(ctx); err != nil {
				return nil, err
			}
			return a.releases().Get(ctx, r.ID)
		}
		return nil, fault.E(fault.Conflict, "live_changed", "the live configuration changed meanwhile; look again", err)
	}
	if err != nil {
		return nil, err
	}
	if err := a.audit(ctx, "settings/"+id, lc); err != nil {
		return nil, err
	}
	if r.PromotedAt == nil {
		got, err := a.releases().UpdateRevision(ctx, r.ID, r.Revision, map[string]any{"promotedAt": lc.At, "promotedBy": actor})
		if err != nil && !errors.Is(err, schema.ErrStale) {
			return nil, err
		}
		if got != nil {
			r = got
		}
	}
	if a.Plans != nil {
		_ = a.Plans.MovePointerIn(ctx, env, lc.To, r.Fingerprint)
	}
	return r, nil
}

// FollowProduction sends environment env back to running production's live release
// (what an environment never promoted separately does): its settings document stays, with
// its release cleared, in one revision-guarded write (the commit point), then the audit
// entry and the plan pointer ("=", at the new revision: forward only, so a later
// promotion to env still wins). An environment already following answers nil.
func (a *Admin) FollowProduction(ctx context.Context, actor, env string) error {
	env, err := checkEnv(env)
	if err != nil {
		return err
	}
	if env == "" {
		return fault.E(fault.Invalid, "invalid_environment", "production runs its own live release; name another environment", ErrInvalidEnvironment)
	}
	tbl := schema.For[schema.Settings](a.Store, schema.CollSettings)
	id := runconfig.EnvSettingsID(env)
	s, err := tbl.Get(ctx, id)
	if errors.Is(err, schema.ErrNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	if s.Release == nil {
		return nil
	}
	d, _ := json.Marshal(map[string]any{"environment": env, "from": *s.Release, "follows": "production"})
	lc := lastChange{Actor: actor, Action: "release.follow", From: s.Revision, To: s.Revision + 1, At: now(), Detail: string(d)}
	lcb, _ := json.Marshal(lc)
	_, err = tbl.UpdateRevision(ctx, id, s.Revision, map[string]any{"release": nil, "lastChange": truncate(string(lcb), 2048)})
	if errors.Is(err, schema.ErrStale) {
		return fault.E(fault.Conflict, "live_changed", "the live configuration changed meanwhile; look again", err)
	}
	if err != nil {
		return err
	}
	if err := a.audit(ctx, "settings/"+id, lc); err != nil {
		return err
	}
	if a.Plans != nil {
		_ = a.Plans.FollowLive(ctx, env, lc.To)
	}
	return nil
}

// EnvReleases names the release each environment promoted separately runs (environment
// → release id); the others run production's.
func (a *Admin) EnvReleases(ctx context.Context) (map[string]string, error) {
	all, err := schema.For[schema.Settings](a.Store, schema.CollSettings).All(ctx, schema.ListQuery{})
	if err != nil {
		return nil, err
	}
	out := map[string]string{}
	for _, s := range all {
		if env, ok := strings.CutPrefix(s.ID, "env-"); ok && s.Release != nil {
			out[env] = *s.Release
		}
	}
	return out, nil
}

// ErrInvalidEnvironment: not production nor an environment's name.
var ErrInvalidEnvironment = errors.New("invalid environment")

// checkEnv is env's stored name ("" for production), as runtime keys name it.
func checkEnv(env string) (string, error) {
	if env == "" || env == "production" {
		return "", nil
	}
	if !envRe.MatchString(env) {
		return "", fault.E(fault.Invalid, "invalid_environment", "environment must be production or a name of a lower-case letter and up to 11 lower-case letters or digits", ErrInvalidEnvironment)
	}
	return env, nil
}

// envRe is runtimeapi's environment name (a key's environment).
var envRe = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)
