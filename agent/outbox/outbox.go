package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"privateassistant/internal/backoff"
	"privateassistant/internal/startstop"
	"privateassistant/queue"
	"privateassistant/schema"
)

// DefaultInterval is the time between scans when Reconciler.Interval is zero.
const DefaultInterval = 15 * time.Second

// DefaultRequeue is the re-enqueue backoff of archived runs when Reconciler.Requeue is
// zero: 30 s after the first archive, doubling up to 10 min.
var DefaultRequeue = backoff.Backoff{Min: 30 * time.Second, Max: 10 * time.Minute, Factor: 2, Jitter: 0.1}

// Reconciler scans queued runs and re-enqueues the ones without a task. It is a
// startstop.Service: Start backgrounds the scan loop, Stop ends it and waits.
type Reconciler struct {
	Store     *schema.Store
	Inspector *asynq.Inspector
	Enq       *queue.Enqueuer
	RDB       redis.UniversalClient // re-registers a queue asynq forgot (Redis lost its data)
	Log       *slog.Logger
	Interval  time.Duration // between scans (default DefaultInterval)
	// Requeue spaces the re-enqueues of a run whose task asynq archived (its retries ran
	// out, e.g. during an outage): the n-th one waits Requeue's n-th delay after the
	// archive (default DefaultRequeue).
	Requeue backoff.Backoff

	run startstop.Runner
}

var _ startstop.Service = (*Reconciler)(nil)

// Once runs one scan and returns how many tasks it created. A Redis error ends the scan
// with that error; the runs it did not reach are handled by the next scan.
func (r *Reconciler) Once(ctx context.Context) (int, error) {
	runs, err := schema.For[schema.Run](r.Store, schema.CollRuns).All(ctx, schema.ListQuery{
		AllOwners: true, Filters: []string{query.Equal("status", schema.RunQueued)}, Limit: 100})
	if err != nil {
		return 0, fmt.Errorf("outbox: list queued runs: %w", err)
	}
	binds := schema.For[schema.RunBinding](r.Store, schema.CollRunBindings)
	n := 0
	for _, run := range runs {
		if run.CancelRequested {
			continue // the cancel path settles it
		}
		b, err := binds.Get(ctx, run.ID)
		if err != nil {
			r.log().Warn("outbox: run has no bindings", "run", run.ID, "err", err)
			continue
		}
		ti, err := r.Inspector.GetTaskInfo(b.Queue, run.ID)
		if err == nil && ti.State == asynq.TaskStateArchived {
			created, err := r.requeueArchived(ctx, b.Queue, run, ti)
			if err != nil {
				return n, err
			}
			if created {
				n++
			}
			continue
		}
		if err == nil {
			continue // a task exists (pending, scheduled, retry, active): asynq runs it
		}
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound):
		case errors.Is(err, asynq.ErrQueueNotFound):
			// Redis lost its data (or never saw this queue): asynq's client will not
			// register the queue again, so the inspector would never see the task.
			if r.RDB != nil {
				if err := queue.RegisterQueue(ctx, r.RDB, b.Queue); err != nil {
					return n, fmt.Errorf("outbox: %w", err)
				}
			}
		default:
			return n, fmt.Errorf("outbox: inspect %s: %w", run.ID, err)
		}
		created, err := r.Enq.EnqueueRunNew(ctx, b.Queue, queue.RunTask{RunID: run.ID, OwnerID: run.OwnerID, ConversationID: run.ConversationID, Role: run.Role})
		if err != nil {
			return n, fmt.Errorf("outbox: %w", err)
		}
		if !created {
			continue // another scan (or admission) got there first
		}
		r.log().Info("outbox: re-enqueued a queued run that had no task", "run", run.ID, "queue", b.Queue)
		n++
	}
	return n, nil
}

// requeueAfter is how long after its archive the n-th re-enqueue (n ≥ 1) of a run waits.
func (r *Reconciler) requeueAfter(n int64) time.Duration {
	b := r.Requeue
	if b == (backoff.Backoff{}) {
		b = DefaultRequeue
	}
	return b.Delay(n)
}

// requeueArchived gives a queued run whose task asynq archived (its retries ran out,
// e.g. Appwrite or Redis was down for longer than the retry budget) a new task: once the
// backoff for this run's re-enqueue count has passed since the archive, it re-reads the
// run (still queued, no cancel), removes the archived task (its TaskID stays reserved
// while it exists) and enqueues a fresh one with the same id. The count lives in Redis
// (queue.RequeueKey) so every agent's outbox shares it.
func (r *Reconciler) requeueArchived(ctx context.Context, q string, run schema.Run, ti *asynq.TaskInfo) (bool, error) {
	if r.RDB == nil {
		return false, errors.New("outbox: re-enqueueing an archived run needs RDB")
	}
	n, err := r.RDB.Get(ctx, queue.RequeueKey(run.ID)).Int64()
	if err != nil && !errors.Is(err, redis.Nil) {
		return false, fmt.Errorf("outbox: requeue count %s: %w", run.ID, err)
	}
	since := ti.LastFailedAt
	if since.IsZero() {
		since = ti.CompletedAt
	}
	if wait := r.requeueAfter(n + 1); !since.IsZero() && time.Since(since) < wait {
		return false, nil // not yet: the next scan looks again
	}
	// The run may have moved on since the list was read (an executor resumed it).
	cur, err := schema.For[schema.Run](r.Store, schema.CollRuns).Get(ctx, run.ID)
	if err != nil {
		return false, fmt.Errorf("outbox: re-read %s: %w", run.ID, err)
	}
	if cur.Status != schema.RunQueued || cur.CancelRequested {
		return false, nil
	}
	if err := r.Inspector.DeleteTask(q, run.ID); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
		return false, fmt.Errorf("outbox: remove archived task %s: %w", run.ID, err)
	}
	created, err := r.Enq.EnqueueRunNew(ctx, q, queue.RunTask{RunID: run.ID, OwnerID: run.OwnerID, ConversationID: run.ConversationID, Role: run.Role})
	if err != nil {
		return false, fmt.Errorf("outbox: %w", err)
	}
	if !created {
		return false, nil // another outbox re-enqueued it first
	}
	pipe := r.RDB.TxPipeline()
	pipe.Incr(ctx, queue.RequeueKey(run.ID))
	pipe.Expire(ctx, queue.RequeueKey(run.ID), queue.RunOptions(run.Role).Retention)
	if _, err := pipe.Exec(ctx); err != nil {
		r.log().Warn("outbox: requeue count not recorded", "run", run.ID, "err", err)
	}
	r.log().Info("outbox: re-enqueued a queued run whose task was archived", "run", run.ID, "queue", q, "requeues", n+1, "lastErr", ti.LastErr)
	return true, nil
}

func (r *Reconciler) log() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

// Start scans at once and then every Interval in the background, until Stop.
func (r *Reconciler) Start(ctx context.Context) error {
	every := r.Interval
	if every <= 0 {
		every = DefaultInterval
	}
	return r.run.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, every, r.log(), "outbox scan", func(ctx context.Context) error {
			_, err := r.Once(ctx)
			return err
		})
	})
}

// Stop ends the scans and waits for the one in progress. Idempotent, safe before Start.
func (r *Reconciler) Stop() { r.run.Stop() }
