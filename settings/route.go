package settings

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/runconfig"
	"privateassistant/schema"
)

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
func (a *Admin) PlanRoute(ctx context.Context, in RouteInput) (ChangePreview, error) {
	switch {
	case !idRe(in.RouteID):
		return ChangePreview{}, bad("invalid_id", "routeId must be 1-30 of [a-zA-Z0-9_-]")
	case !idRe(in.Alias):
		return ChangePreview{}, bad("invalid_alias", "alias must be 1-30 of [a-zA-Z0-9_-]")
	case in.BackendModel == "" || len(in.BackendModel) > schema.SizeModelName:
		return ChangePreview{}, bad("invalid_model", "backendModel is required")
	case in.ContextBudget < 1:
		return ChangePreview{}, bad("invalid_budget", "contextBudget must be the measured context window (> 0)")
	case in.MaxOutput < 0:
		return ChangePreview{}, bad("invalid_max_output", "maxOutput must not be negative")
	}
	devices, err := a.Devices(ctx)
	if err != nil {
		return ChangePreview{}, err
	}
	if !slices.Contains(devices, in.Device) {
		return ChangePreview{}, bad("unknown_device", "device %q is not a known device (known: %s)", in.Device, strings.Join(devices, ", "))
	}
	ids, err := routeIDs(ctx, a.Store)
	if err != nil {
		return ChangePreview{}, err
	}
	if twin := caseTwin(in.RouteID, ids); twin != "" {
		return ChangePreview{}, idCaseConflict("model route", in.RouteID, twin)
	}
	cur, err := latestRoute(ctx, a.Store, in.RouteID)
	if err != nil {
		return ChangePreview{}, err
	}
	p := ChangePreview{Kind: "route", Target: "route/" + in.RouteID, NextRevision: 1, Changes: []Change{}, AffectedRoles: []string{}, AffectedRoutes: []string{in.RouteID}, Warnings: []string{}}
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
		if cur.Qualification != nil && (cur.Device != in.Device || cur.BackendModel != in.BackendModel || cur.ContextBudget != in.ContextBudget) {
			p.Warnings = append(p.Warnings, "changing the device, model or context budget invalidates the route's GPU qualification: qualify it again before a role can switch to it (pa admin gpu qualify "+in.RouteID+")")
		}
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
func (a *Admin) CommitRoute(ctx context.Context, actor string, in RouteInput, expected int64) (ChangePreview, *schema.ModelRoute, error) {
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
	// The last qualification carries over; the gate accepts it only while the device,
	// model and budget are the ones it measured, so changing any of them invalidates it.
	if cur, _ := latestRoute(ctx, a.Store, in.RouteID); cur != nil && cur.Revision == p.BasedOn {
		rec.Qualification = cur.Qualification
	}
	got, err := schema.For[schema.ModelRoute](a.Store, schema.CollModelRoutes).Create(ctx, runconfig.RevisionDocID(in.RouteID, p.NextRevision), "", rec)
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
