package service

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/readiness"
	"privateassistant/schema"
)

// readiness is /api/system's readiness section (admins only): what this function sees
// itself (Appwrite, Redis, the stream service's heartbeat, each device queue's consumers)
// and every agent's last report from Redis (queue.AgentReadyKey: its Hermes processes,
// gateway, model servers, GPU telemetry, and Appwrite and Redis as it sees them), each
// agent's components named "<agent>/<component>". An agent that stopped reporting
// without removing itself is failing; one that stopped cleanly is not listed.
func (s *Service) readiness(ctx context.Context, st *schema.Store, now time.Time) readiness.ReadyBody {
	// Finding the queues has its own bound: a Redis that does not answer must not use up
	// the checks' time (Appwrite would read failing with it).
	qctx, qcancel := context.WithTimeout(ctx, HealthTimeout)
	queues := s.deviceQueues(qctx, st)
	qcancel()
	ctx, cancel := context.WithTimeout(ctx, HealthTimeout)
	defer cancel()
	probes := map[string]readiness.Probe{
		"appwrite": {Kind: readiness.KindAppwrite, Check: s.appwriteUp},
		"redis":    {Kind: readiness.KindRedis, Check: func(ctx context.Context) error { return s.rdb.Ping(ctx).Err() }},
		"stream": {Kind: readiness.KindStream, Needs: "redis", Check: func(ctx context.Context) error {
			age, err := queue.StreamAlive(ctx, s.rdb, now)
			if err != nil {
				return err
			}
			return readiness.Healthy{Detail: "last heartbeat " + age.Round(100*time.Millisecond).String() + " ago"}
		}},
	}
	for _, q := range queues {
		{
			probes["queue:"+q] = readiness.Probe{Kind: readiness.KindQueueConsumers, Needs: "redis", Check: func(ctx context.Context) error {
				n, age, err := queue.Consumers(ctx, s.inspector, s.rdb, q, now)
				if err != nil {
					return err
				}
				return readiness.Healthy{Detail: fmt.Sprintf("%d consumer(s), last heartbeat %s ago", n, age.Round(time.Second))}
			}}
		}
	}
	cs := readiness.Evaluate(ctx, probes)
	cs = append(cs, s.agentReports(ctx, now)...)
	readiness.Sort(cs)
	return readiness.Body(cs)
}

// deviceQueues are the device queues that should have consumers: the known devices'
// (PA_KNOWN_DEVICES), those of enabled model routes, and, when Redis answers, those asynq
// knows (a task was queued) and those a consumer serves (asynq's inspector takes no
// context: it is not asked while Redis does not answer).
func (s *Service) deviceQueues(ctx context.Context, st *schema.Store) []string {
	set := map[string]bool{}
	for _, d := range s.cfg.KnownDevices {
		set[queue.DeviceQueue(d)] = true
	}
	if rs, err := schema.For[schema.ModelRoute](st, schema.CollModelRoutes).All(ctx, schema.ListQuery{}); err == nil {
		for _, r := range rs {
			if r.Enabled {
				set[queue.DeviceQueue(r.Device)] = true
			}
		}
	}
	if s.rdb.Ping(ctx).Err() == nil {
		if names, err := s.inspector.Queues(); err == nil {
			for _, q := range names {
				set[q] = true
			}
		}
		if servers, err := s.inspector.Servers(); err == nil {
			for _, sv := range servers {
				for q := range sv.Queues {
					set[q] = true
				}
			}
		}
	}
	out := []string{}
	for q := range set {
		if strings.HasPrefix(q, "gpu:") {
			out = append(out, q)
		}
	}
	sort.Strings(out)
	return out
}

// agentReports reads every agent's last readiness report.
func (s *Service) agentReports(ctx context.Context, now time.Time) []readiness.Component {
	agents, err := s.rdb.ZRangeWithScores(ctx, queue.AgentsReadyKey(), 0, -1).Result()
	if err != nil {
		return nil // Redis's own component says why
	}
	var out []readiness.Component
	for _, z := range agents {
		id, _ := z.Member.(string)
		age := now.Sub(time.UnixMilli(int64(z.Score)))
		raw, err := s.rdb.Get(ctx, queue.AgentReadyKey(id)).Bytes()
		var rep readiness.ReadyBody
		switch {
		case errors.Is(err, redis.Nil) || err == nil && json.Unmarshal(raw, &rep) != nil:
			out = append(out, readiness.Judge("agent:"+id, readiness.KindAgent,
				fmt.Errorf("no readiness report for %s", age.Round(time.Second))))
			continue
		case err != nil:
			continue
		}
		out = append(out, readiness.Judge("agent:"+id, readiness.KindAgent, readiness.Healthy{Detail: "reported " + age.Round(time.Second).String() + " ago"}))
		for _, c := range rep.Components {
			if c.Kind == readiness.KindStream || c.Kind == readiness.KindQueueConsumers {
				continue // judged here, for every agent at once
			}
			c.Name, c.Message = id+"/"+c.Name, "On agent "+id+": "+c.Message
			out = append(out, c)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out
}
