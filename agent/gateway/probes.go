package gateway

import (
	"context"
	"sync"

	"privateassistant/runconfig"
)

// ProbeRuns are the release probes this agent is running (agent/executor HandleProbe,
// issue 33). A probe is no admitted run and has no bindings: while it runs, its run id
// is bound here to the route revision it probes, with no tool, and the gateway serves its
// model calls like a run's (the device fence still asks for the probe's own grant). Once
// unbound it is refused like any run without bindings.
type ProbeRuns struct {
	mu sync.Mutex
	m  map[string]Route
}

// Bind serves run on r (no tool) until unbind.
func (p *ProbeRuns) Bind(run string, r Route) (unbind func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.m == nil {
		p.m = map[string]Route{}
	}
	p.m[run] = r
	return func() {
		p.mu.Lock()
		defer p.mu.Unlock()
		delete(p.m, run)
	}
}

func (p *ProbeRuns) get(run string) (Route, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	r, ok := p.m[run]
	return r, ok
}

// Pinned is next, with the bound probes pinned to their route.
func (p *ProbeRuns) Pinned(next Pinned) Pinned {
	return func(ctx context.Context, run string) (Route, error) {
		if r, ok := p.get(run); ok {
			return r, nil
		}
		return next(ctx, run)
	}
}

// Owner is next, with the bound probes owned by probeMember: the member key of the Hermes
// a probe runs on when members have their own (agent/homes ProbeMember) is served for a
// bound probe and for nothing else.
func (p *ProbeRuns) Owner(probeMember string, next func(ctx context.Context, run string) (string, error)) func(ctx context.Context, run string) (string, error) {
	return func(ctx context.Context, run string) (string, error) {
		if _, ok := p.get(run); ok {
			return probeMember, nil
		}
		return next(ctx, run)
	}
}

// Tools is next, with the bound probes allowed no tool.
func (p *ProbeRuns) Tools(next func(ctx context.Context, run string) (runconfig.ToolPolicy, error)) func(ctx context.Context, run string) (runconfig.ToolPolicy, error) {
	return func(ctx context.Context, run string) (runconfig.ToolPolicy, error) {
		if _, ok := p.get(run); ok {
			return runconfig.ToolPolicy{}, nil
		}
		return next(ctx, run)
	}
}
