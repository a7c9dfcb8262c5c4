package service

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"sort"
	"strconv"

	"github.com/appwrite/sdk-for-go/users"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/settings"
)

// ReleaseView is a candidate or release as the console and the CLI show it.
type ReleaseView struct {
	Seq   int64  `json:"seq"`
	State string `json:"state"` // collecting, ready, failed
	Live  bool   `json:"live"`  // production's live release
	// LiveIn names the other environments promoted separately that run it (issue 35 item 3).
	LiveIn      []string                `json:"liveIn"`
	Fingerprint string                  `json:"fingerprint"`
	BasedOn     int64                   `json:"basedOn"`
	CreatedBy   string                  `json:"createdBy"`
	CreatedAt   string                  `json:"createdAt"`
	PromotedAt  *string                 `json:"promotedAt"`
	PromotedBy  *string                 `json:"promotedBy"`
	Content     runconfig.Content       `json:"content"`
	Plan        *settings.ChangePreview `json:"plan"`
	Evidence    *settings.Evidence      `json:"evidence"`
	Approvals   []settings.Approval     `json:"approvals"`
}

func releaseView(r *schema.Release, live string, envs map[string]string) ReleaseView {
	v := ReleaseView{Seq: r.Seq, State: r.State, Live: r.ID == live, Fingerprint: r.Fingerprint, BasedOn: r.BasedOn, CreatedBy: r.CreatedBy,
		CreatedAt: r.CreatedAt, PromotedAt: r.PromotedAt, PromotedBy: r.PromotedBy, Approvals: []settings.Approval{}, LiveIn: []string{}}
	for env, id := range envs {
		if id == r.ID {
			v.LiveIn = append(v.LiveIn, env)
		}
	}
	sort.Strings(v.LiveIn)
	_ = json.Unmarshal([]byte(r.Content), &v.Content)
	if r.Plan != nil {
		v.Plan = &settings.ChangePreview{}
		_ = json.Unmarshal([]byte(*r.Plan), v.Plan)
	}
	if r.Evidence != nil {
		v.Evidence = &settings.Evidence{}
		_ = json.Unmarshal([]byte(*r.Evidence), v.Evidence)
	}
	if r.Approvals != nil {
		_ = json.Unmarshal([]byte(*r.Approvals), &v.Approvals)
	}
	return v
}

// countAdmins counts the accounts carrying the admin label (the two-admin rule).
func (s *Service) countAdmins(st *schema.Store) func(context.Context) (int, error) {
	return func(context.Context) (int, error) {
		us, err := s.allUsers(users.New(st.Client()))
		if err != nil {
			return 0, err
		}
		n := 0
		for _, u := range us {
			if s.roleOf(u.Labels) == "admin" {
				n++
			}
		}
		return n, nil
	}
}

func liveReleaseID(ctx context.Context, st *schema.Store) string {
	set, err := schema.For[schema.Settings](st, schema.CollSettings).Get(ctx, runconfig.SystemSettingsID)
	if err != nil || set.Release == nil {
		return ""
	}
	return *set.Release
}

// releaseRoutes: candidates and releases (issue 33 items 1-3). Admin only; a member, and
// an id that is not a number, get exactly what an admin gets for a missing release.
func (s *Service) releaseRoutes(a *httpapi.API) {
	var one func(act func(adm *settings.Admin, ctx context.Context, actor string, seq int64) (*schema.Release, error)) httpapi.Handler
	a.Handle("GET /api/releases", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, true); err != nil {
			return err
		}
		adm, err := s.admin(c)
		if err != nil {
			return err
		}
		// The reconciler's pass (leased: concurrent lists do not collide) collects the
		// evidence of candidates still collecting, e.g. once the agent validated a harness.
		if err := (&settings.Reconciler{Admin: adm, Holder: "admin:" + c.User.ID, Probe: adm.ProbeRun}).Pass(r.Context()); err != nil {
			s.log.Warn("release reconciler pass", "err", err)
		}
		items, err := adm.Releases(r.Context(), 50)
		if err != nil {
			return storeErr(err, "releases")
		}
		live := liveReleaseID(r.Context(), adm.Store)
		envs, err := adm.EnvReleases(r.Context())
		if err != nil {
			return storeErr(err, "releases")
		}
		out := make([]ReleaseView, 0, len(items))
		for i := range items {
			out = append(out, releaseView(&items[i], live, envs))
		}
		httpapi.WriteJSON(w, 200, map[string]any{"releases": out})
		return nil
	})
	// oneIn is one for promote and rollback: an optional body {"environment": name}
	// (absent, "" or "production": production) names the runtime environment whose live
	// pointer moves.
	oneIn := func(act func(adm *settings.Admin, ctx context.Context, actor string, seq int64, env string) (*schema.Release, error)) httpapi.Handler {
		return func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
			if err := s.requireAdmin(c, true); err != nil {
				return err
			}
			var body struct {
				Environment string `json:"environment"`
			}
			raw, err := io.ReadAll(r.Body)
			if err != nil {
				return fault.Invalidf("invalid_body", "could not read the request body")
			}
			if len(bytes.TrimSpace(raw)) > 0 {
				r.Body = io.NopCloser(bytes.NewReader(raw))
				if err := httpapi.DecodeJSON(r, &body); err != nil {
					return err
				}
			}
			return one(func(adm *settings.Admin, ctx context.Context, actor string, seq int64) (*schema.Release, error) {
				return act(adm, ctx, actor, seq, body.Environment)
			})(w, r, c)
		}
	}
	one = func(act func(adm *settings.Admin, ctx context.Context, actor string, seq int64) (*schema.Release, error)) httpapi.Handler {
		return func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
			if err := s.requireAdmin(c, true); err != nil {
				return err
			}
			seq, err := strconv.ParseInt(r.PathValue("seq"), 10, 64)
			if err != nil || seq < 1 {
				return fault.Missing("resource", nil)
			}
			adm, err := s.admin(c)
			if err != nil {
				return err
			}
			_ = adm.Repair(r.Context())
			rel, err := act(adm, r.Context(), c.User.ID, seq)
			if err != nil {
				return storeErr(err, "resource")
			}
			envs, err := adm.EnvReleases(r.Context())
			if err != nil {
				return storeErr(err, "resource")
			}
			httpapi.WriteJSON(w, 200, map[string]any{"release": releaseView(rel, liveReleaseID(r.Context(), adm.Store), envs)})
			return nil
		}
	}
	a.Handle("GET /api/releases/{seq}", httpapi.Route{}, one(func(adm *settings.Admin, ctx context.Context, _ string, seq int64) (*schema.Release, error) {
		return adm.Release(ctx, seq)
	}))
	// Evidence: collect it now (under the reconciler's lease) if the candidate is still
	// collecting; otherwise answer what was collected.
	a.Handle("POST /api/releases/{seq}/evidence", httpapi.Route{MaxBody: 1 << 10}, one(func(adm *settings.Admin, ctx context.Context, actor string, seq int64) (*schema.Release, error) {
		rel, err := adm.Release(ctx, seq)
		if err != nil {
			return nil, err
		}
		rec := &settings.Reconciler{Admin: adm, Holder: "admin:" + actor, Probe: adm.ProbeRun}
		got, err := rec.Collect(ctx, rel)
		if errors.Is(err, settings.ErrLeaseHeld) {
			return adm.Release(ctx, seq)
		}
		return got, err
	}))
	a.Handle("POST /api/releases/{seq}/approve", httpapi.Route{MaxBody: 1 << 10}, one((*settings.Admin).Approve))
	a.Handle("POST /api/releases/{seq}/promote", httpapi.Route{MaxBody: 1 << 10}, oneIn((*settings.Admin).PromoteIn))
	a.Handle("POST /api/releases/{seq}/rollback", httpapi.Route{MaxBody: 1 << 10}, oneIn((*settings.Admin).RollbackIn))
	// An environment promoted separately goes back to running production's live release.
	a.Handle("POST /api/environments/{name}/follow-production", httpapi.Route{MaxBody: 1 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, true); err != nil {
			return err
		}
		adm, err := s.admin(c)
		if err != nil {
			return err
		}
		_ = adm.Repair(r.Context())
		if err := adm.FollowProduction(r.Context(), c.User.ID, r.PathValue("name")); err != nil {
			return storeErr(err, "environment")
		}
		envs, err := adm.EnvReleases(r.Context())
		if err != nil {
			return storeErr(err, "environment")
		}
		httpapi.WriteJSON(w, 200, map[string]any{"environment": r.PathValue("name"), "follows": "production", "environments": envs})
		return nil
	})
}
