package service

import (
	"context"
	"net/http"
	"time"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/queue"
	"privateassistant/settings"
)

// ReconcileSchedule is the admin function's schedule (appwrite.json): Appwrite's
// scheduler runs it every minute as an asynchronous execution (trigger schedule), which
// runs the reconciler's pass without holding a synchronous API worker.
const ReconcileSchedule = "* * * * *"

// scheduledRoutes: the admin function's scheduled execution (POST / with
// x-appwrite-trigger: schedule, no user) runs the reconciler's pass: every collecting
// candidate's evidence is collected under its lease, so no admin has to ask.
//
// The trigger header is not proof: on the executions API a client can send
// "X-Appwrite-Trigger" ahead of Appwrite's own (contracts/appwrite.md §3.2). So the pass
// acts on no identity, answers nothing but that it ran, and runs at most once per
// ReconcileGap across containers (a Redis key set if absent with that expiry): a forged
// trigger can only bring the next pass forward. Anything else on POST / answers exactly
// what an unknown route does.
func (s *Service) scheduledRoutes(a *httpapi.API) {
	a.Handle("POST /{$}", httpapi.Route{Scheduled: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		exec := r.Header.Get("X-Appwrite-Execution-Id")
		gap := s.cfg.ReconcileGap
		if gap <= 0 {
			gap = 20 * time.Second
		}
		ok, err := s.rdb.SetNX(r.Context(), queue.ReconcilerPassKey(), exec, gap).Result()
		if err != nil {
			return fault.E(fault.Unavailable, "redis_unavailable", "the reconciler's pass could not start", err)
		}
		if !ok {
			httpapi.WriteJSON(w, 200, map[string]any{"pass": "skipped: another pass ran less than " + gap.String() + " ago"})
			return nil
		}
		if c.AppwriteKey == "" {
			return fault.Errorf(fault.Misconfigured, "misconfigured", "no Appwrite key for this execution")
		}
		if err := s.Reconcile(r.Context(), c.AppwriteKey, "schedule:"+exec); err != nil {
			s.log.Warn("scheduled reconciler pass", "execution", exec, "err", err)
			return err
		}
		httpapi.WriteJSON(w, 200, map[string]any{"pass": "done"})
		return nil
	})
}

// Reconcile runs one reconciler pass as holder with Appwrite key key (the admin
// function's scope): every collecting candidate's evidence, each under its lease. The
// schedule runs it; the test stack runs it once after its bootstrap.
func (s *Service) Reconcile(ctx context.Context, key, holder string) error {
	st, err := s.store(&httpapi.Call{AppwriteKey: key})
	if err != nil {
		return err
	}
	adm := s.adminOn(st)
	return (&settings.Reconciler{Admin: adm, Holder: holder, Probe: adm.ProbeRun}).Pass(ctx)
}
