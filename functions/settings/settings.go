// Package settings is the admin side of configuration as desired state with immutable
// revisions (seed 000: typed mutation → semantic plan → atomic revision + audit).
//
// Harness profiles and model routes are never edited: a change is a new revision record,
// created under a unique (id, revision) index, so two admins committing against the same
// revision cannot both win. The system settings document (which revision each work role
// uses, the tool ceiling) is one revision-guarded document: a commit names the revision
// it was planned on, and a stale one is refused with the current revision.
//
// Every mutation is planned first (what changes, which roles and routes are affected, how
// many queued or running runs stay pinned to the old revisions); the commit re-plans
// against the expected revision and writes. Each revision record or settings document
// carries who/when/what (lastChange), and the audit record has a deterministic id, so a
// crash between the write and the audit is repaired on the next admin call: the old state
// stays intact or the new one is whole.
package settings

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/functions/httpapi"
	"privateassistant/schema"
	"privateassistant/schema/plan"
)

// Admin performs configuration changes.
type Admin struct {
	Store   *schema.Store
	Plans   *plan.Cache // the settings pointer moves on commit (may be nil in tests)
	Devices func(ctx context.Context) ([]string, error)
	Probe   func(ctx context.Context, p *schema.HarnessProfile) (Probe, error)
}

// Probe is the result of a harness capability check.
type Probe struct {
	Verified     bool
	Version      string
	Capabilities string // JSON, trimmed
	Reason       string // why it is not verified
}

// Change is one field that a mutation changes.
type Change struct {
	Field string `json:"field"`
	From  any    `json:"from"`
	To    any    `json:"to"`
}

// Plan is the semantic preview of a mutation.
type Plan struct {
	Kind           string   `json:"kind"` // harness, route, selection
	Target         string   `json:"target"`
	BasedOn        int64    `json:"basedOnRevision"`
	NextRevision   int64    `json:"nextRevision"`
	Changes        []Change `json:"changes"`
	AffectedRoles  []string `json:"affectedRoles"`
	AffectedRoutes []string `json:"affectedRoutes"`
	PinnedRuns     int      `json:"pinnedRuns"` // queued/running runs that keep their old revisions
	Warnings       []string `json:"warnings"`
}

func stale(current int64) error {
	return &httpapi.Error{Status: 409, Code: "stale_revision", Message: fmt.Sprintf("the configuration changed: it is now at revision %d; preview again", current),
		Extra: map[string]any{"currentRevision": current}}
}

func bad(code, format string, args ...any) error { return httpapi.BadRequest(code, format, args...) }

// AuditID is the deterministic id of the audit record of (target, revision).
func AuditID(target string, rev int64) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d", target, rev)))
	return "u" + hex.EncodeToString(h[:])[:32]
}

type lastChange struct {
	Actor  string `json:"actor"`
	Action string `json:"action"`
	From   int64  `json:"from"`
	To     int64  `json:"to"`
	At     string `json:"at"`
	Detail string `json:"detail"`
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

func (a *Admin) audit(ctx context.Context, target string, c lastChange) error {
	_, err := schema.For[schema.Audit](a.Store, schema.CollAudit).Create(ctx, AuditID(target, c.To), "", &schema.Audit{
		ActorID: c.Actor, Action: c.Action, Target: target, FromRevision: schema.Ptr(c.From), ToRevision: schema.Ptr(c.To),
		Detail: schema.Ptr(truncate(c.Detail, schema.SizeJSONSmall)), At: c.At})
	if errors.Is(err, schema.ErrConflict) {
		return nil
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

// --- pinned runs ----------------------------------------------------------------------

var live = []interface{}{schema.RunQueued, schema.RunWaitingForResource, schema.RunRunning, schema.RunWaitingForApproval, schema.RunCancelling}

// pinned counts live runs whose bindings match (profile or route id, any revision below next).
func (a *Admin) pinned(ctx context.Context, match func(b *schema.RunBinding) bool) (int, error) {
	runs, err := schema.For[schema.Run](a.Store, schema.CollRuns).All(ctx, schema.ListQuery{AllOwners: true,
		Filters: []string{query.Equal("status", live)}, Limit: 100})
	if err != nil {
		return 0, err
	}
	n := 0
	binds := schema.For[schema.RunBinding](a.Store, schema.CollRunBindings)
	for _, r := range runs {
		b, err := binds.Get(ctx, r.ID)
		if err == nil && match(b) {
			n++
		}
	}
	return n, nil
}

func (a *Admin) currentSettings(ctx context.Context) (*schema.Settings, map[string]plan.RoleBinding, []string, error) {
	s, err := schema.For[schema.Settings](a.Store, schema.CollSettings).Get(ctx, plan.SystemSettingsID)
	if errors.Is(err, schema.ErrNotFound) {
		return nil, nil, nil, httpapi.Unavailable("not_configured", "no settings yet: run `make bootstrap` first")
	}
	if err != nil {
		return nil, nil, nil, err
	}
	roles := map[string]plan.RoleBinding{}
	if s.Roles != nil {
		_ = json.Unmarshal([]byte(*s.Roles), &roles)
	}
	var ceiling []string
	if s.ToolCeiling != nil {
		_ = json.Unmarshal([]byte(*s.ToolCeiling), &ceiling)
	}
	return s, roles, ceiling, nil
}

// --- harness profiles ---------------------------------------------------------------------

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
	if plan.LooksLikeSecret(in.KeyRef) {
		return bad("key_not_reference", "keyRef must name where the key is kept (env:NAME or file:/path), never the key itself")
	}
	if len(in.ProfileName) > 128 {
		return bad("invalid_name", "profileName is at most 128 characters")
	}
	return nil
}

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
func (a *Admin) PlanHarness(ctx context.Context, in HarnessInput) (Plan, error) {
	if err := in.validate(); err != nil {
		return Plan{}, err
	}
	cur, err := latestHarness(ctx, a.Store, in.ProfileID)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{Kind: "harness", Target: "harness/" + in.ProfileID, NextRevision: 1, Changes: []Change{}, AffectedRoles: []string{}, AffectedRoutes: []string{}, Warnings: []string{}}
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
func (a *Admin) CommitHarness(ctx context.Context, actor string, in HarnessInput, expected int64) (Plan, *schema.HarnessProfile, error) {
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
	got, err := schema.For[schema.HarnessProfile](a.Store, schema.CollHarnessProfiles).Create(ctx, plan.RevisionDocID(in.ProfileID, p.NextRevision), "", rec)
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

// Validate probes a harness revision and stores the result as its verified state.
func (a *Admin) Validate(ctx context.Context, actor, profileID string, rev int64) (*schema.HarnessProfile, Probe, error) {
	hp, err := plan.HarnessRevision(ctx, a.Store, profileID, rev)
	if errors.Is(err, schema.ErrNotFound) {
		return nil, Probe{}, httpapi.NotFound("harness revision")
	}
	if err != nil {
		return nil, Probe{}, err
	}
	pr, err := a.Probe(ctx, hp)
	if err != nil {
		pr = Probe{Verified: false, Reason: err.Error()}
	}
	patch := map[string]any{"verified": pr.Verified, "verifiedAt": now(), "hermesVersion": pr.Version,
		"capabilities": truncate(pr.Capabilities, schema.SizeJSONSmall)}
	if pr.Capabilities == "" {
		patch["capabilities"] = nil
	}
	got, err := schema.For[schema.HarnessProfile](a.Store, schema.CollHarnessProfiles).Update(ctx, hp.ID, patch)
	if err != nil {
		return nil, pr, err
	}
	d, _ := json.Marshal(map[string]any{"verified": pr.Verified, "version": pr.Version, "reason": pr.Reason})
	_ = a.audit(ctx, fmt.Sprintf("harness/%s/validate/%d", profileID, time.Now().UnixNano()), lastChange{Actor: actor, Action: "harness.validate", From: rev, To: rev, At: now(), Detail: string(d)})
	return got, pr, nil
}

// --- model routes ---------------------------------------------------------------------------

// RouteInput registers a route or a new revision of one.
type RouteInput struct {
	RouteID       string `json:"routeId"`
	Alias         string `json:"alias"`
	Device        string `json:"device"`
	BackendModel  string `json:"backendModel"`
	ContextBudget int64  `json:"contextBudget"`
	MaxOutput     int64  `json:"maxOutput"`
	LocalOnly     *bool  `json:"localOnly"`
	Enabled       *bool  `json:"enabled"`
}

func latestRoute(ctx context.Context, st *schema.Store, id string) (*schema.ModelRoute, error) {
	p, err := schema.For[schema.ModelRoute](st, schema.CollModelRoutes).List(ctx, schema.ListQuery{
		Filters: []string{query.Equal("routeId", id)}, Order: []string{query.OrderDesc("revision")}, Limit: 1})
	if err != nil || len(p.Items) == 0 {
		return nil, err
	}
	return &p.Items[0], nil
}

// PlanRoute previews registering in.
func (a *Admin) PlanRoute(ctx context.Context, in RouteInput) (Plan, error) {
	switch {
	case !idRe(in.RouteID):
		return Plan{}, bad("invalid_id", "routeId must be 1-30 of [a-zA-Z0-9_-]")
	case !idRe(in.Alias):
		return Plan{}, bad("invalid_alias", "alias must be 1-30 of [a-zA-Z0-9_-]")
	case in.BackendModel == "" || len(in.BackendModel) > schema.SizeModelName:
		return Plan{}, bad("invalid_model", "backendModel is required")
	case in.ContextBudget < 1:
		return Plan{}, bad("invalid_budget", "contextBudget must be the measured context window (> 0)")
	case in.MaxOutput < 0:
		return Plan{}, bad("invalid_max_output", "maxOutput must not be negative")
	}
	devices, err := a.Devices(ctx)
	if err != nil {
		return Plan{}, err
	}
	if !slices.Contains(devices, in.Device) {
		return Plan{}, bad("unknown_device", "device %q is not a known device (known: %s)", in.Device, strings.Join(devices, ", "))
	}
	cur, err := latestRoute(ctx, a.Store, in.RouteID)
	if err != nil {
		return Plan{}, err
	}
	p := Plan{Kind: "route", Target: "route/" + in.RouteID, NextRevision: 1, Changes: []Change{}, AffectedRoles: []string{}, AffectedRoutes: []string{in.RouteID}, Warnings: []string{}}
	local, enabled := true, true
	if in.LocalOnly != nil {
		local = *in.LocalOnly
	}
	if in.Enabled != nil {
		enabled = *in.Enabled
	}
	if !local {
		p.Warnings = append(p.Warnings, "this route may use a remote model: only explicitly non-local routes ever leave the homelab")
	}
	if in.ContextBudget < 64000 {
		p.Warnings = append(p.Warnings, "Hermes refuses models with less than 64K context; this route suits the direct harness only")
	}
	old := schema.ModelRoute{}
	if cur != nil {
		p.BasedOn, p.NextRevision, old = cur.Revision, cur.Revision+1, *cur
	}
	oldMax := int64(0)
	if old.MaxOutput != nil {
		oldMax = *old.MaxOutput
	}
	for _, c := range []Change{{"alias", old.Alias, in.Alias}, {"device", old.Device, in.Device}, {"backendModel", old.BackendModel, in.BackendModel},
		{"contextBudget", old.ContextBudget, in.ContextBudget}, {"maxOutput", oldMax, in.MaxOutput}, {"localOnly", cur != nil && old.LocalOnly, local}, {"enabled", cur != nil && old.Enabled, enabled}} {
		if fmt.Sprint(c.From) != fmt.Sprint(c.To) {
			p.Changes = append(p.Changes, c)
		}
	}
	if _, roles, _, err := a.currentSettings(ctx); err == nil {
		for r, b := range roles {
			if b.Route == in.RouteID {
				p.AffectedRoles = append(p.AffectedRoles, r)
			}
		}
		sort.Strings(p.AffectedRoles)
	}
	p.PinnedRuns, err = a.pinned(ctx, func(b *schema.RunBinding) bool { return b.RouteID == in.RouteID })
	return p, err
}

// CommitRoute writes the next route revision if the route is still at expected.
func (a *Admin) CommitRoute(ctx context.Context, actor string, in RouteInput, expected int64) (Plan, *schema.ModelRoute, error) {
	p, err := a.PlanRoute(ctx, in)
	if err != nil {
		return p, nil, err
	}
	if p.BasedOn != expected {
		return p, nil, stale(p.BasedOn)
	}
	local, enabled := true, true
	if in.LocalOnly != nil {
		local = *in.LocalOnly
	}
	if in.Enabled != nil {
		enabled = *in.Enabled
	}
	rec := &schema.ModelRoute{RouteID: in.RouteID, Revision: p.NextRevision, Alias: in.Alias, Device: in.Device, BackendModel: in.BackendModel,
		ContextBudget: in.ContextBudget, LocalOnly: local, Enabled: enabled, CreatedBy: schema.Ptr(actor)}
	if in.MaxOutput > 0 {
		rec.MaxOutput = schema.Ptr(in.MaxOutput)
	}
	got, err := schema.For[schema.ModelRoute](a.Store, schema.CollModelRoutes).Create(ctx, plan.RevisionDocID(in.RouteID, p.NextRevision), "", rec)
	if errors.Is(err, schema.ErrConflict) {
		cur, _ := latestRoute(ctx, a.Store, in.RouteID)
		if cur != nil {
			return p, nil, stale(cur.Revision)
		}
		return p, nil, stale(p.NextRevision)
	}
	if err != nil {
		return p, nil, err
	}
	lc, _ := json.Marshal(p.Changes)
	err = a.audit(ctx, p.Target, lastChange{Actor: actor, Action: "route.register", From: p.BasedOn, To: p.NextRevision, At: now(), Detail: string(lc)})
	return p, got, err
}
