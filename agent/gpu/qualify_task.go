package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// Qualifier is the asynq handler of queue.TypeQualify: the route qualifications the admin
// API asks for (POST /api/model-routes/{route}/qualify, pa admin gpu qualify ROUTE; the
// request is built and enqueued by runconfig.QualifyAsker) arrive on the device's queue
// like any device job. Each is run to its end: the route's latest revision is qualified on
// the device (Manager.Qualify: it waits in the device's queue like a job), the verdict is
// recorded on a new revision of the route, and every transition is written once to the
// route's status hash (runconfig.WriteQualifyStatus) for the admin API and /api/system.
//
// asynq owns delivery: a task whose agent died (SIGKILL at any step, before or after its
// first status write) stays active until its lease runs out, then asynq's recoverer hands
// it out again and it runs to a verdict; a handler aborted by the agent's shutdown returns
// its context's error and is offered again at the next start. Every other outcome is a
// status (passed, failed, or an error that says why and that nothing was recorded) and a
// completed task.
type Qualifier struct {
	RDB    redis.UniversalClient
	Store  *schema.Store
	Pool   Pool
	Config *Config // the devices' limits (nil: the defaults)
	Log    *slog.Logger
}

func (q *Qualifier) log() *slog.Logger {
	if q.Log != nil {
		return q.Log
	}
	return slog.Default()
}

func (q *Qualifier) limits(device string) (runconfig.QualificationLimits, time.Duration) {
	if q.Config == nil {
		return (&Config{}).QualifyLimits(device)
	}
	return q.Config.QualifyLimits(device)
}

// HandleTask implements asynq's handler for queue.TypeQualify.
func (q *Qualifier) HandleTask(ctx context.Context, t *asynq.Task) error {
	p, err := queue.Decode[queue.QualifyTask](t)
	if err != nil {
		return fmt.Errorf("qualify task: %w", err)
	}
	attempt, _ := asynq.GetRetryCount(ctx)
	return q.Run(ctx, p, attempt)
}

// status writes one transition of p's status (nothing when a newer request owns it).
func (q *Qualifier) status(ctx context.Context, p queue.QualifyTask, fields ...any) {
	if _, err := runconfig.WriteQualifyStatus(ctx, q.RDB, p, fields...); err != nil {
		q.log().Warn("qualification status not written", "route", p.Route, "err", err)
	}
}

// Run qualifies the route of p on its device (retried: how many deliveries of its task
// came before this one). Only an abort (ctx cancelled: the agent stops, or asynq lost its
// lease on the task) is returned as an error, for asynq to hand the task out again; the
// task's deadline passing is an error status like any other.
func (q *Qualifier) Run(ctx context.Context, p queue.QualifyTask, retried int) error {
	final := context.WithoutCancel(ctx)
	fail := func(err error) error {
		if errors.Is(ctx.Err(), context.Canceled) {
			q.status(final, p, "state", runconfig.QualifyWaiting, "reason", runconfig.QualifyCutOff, "position", 0, "step", "")
			q.log().Warn("a qualification was cut off; asynq hands it out again", "route", p.Route, "device", p.Device, "err", err)
			return fmt.Errorf("qualification of %s cut off: %w", p.Route, ctx.Err())
		}
		q.status(final, p, "state", runconfig.QualifyError, "reason", err.Error(), "position", 0, "step", "")
		q.log().Warn("qualification did not reach a verdict", "route", p.Route, "device", p.Device, "err", err)
		return nil
	}
	m := q.Pool[p.Device]
	if m == nil {
		return fail(fmt.Errorf("this agent does not manage device %s; nothing was recorded", p.Device))
	}
	route, err := runconfig.LatestRoute(ctx, q.Store, p.Route)
	if err != nil {
		return fail(fmt.Errorf("route %s could not be read (%v); nothing was recorded; ask again", p.Route, err))
	}
	if route.Device != p.Device {
		return fail(fmt.Errorf("route %s now runs on %s, not %s; ask again", p.Route, route.Device, p.Device))
	}
	// The first status write of this delivery: taken, waiting for the device.
	taken := "waiting for the device"
	if retried > 0 {
		taken = fmt.Sprintf("started again after its agent stopped (delivery %d); waiting for the device", retried+1)
	}
	q.status(ctx, p, "state", runconfig.QualifyWaiting, "position", 0, "step", "", "reason", taken)
	lim, timeout := q.limits(p.Device)
	qr := QualifyRequest{Route: route.RouteID, RouteRevision: route.Revision, Model: route.BackendModel, Budget: route.ContextBudget, Timeout: timeout,
		OnStart: func() {
			q.status(ctx, p, "state", runconfig.QualifyRunning, "position", 0,
				"reason", fmt.Sprintf("qualifying %s on %s at %d tokens", route.BackendModel, p.Device, route.ContextBudget))
		},
		// Each step as it goes (load, fill n of N tokens, generate, slots, thermal).
		OnStep: func(step, detail string) {
			q.status(ctx, p, "state", runconfig.QualifyRunning, "step", step, "reason", detail)
		}}
	if route.MaxOutput != nil {
		qr.MaxOutput = *route.MaxOutput
	}
	// A heartbeat on the status while it waits and runs: a status that stopped beating
	// tells the admin API that its agent is gone (runconfig.QualifyStatusView).
	hctx, stopBeat := context.WithCancel(ctx)
	var beat sync.WaitGroup
	beat.Add(1)
	go func() {
		defer beat.Done()
		tk := time.NewTicker(runconfig.QualifyHeartbeat)
		defer tk.Stop()
		for {
			select {
			case <-hctx.Done():
				return
			case <-tk.C:
				q.status(hctx, p)
			}
		}
	}()
	res, err := m.Qualify(ctx, qr, lim, func(pos int, reason string) {
		q.status(ctx, p, "state", runconfig.QualifyWaiting, "position", pos, "reason", "queued like a job: "+reason)
	})
	stopBeat()
	beat.Wait()
	if err != nil {
		return fail(fmt.Errorf("the qualification did not finish (%v); nothing was recorded; ask again", err))
	}
	actor := p.RequestedBy
	if actor == "" {
		actor = "agent"
	}
	body, _ := json.Marshal(res)
	rec, err := runconfig.RecordQualification(final, q.Store, actor, res)
	if err != nil {
		reason := "not recorded: " + err.Error()
		if !errors.Is(err, runconfig.ErrRouteChanged) {
			reason += "; ask again"
		}
		q.status(final, p, "state", runconfig.QualifyError, "reason", reason, "result", string(body), "position", 0, "step", "")
		q.log().Warn("qualification not recorded", "route", p.Route, "err", err)
		return nil
	}
	state := runconfig.QualifyPassed
	if !res.Passed {
		state = runconfig.QualifyFailed
	}
	q.status(final, p, "state", state, "reason", res.Summary(), "result", string(body),
		"recordedRevision", strconv.FormatInt(rec.Revision, 10), "position", 0, "step", "")
	q.log().Info("route qualified", "route", p.Route, "device", p.Device, "model", res.Model, "passed", res.Passed, "revision", rec.Revision, "summary", res.Summary())
	return nil
}
