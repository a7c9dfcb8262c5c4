package settings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sort"

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
}

// PlanSelection previews a selection change against the current settings.
func (a *Admin) PlanSelection(ctx context.Context, in SelectionInput) (ChangePreview, error) {
	s, old, ceiling, err := a.currentSettings(ctx)
	if err != nil {
		return ChangePreview{}, err
	}
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
	p := ChangePreview{Kind: "selection", Target: "settings/" + runconfig.SystemSettingsID, BasedOn: s.Revision, NextRevision: s.Revision + 1,
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
		var prev []string
		if s.ToolCeiling != nil {
			_ = json.Unmarshal([]byte(*s.ToolCeiling), &prev)
		}
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

// CommitSelection writes the new settings revision if it is still at in.ExpectedRevision,
// then the audit record, then moves the plan pointer so admissions use it at once.
func (a *Admin) CommitSelection(ctx context.Context, actor string, in SelectionInput) (ChangePreview, error) {
	p, err := a.PlanSelection(ctx, in)
	if err != nil {
		return p, err
	}
	if p.BasedOn != in.ExpectedRevision {
		return p, stale(p.BasedOn)
	}
	rb, _ := json.Marshal(in.Roles)
	detail, _ := json.Marshal(p.Changes)
	lc := lastChange{Actor: actor, Action: "selection.commit", From: p.BasedOn, To: p.NextRevision, At: now(), Detail: string(detail)}
	lcb, _ := json.Marshal(lc)
	patch := map[string]any{"roles": string(rb), "lastChange": truncate(string(lcb), 2048)}
	if in.Default != nil {
		patch["defaultHarness"], patch["defaultHarnessRevision"] = in.Default.Harness, in.Default.HarnessRevision
	}
	if in.ToolCeiling != nil {
		cb, _ := json.Marshal(in.ToolCeiling)
		patch["toolCeiling"] = string(cb)
	}
	_, err = schema.For[schema.Settings](a.Store, schema.CollSettings).UpdateRevision(ctx, runconfig.SystemSettingsID, in.ExpectedRevision, patch)
	if errors.Is(err, schema.ErrStale) {
		s, _, _, _ := a.currentSettings(ctx)
		if s != nil {
			return p, stale(s.Revision)
		}
		return p, stale(in.ExpectedRevision + 1)
	}
	if err != nil {
		return p, err
	}
	if err := a.audit(ctx, p.Target, lc); err != nil {
		return p, err // repaired on the next admin call from lastChange
	}
	if a.Plans != nil {
		_ = a.Plans.MovePointer(ctx, p.NextRevision)
	}
	return p, nil
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
