package executor

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/hibiken/asynq"

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

	wg   sync.WaitGroup
	stop chan struct{}
	done chan struct{}
	once sync.Once
}

var resumable = []interface{}{schema.RunRunning, schema.RunWaitingForApproval, schema.RunWaitingForResource, schema.RunCancelling, schema.RunQueued}

// Once scans and resumes; it returns how many runs it started.
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
		n++
		r.wg.Add(1)
		go func(id string) {
			defer r.wg.Done()
			if err := r.Exec.Execute(ctx, id); err != nil && !errors.Is(err, ErrBusy) && !errors.Is(err, context.Canceled) {
				r.log().Warn("resumed run ended with an error", "run", id, "err", err)
			}
		}(run.ID)
	}
	return n, nil
}

func (r *Resumer) log() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

// Start scans at start and then every Every, until Stop.
func (r *Resumer) Start(ctx context.Context) error {
	r.stop, r.done = make(chan struct{}), make(chan struct{})
	every := r.Every
	if every <= 0 {
		every = 5 * time.Second
	}
	go func() {
		defer close(r.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if _, err := r.Once(ctx); err != nil && ctx.Err() == nil {
				r.log().Warn("resume scan failed", "err", err)
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

// Stop ends scanning. Idempotent.
func (r *Resumer) Stop() {
	if r.stop == nil {
		return
	}
	r.once.Do(func() { close(r.stop) })
	<-r.done
}

// Wait blocks until resumed runs return (their context bounds them).
func (r *Resumer) Wait() { r.wg.Wait() }
