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

	"privateassistant/internal/startstop"
	"privateassistant/queue"
	"privateassistant/schema"
)

// DefaultInterval is the time between scans when Reconciler.Interval is zero.
const DefaultInterval = 15 * time.Second

// Reconciler scans queued runs and re-enqueues the ones without a task. It is a
// startstop.Service: Start backgrounds the scan loop, Stop ends it and waits.
type Reconciler struct {
	Store     *schema.Store
	Inspector *asynq.Inspector
	Enq       *queue.Enqueuer
	RDB       redis.UniversalClient // re-registers a queue asynq forgot (Redis lost its data)
	Log       *slog.Logger
	Interval  time.Duration // between scans (default DefaultInterval)

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
		_, err = r.Inspector.GetTaskInfo(b.Queue, run.ID)
		if err == nil {
			continue // a task exists (in any state): TaskID(runId) is taken, nothing to do
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
