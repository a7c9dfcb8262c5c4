package service

import (
	"context"
	"net/http"
	"time"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/settings"
)

// gpuConfirmTTL is how long an operator's confirmation waits for the device's agent to
// read it (the agent polls every telemetry interval, 2 s by default).
const gpuConfirmTTL = 10 * time.Minute

// gpuAdminRoutes: an admin confirms that a device in state "unknown" is free again (they
// checked the card: nothing holds its memory). The admin function records the time under
// pa:gpu:{device}:confirm (agent/gpu.ConfirmKey); the device's agent applies it once, and
// only to a device that became unknown before it. A device that is not unknown is left
// as it is.
func (s *Service) gpuAdminRoutes(a *httpapi.API) {
	a.Handle("POST /api/gpus/{device}/confirm", httpapi.Route{MaxBody: 1 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		dev := r.PathValue("device")
		if !queue.ValidID(dev) {
			return fault.Missing("device", nil)
		}
		known, err := s.rdb.SIsMember(r.Context(), queue.GPUDevicesKey(), dev).Result()
		if err != nil {
			return &fault.Error{Kind: fault.Unavailable, Code: "redis_unavailable", Message: "device state is unavailable; try again", RetryAfter: 2 * time.Second}
		}
		if !known {
			return fault.Missing("device", nil)
		}
		now := time.Now().UTC()
		if err := s.rdb.Set(r.Context(), queue.GPUKey(dev)+":confirm", now.Format(time.RFC3339Nano), gpuConfirmTTL).Err(); err != nil {
			return &fault.Error{Kind: fault.Unavailable, Code: "redis_unavailable", Message: "device state is unavailable; try again", RetryAfter: 2 * time.Second}
		}
		state, _ := s.rdb.HGet(r.Context(), queue.GPUKey(dev), "state").Result()
		s.log.Info("gpu device confirmed free by an admin", "device", dev, "admin", c.User.ID, "state", state)
		httpapi.WriteJSON(w, 202, map[string]any{"device": dev, "confirmedAt": now.Format(time.RFC3339Nano), "state": state,
			"note": "the device's agent applies this within seconds if the device is unknown; otherwise nothing changes"})
		return nil
	})
	s.qualifyRoutes(a)
}

var redisDown = &fault.Error{Kind: fault.Unavailable, Code: "redis_unavailable", Message: "device state is unavailable; try again", RetryAfter: 2 * time.Second}

// routeGate is the selection gate (settings.Admin.RouteGate): a route on a GPU an agent
// manages (a device in pa:gpu:devices; PA_ROUTE_QUALIFICATION=all: every route) needs a
// passing qualification for its device, model and budget before a role switches to it.
// PA_ROUTE_QUALIFICATION=off turns the gate off.
func (s *Service) routeGate(ctx context.Context, r *schema.ModelRoute) error {
	switch s.cfg.RouteQualification {
	case "off":
		return nil
	case "all":
	default:
		managed, err := s.rdb.SIsMember(ctx, queue.GPUDevicesKey(), r.Device).Result()
		if err != nil {
			return redisDown
		}
		if !managed {
			return nil // no agent manages the device: nothing can qualify it (a remote or unmanaged endpoint)
		}
	}
	return runconfig.CheckQualified(r)
}

// RouteQualificationView is a route's qualification as the admin API and /api/system
// show it: the request in flight (or the last one) from Redis and the result recorded on
// the route's latest revision.
type RouteQualificationView struct {
	Route         string `json:"route"`
	Revision      int64  `json:"revision"` // the route's latest revision
	Device        string `json:"device"`
	Model         string `json:"model"`
	ContextBudget int64  `json:"contextBudget"`
	// Qualified: the latest revision may be selected for a role (its qualification passed
	// for what it serves now); Reason says why not.
	Qualified bool                     `json:"qualified"`
	Reason    string                   `json:"reason,omitempty"`
	Summary   string                   `json:"summary"`
	Last      *runconfig.Qualification `json:"last"` // the qualification on the latest revision (nil: never)
	// Request is the latest request's progress (state queued|waiting|running|passed|
	// failed|error, position and reason while it waits): nil when none is kept.
	Request map[string]string `json:"request"`
}

func (s *Service) routeQualification(ctx context.Context, r *schema.ModelRoute) RouteQualificationView {
	return routeQualification(ctx, s.rdb, r)
}

// qualifyRoutes: an admin asks the agent that owns a route's device to qualify the route
// (POST /api/model-routes/{route}/qualify; pa admin gpu qualify ROUTE): runconfig.QualifyAsker
// puts a qualification task on the device's queue, which the device's agent runs like a
// job — never while a user's job holds the device — recording the result on a new
// revision of the route. GET …/qualification shows its progress and the last result.
func (s *Service) qualifyRoutes(a *httpapi.API) {
	asker := &runconfig.QualifyAsker{RDB: s.rdb, Enq: queue.NewEnqueuer(s.aq), Tasks: s.inspector}
	a.Handle("POST /api/model-routes/{route}/qualify", httpapi.Route{MaxBody: 1 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		id := r.PathValue("route")
		if !settings.ValidID(id) {
			return fault.Missing("route", nil)
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		req, route, err := asker.Ask(r.Context(), st, id, c.User.ID)
		if err != nil {
			return storeErr(err, "route")
		}
		s.log.Info("route qualification requested", "route", id, "revision", route.Revision, "device", route.Device, "admin", c.User.ID)
		httpapi.WriteJSON(w, 202, map[string]any{"requestId": req.RequestID, "route": id, "routeRevision": route.Revision, "device": route.Device,
			"model": route.BackendModel, "contextBudget": route.ContextBudget, "state": runconfig.QualifyQueued,
			"note": "queued: the agent of " + route.Device + " qualifies the route when no user's job holds the device, and records the result on a new revision of the route (GET /api/model-routes/" + id + "/qualification)"})
		return nil
	})
	a.Handle("GET /api/model-routes/{route}/qualification", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		id := r.PathValue("route")
		if !settings.ValidID(id) {
			return fault.Missing("route", nil)
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		route, err := runconfig.LatestRoute(r.Context(), st, id)
		if err != nil {
			return storeErr(err, "route")
		}
		httpapi.WriteJSON(w, 200, s.routeQualification(r.Context(), route))
		return nil
	})
}
