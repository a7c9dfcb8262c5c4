package service

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/keyref"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/settings"
)

// admin answers non-admins 403 on collections and 404 on specific records (they may not
// know those exist).
func (s *Service) requireAdmin(c *httpapi.Call, specific bool) error {
	if c.User.HasLabel(s.cfg.AdminLabel) {
		return nil
	}
	if specific {
		return fault.Missing("resource", nil)
	}
	return fault.Forbiddenf("forbidden", "administrators only")
}

func (s *Service) admin(c *httpapi.Call) (*settings.Admin, error) {
	st, err := s.store(c)
	if err != nil {
		return nil, err
	}
	return s.adminOn(st), nil
}

// adminOn is the configuration admin on st (an execution's store).
func (s *Service) adminOn(st *schema.Store) *settings.Admin {
	gate := s.routeGate
	if s.cfg.RouteQualification == "off" {
		gate = nil // evidence says "not checked", not "not needed"
	}
	a := &settings.Admin{Store: st, Plans: s.plans, Devices: func(ctx context.Context) ([]string, error) { return s.knownDevices(ctx, st) },
		Probe: func(ctx context.Context, p *schema.HarnessProfile) (settings.Probe, error) { return s.probe(ctx, p) }, RouteGate: gate,
		Admins: s.countAdmins(st), SoloPromotion: s.cfg.SoloPromotion}
	if s.cfg.ReleaseProbe == "agent" {
		a.ProbeRun = s.releaseProbe
	}
	return a
}

// knownDevices: configured ones, those that reported a heartbeat, and those in use.
func (s *Service) knownDevices(ctx context.Context, st *schema.Store) ([]string, error) {
	set := map[string]bool{}
	for _, d := range s.cfg.KnownDevices {
		if d = strings.TrimSpace(d); d != "" {
			set[d] = true
		}
	}
	if names, err := s.rdb.SMembers(ctx, queue.GPUDevicesKey()).Result(); err == nil {
		for _, n := range names {
			set[n] = true
		}
	}
	recs, err := schema.For[schema.GPUStatus](st, schema.CollGPUStatus).All(ctx, schema.ListQuery{})
	if err != nil {
		return nil, err
	}
	for _, g := range recs {
		set[g.Device] = true
	}
	routes, err := schema.For[schema.ModelRoute](st, schema.CollModelRoutes).All(ctx, schema.ListQuery{})
	if err != nil {
		return nil, err
	}
	for _, r := range routes {
		set[r.Device] = true
	}
	out := make([]string, 0, len(set))
	for d := range set {
		out = append(out, d)
	}
	sort.Strings(out)
	return out, nil
}

// probe checks a direct harness's endpoint (a Hermes profile is validated by the agent,
// which holds its key: settings.Admin.Validate). Only env: key references resolve in a
// function (a file: reference names a file on the agent's host); an unset variable
// probes without a key.
func (s *Service) probe(ctx context.Context, p *schema.HarnessProfile) (settings.Probe, error) {
	key := ""
	if p.KeyRef != nil {
		if ref := keyref.Parse(*p.KeyRef); ref.Source == keyref.Env {
			key, _ = ref.Resolve()
		}
	}
	return settings.ProbeHarness(ctx, s.http, p, key), nil
}

// decodeMutation reads a mutation body; preview:true returns the plan only.
type mutation[T any] struct {
	Input            T     `json:"input"`
	ExpectedRevision int64 `json:"expectedRevision"`
	Preview          bool  `json:"preview"`
}

// adminList lists every revision of a revisioned collection (harnesses, routes), ordered
// by id then revision, as {key: [...]}.
func adminList[T any](s *Service, coll, idField, key, kind string) httpapi.Handler {
	return func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		all, err := schema.For[T](st, coll).All(r.Context(), schema.ListQuery{Order: []string{query.OrderAsc(idField), query.OrderAsc("revision")}})
		if err != nil {
			return storeErr(err, kind)
		}
		httpapi.WriteJSON(w, 200, map[string]any{key: all})
		return nil
	}
}

// adminMutate previews (200 {plan}) or commits (201 {plan, kind: record}) a new revision.
func adminMutate[In any, Rec any](s *Service, kind string,
	plan func(*settings.Admin, context.Context, In) (settings.ChangePreview, error),
	commit func(*settings.Admin, context.Context, string, In, int64) (settings.ChangePreview, *Rec, error)) httpapi.Handler {
	return func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		var m mutation[In]
		if err := httpapi.DecodeJSON(r, &m); err != nil {
			return err
		}
		adm, err := s.admin(c)
		if err != nil {
			return err
		}
		if m.Preview {
			p, err := plan(adm, r.Context(), m.Input)
			if err != nil {
				return storeErr(err, kind)
			}
			httpapi.WriteJSON(w, 200, map[string]any{"plan": p})
			return nil
		}
		p, rec, err := commit(adm, r.Context(), c.User.ID, m.Input, m.ExpectedRevision)
		if err != nil {
			return storeErr(err, kind)
		}
		httpapi.WriteJSON(w, 201, map[string]any{"plan": p, kind: rec})
		return nil
	}
}

func (s *Service) adminRoutes(a *httpapi.API) {
	s.releaseRoutes(a) // candidates, evidence, promotion, rollback (releases.go)
	s.gpuAdminRoutes(a)
	a.Handle("GET /api/harnesses", httpapi.Route{}, adminList[schema.HarnessProfile](s, schema.CollHarnessProfiles, "profileId", "harnesses", "harness"))
	a.Handle("POST /api/harnesses", httpapi.Route{MaxBody: 8 << 10}, adminMutate(s, "harness", (*settings.Admin).PlanHarness, (*settings.Admin).CommitHarness))
	a.Handle("POST /api/harnesses/{id}/validate", httpapi.Route{MaxBody: 1 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, true); err != nil {
			return err
		}
		id := r.PathValue("id")
		if !settings.ValidID(id) {
			return fault.Invalidf("invalid_id", "id is not a valid harness id")
		}
		rev, err := strconv.ParseInt(r.URL.Query().Get("revision"), 10, 64)
		if err != nil || rev < 1 {
			return fault.Invalidf("invalid_revision", "pass ?revision=N")
		}
		adm, err := s.admin(c)
		if err != nil {
			return err
		}
		rec, pr, err := adm.Validate(r.Context(), c.User.ID, id, rev)
		if err != nil {
			return storeErr(err, "harness")
		}
		if pr.Pending {
			// A Hermes profile: the agent, which holds its key, validates it within a few
			// seconds; GET /api/harnesses shows the result (validationRequestedAt cleared).
			httpapi.WriteJSON(w, 202, map[string]any{"harness": rec, "pending": true, "verified": pr.Verified,
				"validationRequestedAt": rec.ValidationRequestedAt, "reason": "validation requested: the agent, which holds the key, probes this revision within a few seconds (GET /api/harnesses shows the result)"})
			return nil
		}
		httpapi.WriteJSON(w, 200, map[string]any{"harness": rec, "pending": false, "verified": pr.Verified, "version": pr.Version, "reason": pr.Reason})
		return nil
	})
	a.Handle("GET /api/model-routes", httpapi.Route{}, adminList[schema.ModelRoute](s, schema.CollModelRoutes, "routeId", "routes", "route"))
	a.Handle("POST /api/model-routes", httpapi.Route{MaxBody: 8 << 10}, adminMutate(s, "route", (*settings.Admin).PlanRoute, (*settings.Admin).CommitRoute))
	a.Handle("GET /api/settings", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		adm, err := s.admin(c)
		if err != nil {
			return err
		}
		_ = adm.RepairAudit(r.Context())
		st, _ := s.store(c)
		set, err := schema.For[schema.Settings](st, schema.CollSettings).Get(r.Context(), "system")
		if err != nil {
			return storeErr(err, "settings")
		}
		var roles, ceiling any
		if set.Roles != nil {
			_ = json.Unmarshal([]byte(*set.Roles), &roles)
		}
		if set.ToolCeiling != nil {
			_ = json.Unmarshal([]byte(*set.ToolCeiling), &ceiling)
		}
		// The desired-state head (what a change is planned on and edits): its revision,
		// roles and tool ceiling; live: what serves now (the live pointer's revision and
		// release, its roles and ceiling), which differs while a candidate waits or after
		// a rollback.
		out := map[string]any{"revision": set.Revision, "roles": roles, "toolCeiling": ceiling,
			"live": map[string]any{"revision": set.Revision, "release": set.Release, "roles": roles, "toolCeiling": ceiling}}
		if h, err := adm.Head(r.Context()); err == nil && h != nil {
			var c runconfig.Content
			if err := json.Unmarshal([]byte(h.Content), &c); err == nil {
				out["revision"], out["roles"], out["toolCeiling"], out["release"] = h.Seq, c.Roles, c.ToolCeiling, h.Seq
			}
		}
		httpapi.WriteJSON(w, 200, out)
		return nil
	})
	a.Handle("PUT /api/harness-selection", httpapi.Route{MaxBody: 16 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		var in settings.SelectionInput
		if err := httpapi.DecodeJSON(r, &in); err != nil {
			return err
		}
		adm, err := s.admin(c)
		if err != nil {
			return err
		}
		_ = adm.RepairAudit(r.Context())
		if in.Preview {
			p, err := adm.PlanSelection(r.Context(), in)
			if err != nil {
				return storeErr(err, "settings")
			}
			httpapi.WriteJSON(w, 200, map[string]any{"plan": p})
			return nil
		}
		if in.Propose {
			p, rel, err := adm.ProposeSelection(r.Context(), c.User.ID, in)
			if err != nil {
				return storeErr(err, "settings")
			}
			httpapi.WriteJSON(w, 200, map[string]any{"plan": p, "revision": p.NextRevision, "release": releaseView(rel, liveReleaseID(r.Context(), adm.Store), nil)})
			return nil
		}
		p, err := adm.CommitSelection(r.Context(), c.User.ID, in)
		if err != nil {
			return storeErr(err, "settings")
		}
		httpapi.WriteJSON(w, 200, map[string]any{"plan": p, "revision": p.NextRevision})
		return nil
	})
	a.Handle("GET /api/audit", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		cursor, limit, err := pageParams(r)
		if err != nil {
			return err
		}
		adm, err := s.admin(c)
		if err != nil {
			return err
		}
		_ = adm.RepairAudit(r.Context())
		st, _ := s.store(c)
		// Newest first by the entry's own time (the index audit.at); never $sequence, a
		// UUIDv7 ordered only to the millisecond on MongoDB.
		q := schema.ListQuery{Order: []string{query.OrderDesc("at")}, Cursor: cursor, Limit: limit}
		if t := r.URL.Query().Get("target"); t != "" {
			if len(t) > 128 || !utf8.ValidString(t) {
				return fault.Invalidf("invalid_filter", "bad audit filter")
			}
			q.Filters = append(q.Filters, query.Equal("target", t))
		}
		page, err := schema.For[schema.Audit](st, schema.CollAudit).List(r.Context(), q)
		if errors.Is(err, schema.ErrInvalid) {
			return fault.Invalidf("invalid_filter", "bad audit filter")
		}
		if err != nil {
			return storeErr(err, "audit")
		}
		httpapi.WriteJSON(w, 200, map[string]any{"audit": page.Items, "next": page.Next})
		return nil
	})
}
