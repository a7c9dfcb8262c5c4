package settings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"sort"
	"time"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/fault"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// HarnessInput registers a profile or a new revision of one.
type HarnessInput struct {
	ProfileID   string `json:"profileId"`
	Kind        string `json:"kind"`
	BaseURL     string `json:"baseUrl"`
	ProfileName string `json:"profileName"`
	KeyRef      string `json:"keyRef"`
}

func (in HarnessInput) validate() error {
	if !idRe(in.ProfileID) {
		return bad("invalid_id", "profileId must be 1-30 of [a-zA-Z0-9_-]")
	}
	if in.Kind != "hermes" && in.Kind != "direct" {
		return bad("invalid_kind", "kind must be hermes or direct")
	}
	u, err := url.Parse(in.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.User != nil || u.RawQuery != "" {
		return bad("invalid_url", "baseUrl must be an http(s) URL without credentials or a query")
	}
	if runconfig.LooksLikeSecret(in.KeyRef) {
		return bad("key_not_reference", "keyRef must name where the key is kept (env:NAME or file:/path), never the key itself")
	}
	if len(in.ProfileName) > 128 {
		return bad("invalid_name", "profileName is at most 128 characters")
	}
	return nil
}

// ValidID reports whether s is a valid harness profile or route id (1-30 of
// [a-zA-Z0-9_-]); the API checks a path id with it before using it.
func ValidID(s string) bool { return idRe(s) }

func idRe(s string) bool {
	if s == "" || len(s) > 30 {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-') {
			return false
		}
	}
	return true
}

func latestHarness(ctx context.Context, st *schema.Store, id string) (*schema.HarnessProfile, error) {
	p, err := schema.For[schema.HarnessProfile](st, schema.CollHarnessProfiles).List(ctx, schema.ListQuery{
		Filters: []string{query.Equal("profileId", id)}, Order: []string{query.OrderDesc("revision")}, Limit: 1})
	if err != nil || len(p.Items) == 0 {
		return nil, err
	}
	return &p.Items[0], nil
}

// PlanHarness previews registering in.
func (a *Admin) PlanHarness(ctx context.Context, in HarnessInput) (ChangePreview, error) {
	if err := in.validate(); err != nil {
		return ChangePreview{}, err
	}
	ids, err := harnessIDs(ctx, a.Store)
	if err != nil {
		return ChangePreview{}, err
	}
	if twin := caseTwin(in.ProfileID, ids); twin != "" {
		return ChangePreview{}, idCaseConflict("harness profile", in.ProfileID, twin)
	}
	cur, err := latestHarness(ctx, a.Store, in.ProfileID)
	if err != nil {
		return ChangePreview{}, err
	}
	p := ChangePreview{Kind: "harness", Target: "harness/" + in.ProfileID, NextRevision: 1, Changes: []Change{}, AffectedRoles: []string{}, AffectedRoutes: []string{}, Warnings: []string{}}
	old := HarnessInput{}
	if cur != nil {
		p.BasedOn, p.NextRevision = cur.Revision, cur.Revision+1
		old = HarnessInput{ProfileID: cur.ProfileID, Kind: cur.Kind, BaseURL: cur.BaseURL, ProfileName: deref(cur.ProfileName), KeyRef: deref(cur.KeyRef)}
	}
	for _, c := range []Change{{"kind", old.Kind, in.Kind}, {"baseUrl", old.BaseURL, in.BaseURL}, {"profileName", old.ProfileName, in.ProfileName}, {"keyRef", old.KeyRef, in.KeyRef}} {
		if c.From != c.To {
			p.Changes = append(p.Changes, c)
		}
	}
	if cur != nil && len(p.Changes) == 0 {
		p.Warnings = append(p.Warnings, "nothing changes: committing makes an identical revision")
	}
	if in.Kind == "hermes" {
		p.Warnings = append(p.Warnings, "a new Hermes revision is unverified until it is validated; roles keep their pinned revisions until the selection changes")
	}
	if _, roles, _, err := a.currentSettings(ctx); err == nil {
		for r, b := range roles {
			if b.Harness == in.ProfileID {
				p.AffectedRoles = append(p.AffectedRoles, r)
			}
		}
		sort.Strings(p.AffectedRoles)
	}
	p.PinnedRuns, err = a.pinned(ctx, func(b *schema.RunBinding) bool { return b.HarnessProfileID == in.ProfileID })
	return p, err
}

// CommitHarness writes the next revision if the profile is still at expected.
func (a *Admin) CommitHarness(ctx context.Context, actor string, in HarnessInput, expected int64) (ChangePreview, *schema.HarnessProfile, error) {
	p, err := a.PlanHarness(ctx, in)
	if err != nil {
		return p, nil, err
	}
	if p.BasedOn != expected {
		return p, nil, stale(p.BasedOn)
	}
	lc, _ := json.Marshal(p.Changes)
	rec := &schema.HarnessProfile{ProfileID: in.ProfileID, Revision: p.NextRevision, Kind: in.Kind, BaseURL: in.BaseURL,
		ProfileName: schema.Ptr(in.ProfileName), KeyRef: schema.Ptr(in.KeyRef), CreatedBy: schema.Ptr(actor)}
	got, err := schema.For[schema.HarnessProfile](a.Store, schema.CollHarnessProfiles).Create(ctx, runconfig.RevisionDocID(in.ProfileID, p.NextRevision), "", rec)
	if errors.Is(err, schema.ErrConflict) {
		cur, _ := latestHarness(ctx, a.Store, in.ProfileID)
		if cur != nil {
			return p, nil, stale(cur.Revision)
		}
		return p, nil, stale(p.NextRevision)
	}
	if err != nil {
		return p, nil, err
	}
	err = a.audit(ctx, p.Target, lastChange{Actor: actor, Action: "harness.register", From: p.BasedOn, To: p.NextRevision, At: now(), Detail: string(lc)})
	return p, got, err
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// Validate validates a harness revision. A direct profile is probed here and the result
// stored at once. A Hermes profile is validated where its key is: the function cannot
// read a file: key reference, and an env: one names a variable of the agent's host, so
// Validate only records the request (validationRequestedAt, an audit entry) and returns
// Probe{Pending: true}; the agent (agent/validator) probes it with the key and stores the
// result through CompleteValidation, which clears the request.
func (a *Admin) Validate(ctx context.Context, actor, profileID string, rev int64) (*schema.HarnessProfile, Probe, error) {
	hp, err := runconfig.HarnessRevision(ctx, a.Store, profileID, rev)
	if errors.Is(err, schema.ErrNotFound) {
		return nil, Probe{}, fault.Missing("harness revision", err)
	}
	if err != nil {
		return nil, Probe{}, err
	}
	if hp.Kind == "hermes" {
		got, err := a.requestValidation(ctx, actor, hp)
		return got, Probe{Pending: true, Verified: got != nil && got.Verified}, err
	}
	pr, err := a.Probe(ctx, hp)
	if err != nil {
		pr = Probe{Verified: false, Reason: err.Error()}
	}
	return a.CompleteValidation(ctx, actor, hp, pr)
}

// requestValidation marks hp as waiting for the agent's validation. Its verified state
// stays as it is until the result arrives.
func (a *Admin) requestValidation(ctx context.Context, actor string, hp *schema.HarnessProfile) (*schema.HarnessProfile, error) {
	at := now()
	got, err := schema.For[schema.HarnessProfile](a.Store, schema.CollHarnessProfiles).Update(ctx, hp.ID, map[string]any{"validationRequestedAt": at})
	if err != nil {
		return nil, err
	}
	d, _ := json.Marshal(map[string]any{"requestedAt": at})
	_ = a.audit(ctx, fmt.Sprintf("harness/%s/validate-request/%d", hp.ProfileID, time.Now().UnixNano()),
		lastChange{Actor: actor, Action: "harness.validate.request", From: hp.Revision, To: hp.Revision, At: at, Detail: string(d)})
	return got, nil
}

// PendingValidations lists the harness revisions with a validation request (oldest
// request first).
func PendingValidations(ctx context.Context, st *schema.Store) ([]schema.HarnessProfile, error) {
	return schema.For[schema.HarnessProfile](st, schema.CollHarnessProfiles).All(ctx, schema.ListQuery{
		Filters: []string{query.IsNotNull("validationRequestedAt")}, Order: []string{query.OrderAsc("validationRequestedAt")}})
}

// CompleteValidation stores a probe's result as hp's verified state (a Hermes profile's
// toolsets must also fit the tool policy) and writes the audit entry. It clears hp's
// validation request unless a newer request arrived since hp was read, which then stays
// pending for the next round.
//
// A failing result never takes a verified revision's work down: the revision stays
// verified with its evidence as it was, the failure is recorded (checkFailedAt,
// checkFailure), which raises an alert while a role is bound to it (LiveCheckFailures) and
// refuses binding a role to it anew (PlanSelection); a passing result clears it.
func (a *Admin) CompleteValidation(ctx context.Context, actor string, hp *schema.HarnessProfile, pr Probe) (*schema.HarnessProfile, Probe, error) {
	if hp.Kind == "hermes" {
		pr = a.toolsetsVerdict(ctx, hp.ProfileID, pr) // its toolsets must fit the tool policy
	}
	pr.Pending = false
	coll := schema.For[schema.HarnessProfile](a.Store, schema.CollHarnessProfiles)
	cur, err := coll.Get(ctx, hp.ID)
	if err != nil {
		return nil, pr, err
	}
	patch := map[string]any{"verified": pr.Verified, "verifiedAt": now(), "hermesVersion": pr.Version,
		"capabilities": truncate(pr.Capabilities, schema.SizeJSONSmall), "checkFailedAt": nil, "checkFailure": nil}
	if pr.Capabilities == "" {
		patch["capabilities"] = nil
	}
	if hp.Kind == "hermes" {
		patch["hermesCommit"] = nil
		if pr.Commit != "" {
			patch["hermesCommit"] = truncate(pr.Commit, 1024)
		}
	}
	if !pr.Verified && cur.Verified {
		reason := pr.Reason
		if reason == "" {
			reason = "the check did not pass"
		}
		patch = map[string]any{"checkFailedAt": now(), "checkFailure": truncate(reason, 1024)}
	}
	if hp.ValidationRequestedAt != nil && (cur.ValidationRequestedAt == nil || *cur.ValidationRequestedAt == *hp.ValidationRequestedAt) {
		patch["validationRequestedAt"] = nil
	}
	got, err := coll.Update(ctx, hp.ID, patch)
	if err != nil {
		return nil, pr, err
	}
	d, _ := json.Marshal(map[string]any{"verified": pr.Verified, "version": pr.Version, "commit": pr.Commit, "reason": pr.Reason,
		"keptVerified": !pr.Verified && cur.Verified})
	_ = a.audit(ctx, fmt.Sprintf("harness/%s/validate/%d", hp.ProfileID, time.Now().UnixNano()), lastChange{Actor: actor, Action: "harness.validate", From: hp.Revision, To: hp.Revision, At: now(), Detail: string(d)})
	return got, pr, nil
}

// CheckFailure is a live harness revision whose latest validation failed.
type CheckFailure struct {
	Harness  string   `json:"harness"`
	Revision int64    `json:"revision"`
	Roles    []string `json:"roles"` // the roles bound to it, which keep serving
	FailedAt string   `json:"failedAt"`
	Reason   string   `json:"reason"`
}

// LiveCheckFailures lists the harness revisions the current selection binds a role to
// whose latest validation failed (sorted by harness, revision).
func LiveCheckFailures(ctx context.Context, st *schema.Store) ([]CheckFailure, error) {
	s, err := schema.For[schema.Settings](st, schema.CollSettings).Get(ctx, runconfig.SystemSettingsID)
	if errors.Is(err, schema.ErrNotFound) {
		return []CheckFailure{}, nil
	}
	if err != nil {
		return nil, err
	}
	roles := map[string]runconfig.RoleBinding{}
	if s.Roles != nil && *s.Roles != "" {
		if err := json.Unmarshal([]byte(*s.Roles), &roles); err != nil {
			return nil, fmt.Errorf("settings revision %d: roles: %w", s.Revision, err)
		}
	}
	type key struct {
		id  string
		rev int64
	}
	bound := map[key][]string{}
	for role, b := range roles {
		k := key{b.Harness, b.HarnessRevision}
		bound[k] = append(bound[k], role)
	}
	out := []CheckFailure{}
	for k, rs := range bound {
		h, err := runconfig.HarnessRevision(ctx, st, k.id, k.rev)
		if errors.Is(err, schema.ErrNotFound) {
			continue
		}
		if err != nil {
			return nil, err
		}
		if h.CheckFailedAt == nil {
			continue
		}
		sort.Strings(rs)
		out = append(out, CheckFailure{Harness: k.id, Revision: k.rev, Roles: rs, FailedAt: *h.CheckFailedAt, Reason: deref(h.CheckFailure)})
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Harness != out[j].Harness {
			return out[i].Harness < out[j].Harness
		}
		return out[i].Revision < out[j].Revision
	})
	return out, nil
}
