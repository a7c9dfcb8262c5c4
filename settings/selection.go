package settings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

	"privateassistant/fault"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// SelectionInput replaces which harness and route revision each work role uses, and
// optionally the admin tool ceiling. A role's tools narrow the ceiling; they may not name
// a tool outside it.
type SelectionInput struct {
	ExpectedRevision int64 `json:"expectedRevision"`
	// Default is the harness revision every role uses unless it names its own.
	Default *struct {
		Harness         string `json:"harness"`
		HarnessRevision int64  `json:"harnessRevision"`
	} `json:"default,omitempty"`
	Roles       map[string]runconfig.RoleBinding `json:"roles"`
	ToolCeiling []string                         `json:"toolCeiling,omitempty"`
	Preview     bool                             `json:"preview"`
	// Propose stops at the candidate: the reconciler collects its evidence and an admin
	// promotes it (POST /api/releases/{seq}/promote).
	Propose bool `json:"propose"`
}

// PlanSelection previews a selection change against the current settings.
func (a *Admin) PlanSelection(ctx context.Context, in SelectionInput) (ChangePreview, error) {
	head, hc, err := a.headContent(ctx)
	if err != nil {
		return ChangePreview{}, err
	}
	old, ceiling := hc.Roles, hc.ToolCeiling
	if in.ToolCeiling != nil {
		ceiling = in.ToolCeiling
	}
	if len(in.Roles) == 0 {
		return ChangePreview{}, bad("invalid_roles", "roles must name at least one work role")
	}
	if in.Default != nil {
		for role, b := range in.Roles {
			if b.Harness == "" {
				b.Harness, b.HarnessRevision = in.Default.Harness, in.Default.HarnessRevision
				in.Roles[role] = b
			}
		}
	}
	p := ChangePreview{Kind: "selection", Target: "settings/" + runconfig.SystemSettingsID, BasedOn: head, NextRevision: head + 1,
		Changes: []Change{}, AffectedRoles: []string{}, AffectedRoutes: []string{}, Warnings: []string{}}
	routes := map[string]bool{}
	names := slices.Collect(maps.Keys(in.Roles))
	for role, b := range in.Roles {
		if !idRe(role) || len(role) > 32 {
			return p, bad("invalid_role", "role %q is not a valid name", role)
		}
		if twin := caseTwin(role, names); twin != "" {
			return p, bad("invalid_role", "roles %q and %q differ only in case", role, twin)
		}
		h, err := runconfig.HarnessRevision(ctx, a.Store, b.Harness, b.HarnessRevision)
		if err == nil && h.ProfileID != b.Harness {
			// MariaDB's string equality ignores case, MongoDB's does not: an id must name
			// the profile exactly on every engine.
			err = schema.ErrNotFound
		}
		if errors.Is(err, schema.ErrNotFound) {
			return p, bad("unknown_harness", "role %s: harness %s revision %d does not exist", role, b.Harness, b.HarnessRevision)
		}
		if err != nil {
			return p, err
		}
		if h.Kind == "hermes" && !h.Verified {
			return p, bad("harness_unverified", "role %s: harness %s revision %d is not verified (validate it first)", role, b.Harness, b.HarnessRevision)
		}
		// A revision whose latest validation failed keeps the roles already bound to it
		// but takes no new one until it passes again.
		if prev, ok := old[role]; h.CheckFailedAt != nil && (!ok || prev.Harness != b.Harness || prev.HarnessRevision != b.HarnessRevision) {
			return p, bad("harness_check_failed", "role %s: the latest check of harness %s revision %d failed (%s); fix it and validate it again first",
				role, b.Harness, b.HarnessRevision, deref(h.CheckFailure))
		}
		r, err := runconfig.RouteRevision(ctx, a.Store, b.Route, b.RouteRevision)
		if err == nil && r.RouteID != b.Route {
			err = schema.ErrNotFound // exactly, as for the harness
		}
		if errors.Is(err, schema.ErrNotFound) {
			return p, bad("unknown_route", "role %s: route %s revision %d does not exist", role, b.Route, b.RouteRevision)
		}
		if err != nil {
			return p, err
		}
		if !r.Enabled {
			return p, bad("route_disabled", "role %s: route %s revision %d is disabled", role, b.Route, b.RouteRevision)
		}
		for _, t := range b.Tools {
			if !slices.Contains(ceiling, t) {
				return p, bad("tool_outside_ceiling", "role %s: tool %q is outside the tool ceiling; a role can only narrow it", role, t)
			}
		}
		if w, err := toolsetsFit(role, b, h, ceiling); err != nil {
			return p, err
		} else if w != "" {
			p.Warnings = append(p.Warnings, w)
		}
		if prev, ok := old[role]; !ok || !sameBinding(prev, b) {
			// A route goes live for a role only with a passing GPU qualification for what
			// it serves (a binding left as it is keeps its pinned revision).
			if a.RouteGate != nil && (!ok || prev.Route != b.Route || prev.RouteRevision != b.RouteRevision) {
				if err := a.RouteGate(ctx, r); errors.Is(err, runconfig.ErrUnqualified) {
					return p, bad("route_unqualified", "role %s: %v", role, err)
				} else if err != nil {
					return p, err
				}
			}
			p.Changes = append(p.Changes, Change{Field: "roles." + role, From: roleOrNil(old, role), To: b})
			p.AffectedRoles = append(p.AffectedRoles, role)
			routes[b.Route] = true
			if ok {
				routes[prev.Route] = true
			}
		}
	}
	for role := range old {
		if _, ok := in.Roles[role]; !ok {
			p.Changes = append(p.Changes, Change{Field: "roles." + role, From: old[role], To: nil})
			p.AffectedRoles = append(p.AffectedRoles, role)
		}
	}
	if in.ToolCeiling != nil {
		prev := hc.ToolCeiling
		if fmt.Sprint(prev) != fmt.Sprint(in.ToolCeiling) {
			p.Changes = append(p.Changes, Change{Field: "toolCeiling", From: prev, To: in.ToolCeiling})
		}
	}
	for r := range routes {
		p.AffectedRoutes = append(p.AffectedRoutes, r)
	}
	sort.Strings(p.AffectedRoles)
	sort.Strings(p.AffectedRoutes)
	sort.Slice(p.Changes, func(i, j int) bool { return p.Changes[i].Field < p.Changes[j].Field })
	// Runs already admitted keep the revisions they were pinned to.
	p.PinnedRuns, err = a.pinned(ctx, func(b *schema.RunBinding) bool {
		for _, role := range p.AffectedRoles {
			if ob, ok := old[role]; ok && ob.Harness == b.HarnessProfileID && ob.HarnessRevision == b.HarnessRevision && ob.Route == b.RouteID && ob.RouteRevision == b.RouteRevision {
				return true
			}
		}
		return false
	})
	if len(p.Changes) == 0 {
		p.Warnings = append(p.Warnings, "nothing changes")
	}
	return p, err
}

func sameBinding(a, b runconfig.RoleBinding) bool {
	x, _ := json.Marshal(a)
	y, _ := json.Marshal(b)
	return string(x) == string(y)
}

func roleOrNil(m map[string]runconfig.RoleBinding, r string) any {
	if b, ok := m[r]; ok {
		return b
	}
	return nil
}

// content is the head content in makes (PlanSelection filled the default into the roles).
func (in SelectionInput) content(head runconfig.Content) runconfig.Content {
	c := runconfig.Content{Roles: in.Roles, ToolCeiling: head.ToolCeiling, DefaultHarness: head.DefaultHarness, DefaultHarnessRevision: head.DefaultHarnessRevision}
	if in.ToolCeiling != nil {
		c.ToolCeiling = in.ToolCeiling
	}
	if in.Default != nil {
		c.DefaultHarness, c.DefaultHarnessRevision = in.Default.Harness, in.Default.HarnessRevision
	}
	return c
}

// ProposeSelection makes the next head revision a candidate (propose) if the head is
// still at in.ExpectedRevision. Nothing goes live: the reconciler collects its evidence,
// an admin promotes it.
func (a *Admin) ProposeSelection(ctx context.Context, actor string, in SelectionInput) (ChangePreview, *schema.Release, error) {
	p, err := a.PlanSelection(ctx, in)
	if err != nil {
		return p, nil, err
	}
	if p.BasedOn != in.ExpectedRevision {
		return p, nil, stale(p.BasedOn)
	}
	_, hc, err := a.headContent(ctx)
	if err != nil {
		return p, nil, err
	}
	rel, err := a.propose(ctx, actor, p, in.content(hc))
	return p, rel, err
}

// CommitSelection is the whole path in one call: propose, collect the evidence (Collect,
// under the reconciler's lease) and promote as actor, which the two-admin rule refuses
// when there are two or more admins (the candidate then waits for another admin's
// approval: 409 second_approver_required).
func (a *Admin) CommitSelection(ctx context.Context, actor string, in SelectionInput) (ChangePreview, error) {
	p, rel, err := a.ProposeSelection(ctx, actor, in)
	if err != nil {
		return p, err
	}
	rec := &Reconciler{Admin: a, Holder: "commit:" + actor, Probe: a.ProbeRun}
	if rel, err = rec.Collect(ctx, rel); err != nil {
		return p, err
	}
	if rel.State != schema.ReleaseReady {
		var ev Evidence
		if rel.Evidence != nil {
			_ = json.Unmarshal([]byte(*rel.Evidence), &ev)
		}
		why := ev.Waiting
		if len(ev.Problems) > 0 {
			why = ev.Problems[0]
		}
		return p, fault.E(fault.Conflict, "evidence_pending", fmt.Sprintf("release %d is not live: %s", rel.Seq, why), ErrNoEvidence).With("release", rel.Seq)
	}
	_, err = a.Promote(ctx, actor, rel.Seq)
	return p, err
}

// RepairAudit writes the audit record of the current settings revision if a crash lost it.
func (a *Admin) RepairAudit(ctx context.Context) error {
	s, err := schema.For[schema.Settings](a.Store, schema.CollSettings).Get(ctx, runconfig.SystemSettingsID)
	if err != nil || s.LastChange == nil {
		return nil
	}
	var lc lastChange
	if json.Unmarshal([]byte(*s.LastChange), &lc) != nil || lc.To != s.Revision {
		return nil
	}
	return a.audit(ctx, "settings/"+runconfig.SystemSettingsID, lc)
}
