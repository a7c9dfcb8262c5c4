package executor

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/hibiken/asynq"

	"privateassistant/internal/startstop"
	"privateassistant/schema"
)

// Resumer finds runs whose executor vanished (a crashed or killed agent: no live lease)
// and executes them here: the new attempt re-attaches to the native run through its
// idempotency key, it never submits a second one. It also covers a run whose task an
// agent had taken off the queue but never claimed. asynq's own recovery of such tasks
// takes one to two minutes; the lease makes it seconds. The task, when asynq retries it
// later, finds the run settled and completes.
type Resumer struct {
	Exec   *Executor
	Queues []string // the queues this agent serves: only their runs are resumed here
	Every  time.Duration
	Log    *slog.Logger

	scan startstop.Runner // the scan loop: stopped by StopScan (intake) and by Stop
	runs startstop.Runner // the resumed runs: cancelled and waited for by Stop
}

var _ startstop.Service = (*Resumer)(nil)

var resumable = []interface{}{schema.RunRunning, schema.RunWaitingForApproval, schema.RunWaitingForResource, schema.RunCancelling, schema.RunQueued}

// Once scans and resumes; it returns how many runs it started. Resumed runs run under
// the context given to Start (not ctx), so stopping the scans leaves them running; Once
// before Start (or after Stop) starts nothing and returns startstop.ErrStopped.
func (r *Resumer) Once(ctx context.Context) (int, error) {
	runs, err := schema.For[schema.Run](r.Exec.Store, schema.CollRuns).All(ctx, schema.ListQuery{
		AllOwners: true, Filters: []string{query.Equal("status", resumable)}, Limit: 100})
	if err != nil {
		return 0, err
	}
	n := 0
	for _, run := range runs {
		if r.Exec.Active(run.ID) {
			continue
		}
		if exists, err := r.Exec.RDB.Exists(ctx, LeaseKey(run.ID), BackoffKey(run.ID)).Result(); err != nil || exists > 0 {
			continue
		}
		b, err := schema.For[schema.RunBinding](r.Exec.Store, schema.CollRunBindings).Get(ctx, run.ID)
		if err != nil || !slices.Contains(r.Queues, b.Queue) {
			continue
		}
		if run.Status == schema.RunQueued {
			// Queued runs belong to asynq unless their task is stuck active with nobody on it.
			if r.Exec.Inspector == nil {
				continue
			}
			ti, err := r.Exec.Inspector.GetTaskInfo(b.Queue, run.ID)
			if err != nil || ti.State != asynq.TaskStateActive {
				continue
			}
		}
		id := run.ID
		started := r.runs.Go(func(ctx context.Context) {
			if err := r.Exec.Execute(ctx, id); err != nil && !errors.Is(err, ErrBusy) && !errors.Is(err, context.Canceled) {
				r.log().Warn("resumed run ended with an error", "run", id, "err", err)
			}
		})
		if !started {
			return n, startstop.ErrStopped
		}
		n++
	}
	return n, nil
}

func (r *Resumer) log() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

// Start scans at once and then every Every (default 5 s) in the background. Resumed
// runs live under ctx until Stop.
func (r *Resumer) Start(ctx context.Context) error {
	every := r.Every
	if every <= 0 {
		every = 5 * time.Second
	}
	if err := r.runs.Start(ctx, nil); err != nil {
		return err
	}
	return r.scan.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, every, r.log(), "resume scan", func(ctx context.Context) error {
			_, err := r.Once(ctx)
			return err
		})
	})
}

// StopScan ends the scans (stage one of shutdown: no new work is taken) and waits for the
// one in progress; runs already resumed go on. Idempotent.
func (r *Resumer) StopScan() { r.scan.Stop() }

// Stop ends the scans, cancels the resumed runs (they return without stopping their
// native runs, which the next start re-attaches to) and waits for all of them.
// Idempotent, safe before Start.
func (r *Resumer) Stop() {
	r.scan.Stop()
	r.runs.Stop()
}
