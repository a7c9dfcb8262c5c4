package gateway

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	"privateassistant/runconfig"
	"privateassistant/schema"
)

// The run binding. Every chat completion must name the run it is made for — the path
// (/runs/{id}/v1/…), the X-PA-Run header (the direct harness), or the model
// "<route alias>@<run id>" (Hermes, harness.TagModel) — and that run must have bindings
// (admission pinned them). A request naming no run, or a run with no bindings, is refused
// (403 run_binding_required / unknown_run): nothing is served outside a run, so a model
// call nobody can account for (a native subagent on the plain alias, a caller that only
// holds the gateway's key) reaches no model. That the run is the device's current holder
// is the GPU fence's check: its own live grant at the current generation (409
// route_not_leased / stale_generation, gateway.go).
//
// The route a run's requests are served on is the revision the run is pinned to
// (bindings: routeId, routeRevision), never the latest: an admin switching a route to
// another model affects the runs admitted after the change, while a run admitted before
// keeps its model to the end (its GPU grant is on that model). The alias the request
// names must be the pinned revision's (409 route_not_pinned otherwise): a run cannot
// reach another route by naming it.

// Pinned resolves the route revision a run is pinned to (Gateway.Pinned).
type Pinned func(ctx context.Context, run string) (Route, error)

// binding is what a request is served under once its run is known.
type binding struct {
	run   string
	route Route
	pol   runconfig.ToolPolicy
}

// refusal is a request the gateway answers itself with an error.
type refusal struct {
	status    int
	code, msg string
	err       error // the cause, logged
}

func (r *refusal) write(w http.ResponseWriter) { writeErr(w, r.status, r.code, r.msg) }

// bind finds the run's pinned route and tool policy for a request naming alias.
func (g *Gateway) bind(ctx context.Context, run, alias string) (binding, *refusal) {
	if run == "" {
		return binding{}, &refusal{status: 403, code: "run_binding_required", msg: "every model call must name the run it is made for " +
			`(/runs/{run}/v1/…, the X-PA-Run header, or the model "<route alias>@<run>"); this one names none`}
	}
	b := binding{run: run}
	if g.Pinned != nil {
		rt, err := g.Pinned(ctx, run)
		switch {
		case errors.Is(err, ErrUnknownRun):
			return b, unknownRun(run)
		case err != nil:
			return b, &refusal{status: 503, code: "binding_unavailable", msg: "the run's bindings could not be read; try again", err: err}
		case rt.Alias != alias:
			return b, &refusal{status: 409, code: "route_not_pinned", msg: fmt.Sprintf("run %s is pinned to route %q (revision %d); it cannot call %q", run, rt.Alias, rt.Revision, alias)}
		}
		b.route = rt
	} else {
		rt, ok := g.Routes()[alias]
		if !ok {
			return b, &refusal{status: 404, code: "model_not_found", msg: fmt.Sprintf("no route is named %q", alias)}
		}
		b.route = rt
	}
	if g.Tools != nil {
		p, err := g.Tools(ctx, run)
		switch {
		case errors.Is(err, ErrUnknownRun):
			return b, unknownRun(run)
		case err != nil:
			return b, &refusal{status: 503, code: "policy_unavailable", msg: "the run's tool policy could not be read; try again", err: err}
		}
		b.pol = p
	}
	return b, nil
}

func unknownRun(run string) *refusal {
	return &refusal{status: 403, code: "unknown_run", msg: fmt.Sprintf("run %q has no bindings: the gateway serves only runs the application admitted", run)}
}

// BindingRoutes reads the route revision a run is pinned to from its bindings (cached: a
// run's bindings and a route revision never change): the agent's Gateway.Pinned. store
// is read at each miss. A run without bindings, or a run id Appwrite refuses, is
// ErrUnknownRun.
func BindingRoutes(store func() *schema.Store) Pinned {
	c := &pinCache[Route]{load: func(ctx context.Context, run string) (Route, error) {
		b, err := schema.For[schema.RunBinding](store(), schema.CollRunBindings).Get(ctx, run)
		if errors.Is(err, schema.ErrNotFound) || errors.Is(err, schema.ErrInvalid) {
			return Route{}, ErrUnknownRun
		}
		if err != nil {
			return Route{}, err
		}
		r, err := runconfig.RouteRevision(ctx, store(), b.RouteID, b.RouteRevision)
		if err != nil {
			return Route{}, fmt.Errorf("run %s: route %s revision %d: %w", run, b.RouteID, b.RouteRevision, err)
		}
		return Route{Alias: r.Alias, Revision: r.Revision, Device: r.Device, Model: r.BackendModel, Budget: r.ContextBudget}, nil
	}}
	return c.get
}

// BindingOwners reads the member a run belongs to from its bindings (cached: it never
// changes): the agent's Gateway.Owner.
func BindingOwners(store func() *schema.Store) func(ctx context.Context, run string) (string, error) {
	c := &pinCache[string]{load: func(ctx context.Context, run string) (string, error) {
		b, err := schema.For[schema.RunBinding](store(), schema.CollRunBindings).Get(ctx, run)
		if errors.Is(err, schema.ErrNotFound) || errors.Is(err, schema.ErrInvalid) {
			return "", ErrUnknownRun
		}
		if err != nil {
			return "", err
		}
		return b.OwnerID, nil
	}}
	return c.get
}

// pinCache keeps what a loader answered for each run (pinned at admission, never
// changing); errors are not kept. At most 4096 runs (past that it starts over).
type pinCache[T any] struct {
	load func(ctx context.Context, run string) (T, error)
	mu   sync.Mutex
	m    map[string]T
}

func (c *pinCache[T]) get(ctx context.Context, run string) (T, error) {
	c.mu.Lock()
	v, ok := c.m[run]
	c.mu.Unlock()
	if ok {
		return v, nil
	}
	v, err := c.load(ctx, run)
	if err != nil {
		return v, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil || len(c.m) >= 4096 {
		c.m = map[string]T{}
	}
	c.m[run] = v
	return v, nil
}

// memberRun refuses a request made with member's key for a run that is not member's: as
// a missing run (foreign looks exactly like missing).
func (g *Gateway) memberRun(ctx context.Context, run, member string) *refusal {
	owner, err := g.Owner(ctx, run)
	switch {
	case errors.Is(err, ErrUnknownRun) || (err == nil && owner != member):
		return unknownRun(run)
	case err != nil:
		return &refusal{status: 503, code: "binding_unavailable", msg: "the run's bindings could not be read; try again", err: err}
	}
	return nil
}
