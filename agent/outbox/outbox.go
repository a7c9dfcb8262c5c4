// Package outbox heals the gap between "the run is durable in Appwrite" and "its task is
// in Redis": a run that is queued in Appwrite with no task (the function crashed between
// its writes and the enqueue, Redis was down, or Redis lost data) is enqueued again with
// TaskID(runId), which can never create a second task.
package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/hibiken/asynq"

	"privateassistant/queue"
	"privateassistant/schema"
)

// Reconciler scans queued runs and re-enqueues the ones without a task.
type Reconciler struct {
	Store     *schema.Store
	Inspector *asynq.Inspector
	Enq       *queue.Enqueuer
	Log       *slog.Logger
	Interval  time.Duration // between scans (default 15 s)

	stop chan struct{}
	done chan struct{}
	once sync.Once
}

// Once runs one scan and returns how many runs it enqueued.
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
			continue
		}
		if !errors.Is(err, asynq.ErrTaskNotFound) && !errors.Is(err, asynq.ErrQueueNotFound) {
			return n, fmt.Errorf("outbox: inspect %s: %w", run.ID, err)
		}
		if err := r.Enq.EnqueueRun(ctx, b.Queue, queue.RunTask{RunID: run.ID, OwnerID: run.OwnerID, ConversationID: run.ConversationID, Role: run.Role}); err != nil {
			return n, err
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

// Start scans every Interval in the background until Stop.
func (r *Reconciler) Start(ctx context.Context) error {
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	every := r.Interval
	if every <= 0 {
		every = 15 * time.Second
	}
	go func() {
		defer close(r.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if _, err := r.Once(ctx); err != nil && !errors.Is(err, context.Canceled) {
				r.log().Warn("outbox scan failed", "err", err)
			}
			select {
			case <-ctx.Done():
				return
			case <-r.stop:
				return
			case <-t.C:
			}
		}
	}()
	return nil
}

// Stop ends the background scans and waits for the current one. Idempotent.
func (r *Reconciler) Stop() {
	if r.stop == nil {
		return
	}
	r.once.Do(func() { close(r.stop) })
	<-r.done
}
