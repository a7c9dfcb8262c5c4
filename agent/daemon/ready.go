package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"privateassistant/agent/gpu"
	"privateassistant/agent/homes"
	"privateassistant/internal/startstop"
	"privateassistant/queue"
	"privateassistant/readiness"
	"privateassistant/schema"
)

// Readiness per component (/readyz, pa_component_ready, and the report /api/system reads
// from Redis): Appwrite, Redis, the stream service (its Redis heartbeat), every Hermes the
// agent drives (each verified Hermes profile, or with PA_AGENT_HERMES_HOMES each member's
// own: idle-stopped is not a failure, a failed start is; and hermes:homes, whether a
// member's Hermes can start, before any has), the gateway, each managed
// device's model server and telemetry, and each device queue's consumers (asynq's server
// heartbeats).

// staticProbes are the components every agent has.
func (a *Agent) staticProbes() map[string]readiness.Probe {
	p := map[string]readiness.Probe{
		"redis": {Kind: readiness.KindRedis, Check: func(ctx context.Context) error { return a.RDB.Ping(ctx).Err() }},
		"appwrite": {Kind: readiness.KindAppwrite, Check: func(ctx context.Context) error {
			_, err := schema.For[schema.Settings](a.Store, schema.CollSettings).List(ctx, schema.ListQuery{Limit: 1})
			return err
		}},
	}
	if a.S.StreamCheck {
		p["stream"] = readiness.Probe{Kind: readiness.KindStream, Needs: "redis", Check: func(ctx context.Context) error {
			age, err := queue.StreamAlive(ctx, a.RDB, time.Now())
			if err != nil {
				return err
			}
			return readiness.Healthy{Detail: "last heartbeat " + age.Round(100*time.Millisecond).String() + " ago"}
		}}
	}
	return p
}

// dynamicProbes are the components known at run time: Hermes processes, devices, queues.
func (a *Agent) dynamicProbes() map[string]readiness.Probe {
	out := a.hermesProbes()
	if a.gwUp.Load() {
		out["gateway"] = readiness.Probe{Kind: readiness.KindGateway, Check: a.probeGateway}
	}
	for name, m := range a.GPU {
		out["model_server:"+name] = readiness.Probe{Kind: readiness.KindModelServer, Check: func(ctx context.Context) error {
			if err := m.ProbeModelServer(ctx); errors.Is(err, gpu.ErrNoModel) {
				return readiness.Idle{Why: err.Error()}
			} else if err != nil {
				return err
			}
			return readiness.Healthy{Detail: "serving " + m.Snapshot().Loaded}
		}}
		out["gpu_telemetry:"+name] = readiness.Probe{Kind: readiness.KindGPUTelemetry, Check: func(ctx context.Context) error {
			if err := m.ProbeTelemetry(ctx); errors.Is(err, gpu.ErrNoTelemetry) {
				return readiness.Healthy{Detail: "no telemetry source configured"}
			} else if err != nil {
				return err
			}
			return nil
		}}
	}
	for q := range a.Servers {
		out["queue:"+q] = readiness.Probe{Kind: readiness.KindQueueConsumers, Needs: "redis", Check: func(ctx context.Context) error {
			n, age, err := queue.Consumers(ctx, a.Exec.Inspector, a.RDB, q, time.Now())
			if err != nil {
				return err
			}
			return readiness.Healthy{Detail: fmt.Sprintf("%d consumer(s), last heartbeat %s ago", n, age.Round(time.Second))}
		}}
	}
	return out
}

// hermesProbes: with members' homes, each member's Hermes the supervisor knows; without,
// every verified Hermes profile's latest revision; and every direct profile (its base URL
// is a model server), read from Appwrite at most every 30 s (the last list is
// kept while Appwrite cannot be read).
func (a *Agent) hermesProbes() map[string]readiness.Probe {
	out := map[string]readiness.Probe{}
	if a.Homes != nil {
		sts := a.Homes.Status(context.Background())
		out[readiness.HermesHomes] = readiness.Probe{Kind: readiness.KindHermes, Check: func(context.Context) error {
			if err := a.Homes.CanStart(); err != nil {
				return err
			}
			running := 0
			for _, st := range sts {
				if st.State == homes.StateRunning {
					running++
				}
			}
			return readiness.Healthy{Detail: fmt.Sprintf("%d of %d members' Hermes running", running, len(sts))}
		}}
		for _, st := range sts {
			out["hermes:member:"+st.Member] = readiness.Probe{Kind: readiness.KindHermes, Check: func(ctx context.Context) error {
				switch st.State {
				case homes.StateIdle:
					return readiness.Idle{Why: "stopped while unused; starts on the member's next run"}
				case homes.StateFailed, homes.StateExited:
					return st.Err
				case homes.StateRunning:
					_, err := a.memberHarness(st.Home).Ready(ctx)
					return err
				}
				return fmt.Errorf("its state %q is not one readiness knows", st.State)
			}}
		}
	}
	for _, p := range a.profiles.get(a) {
		if p.Kind == "hermes" && (a.Homes != nil || !p.Verified) {
			continue // runs go to members' own Hermes; or not driven until validated
		}
		kind, name := readiness.KindHermes, "hermes:"+p.ProfileID
		if p.Kind != "hermes" {
			kind, name = readiness.KindModelServer, "model_server:profile:"+p.ProfileID
		}
		h, err := a.harnessFor(&p)
		out[name] = readiness.Probe{Kind: kind, Check: func(ctx context.Context) error {
			if err != nil {
				return err
			}
			_, err := h.Ready(ctx)
			return err
		}}
	}
	return out
}

// profileCache is the harness profiles' latest revisions, read at most every 30 s.
type profileCache struct {
	mu   sync.Mutex
	at   time.Time
	list []schema.HarnessProfile
}

func (c *profileCache) get(a *Agent) []schema.HarnessProfile {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.at) < 30*time.Second {
		return c.list
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	ps, err := schema.For[schema.HarnessProfile](a.Store, schema.CollHarnessProfiles).All(ctx, schema.ListQuery{})
	if err != nil {
		return c.list // Appwrite's own probe says it fails
	}
	latest := map[string]schema.HarnessProfile{}
	for _, p := range ps {
		if cur, ok := latest[p.ProfileID]; !ok || p.Revision > cur.Revision {
			latest[p.ProfileID] = p
		}
	}
	c.list = c.list[:0]
	for _, p := range latest {
		c.list = append(c.list, p)
	}
	c.at = time.Now()
	return c.list
}

// probeGateway asks the gateway for its model list (with its key): it listens and answers.
func (a *Agent) probeGateway(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, a.GatewayURL()+"/models", nil)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.S.GatewayKey)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("the gateway does not answer: %w", errors.Unwrap(err))
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the gateway answered GET /v1/models with %d", resp.StatusCode)
	}
	return nil
}

// readyReporter writes the agent's readiness to Redis every queue.AliveEvery (the
// admin's /api/system reads it: the functions cannot reach the ops listener) and removes
// it on Stop.
type readyReporter struct {
	a       *Agent
	every   time.Duration
	run     startstop.Runner
	started atomic.Bool
}

var _ startstop.Service = (*readyReporter)(nil)

func (r *readyReporter) Start(ctx context.Context) error {
	r.started.Store(true)
	return r.run.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, r.every, r.a.Log, "readiness report", r.report)
	})
}

func (r *readyReporter) report(ctx context.Context) error {
	ectx, cancel := context.WithTimeout(ctx, 5*time.Second)
	b := readiness.Body(r.a.Ops.Evaluate(ectx))
	cancel()
	js, err := json.Marshal(b)
	if err != nil {
		return err
	}
	now := time.Now()
	if err := r.a.RDB.Set(ctx, queue.AgentReadyKey(r.a.S.AgentID), js, queue.AliveStale).Err(); err != nil {
		return err
	}
	return queue.Beat(ctx, r.a.RDB, queue.AgentsReadyKey(), r.a.S.AgentID, now)
}

// Stop ends the loop and removes the report (the agent is going away: /api/system says
// so at once rather than after the report expires).
func (r *readyReporter) Stop() {
	r.run.Stop()
	if !r.started.Load() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = r.a.RDB.Del(ctx, queue.AgentReadyKey(r.a.S.AgentID)).Err()
	_ = r.a.RDB.ZRem(ctx, queue.AgentsReadyKey(), r.a.S.AgentID).Err()
}
