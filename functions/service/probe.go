package service

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/settings"
)

// releaseProbe is the evidence's probe run (settings.ProbeRun, PA_RELEASE_PROBE=agent):
// the functions cannot reach the agent's gateway, so the first pass enqueues a probe task
// (queue.ProbeTask, task id queue.ProbeRunID: never twice) on the device queue of the
// role's route and notes when (queuedAt in queue.ProbeKey); the agent serving that device
// runs it through the candidate's harness and route and writes the outcome there; a later
// pass reads it. Nobody answering within PA_RELEASE_PROBE_WAIT fails the probe.
func (s *Service) releaseProbe(ctx context.Context, fp, role string, h *schema.HarnessProfile, r *schema.ModelRoute) (outcome settings.ProbeOutcome, err error) {
	if len(fp) > 32 {
		fp = fp[:32]
	}
	key := queue.ProbeKey(fp, role)
	rec, err := s.rdb.HGetAll(ctx, key).Result()
	if err != nil {
		return outcome, fmt.Errorf("read probe %s: %w", key, err)
	}
	if ok, done := rec["ok"]; done {
		return settings.ProbeOutcome{Done: true, OK: ok == "1", Detail: rec["detail"]}, nil
	}
	now := time.Now().UTC()
	if q, err := strconv.ParseInt(rec["queuedAt"], 10, 64); err == nil {
		wait := s.cfg.ReleaseProbeWait
		if wait <= 0 {
			wait = 10 * time.Minute
		}
		if now.Sub(time.UnixMilli(q)) > wait {
			return settings.ProbeOutcome{Done: true, Detail: fmt.Sprintf("no agent answered the probe on device %s within %s", r.Device, wait)}, nil
		}
		return settings.ProbeOutcome{Detail: fmt.Sprintf("waiting for the probe run on device %s", r.Device)}, nil
	}
	t := queue.ProbeTask{Fingerprint: fp, Role: role, Harness: h.ProfileID, HarnessRevision: h.Revision, Route: r.RouteID, RouteRevision: r.Revision}
	if _, err := queue.NewEnqueuer(s.aq).EnqueueProbe(ctx, queue.DeviceQueue(r.Device), t); err != nil {
		return outcome, err
	}
	pipe := s.rdb.TxPipeline()
	pipe.HSetNX(ctx, key, "queuedAt", strconv.FormatInt(now.UnixMilli(), 10))
	pipe.Expire(ctx, key, queue.ProbeKeyTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return outcome, fmt.Errorf("note probe %s: %w", key, err)
	}
	return settings.ProbeOutcome{Detail: fmt.Sprintf("waiting for the probe run on device %s", r.Device)}, nil
}
