package outbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/outbox"
	"privateassistant/internal/backoff"
	"privateassistant/internal/startstop"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

const owner = "owner1"

var q = queue.DeviceQueue("xtx")

type env struct {
	store *schema.Store
	redis *redistest.Server
	rdb   *redis.Client
	insp  *asynq.Inspector
	enq   *queue.Enqueuer
}

func setup(t *testing.T) *env {
	t.Helper()
	sc := schematest.New(t)
	rs := redistest.Start(t)
	rdb := rs.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	return &env{store: sc.Store, redis: rs, rdb: rdb, insp: asynq.NewInspectorFromRedisClient(rdb),
		enq: queue.NewEnqueuer(asynq.NewClientFromRedisClient(rdb))}
}

func (e *env) reconciler() *outbox.Reconciler {
	return &outbox.Reconciler{Store: e.store, Inspector: e.insp, Enq: e.enq, RDB: e.rdb, Interval: 20 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// run writes a run record (and its bindings) as admission would.
func (e *env) run(t *testing.T, id string, status schema.RunStatus, cancelRequested bool) {
	t.Helper()
	ctx := context.Background()
	_, err := schema.For[schema.Run](e.store, schema.CollRuns).Create(ctx, id, owner, &schema.Run{OwnerID: owner,
		ConversationID: "conv1", MessageID: "msg-" + id, RequestID: "req-" + id, Role: "research", Status: status,
		CancelRequested: cancelRequested, QueuedAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	_, err = schema.For[schema.RunBinding](e.store, schema.CollRunBindings).Create(ctx, id, "", &schema.RunBinding{OwnerID: owner,
		RunID: id, ConversationID: "conv1", MessageID: "msg-" + id, ContextSnapshotID: "snap1", HarnessProfileID: "hermes",
		HarnessRevision: 1, RouteID: "work", RouteRevision: 1, Queue: q})
	require.NoError(t, err)
}

// task returns the run's task, or nil when there is none.
func (e *env) task(t *testing.T, runID string) *asynq.TaskInfo {
	t.Helper()
	ti, err := e.insp.GetTaskInfo(q, runID)
	if errors.Is(err, asynq.ErrTaskNotFound) || errors.Is(err, asynq.ErrQueueNotFound) {
		return nil
	}
	require.NoError(t, err)
	return ti
}

// has reports whether the run has a task (for polls: it never fails the test).
func (e *env) has(runID string) bool {
	_, err := e.insp.GetTaskInfo(q, runID)
	return err == nil
}

func (e *env) tasks(t *testing.T) int {
	t.Helper()
	qi, err := e.insp.GetQueueInfo(q)
	if err != nil {
		return 0
	}
	return qi.Size
}

// TestQueuedRunWithoutTaskIsEnqueuedExactlyOnce: the gap between "durable in Appwrite"
// and "task in Redis" is healed once, with a payload the agent decodes, however many
// scans (and reconcilers) see it.
func TestQueuedRunWithoutTaskIsEnqueuedExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	e.run(t, "run1", schema.RunQueued, false)

	var wg sync.WaitGroup
	var created atomic.Int64
	for i := 0; i < 4; i++ { // concurrent reconcilers (two agents, two scans) race for it
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := e.reconciler().Once(ctx)
			assert.NoError(t, err)
			created.Add(int64(n))
		}()
	}
	wg.Wait()
	require.Equal(t, int64(1), created.Load(), "one scan created it, the others found it")
	require.Equal(t, 1, e.tasks(t), "one task whatever the number of scans")
	ti := e.task(t, "run1")
	require.NotNil(t, ti)
	p, err := queue.Decode[queue.RunTask](asynq.NewTask(ti.Type, ti.Payload))
	require.NoError(t, err)
	require.Equal(t, queue.RunTask{V: queue.RunTaskVersion, RunID: "run1", OwnerID: owner, ConversationID: "conv1", Role: "research"}, p)

	n, err := e.reconciler().Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a run with a task is not enqueued again")
	require.Equal(t, 1, e.tasks(t))
}

// TestRunWithTaskIsLeftAlone: a task that asynq will still run (pending, scheduled)
// keeps TaskID(runId); the reconciler neither replaces nor duplicates it.
func TestRunWithTaskIsLeftAlone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	e.run(t, "run2", schema.RunQueued, false)
	require.NoError(t, e.enq.EnqueueRun(ctx, q, queue.RunTask{RunID: "run2", OwnerID: owner, ConversationID: "conv1", Role: "coding"}))
	before := e.task(t, "run2")

	n, err := e.reconciler().Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	after := e.task(t, "run2")
	require.Equal(t, asynq.TaskStatePending, after.State, "left as it was")
	require.Equal(t, before.Payload, after.Payload)
	var p queue.RunTask
	require.NoError(t, json.Unmarshal(after.Payload, &p))
	require.Equal(t, "coding", p.Role, "the original task, not a rebuilt one")
	require.Equal(t, 1, e.tasks(t))
}

// TestArchivedTaskIsRequeuedWithBackoff: a queued run whose task asynq archived (its
// retries ran out during an outage) used to stay queued forever, its TaskID taken by the
// archived task. The outbox removes the archived task and enqueues a fresh one, the n-th
// time only once the n-th backoff delay has passed since the archive; a run that moved
// on, or whose cancel was requested, keeps its archived task.
func TestArchivedTaskIsRequeuedWithBackoff(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	e.run(t, "arch", schema.RunQueued, false)
	e.run(t, "archcancel", schema.RunQueued, true)
	for _, id := range []string{"arch", "archcancel"} {
		require.NoError(t, e.enq.EnqueueRun(ctx, q, queue.RunTask{RunID: id, OwnerID: owner, ConversationID: "conv1", Role: "research"}))
		require.NoError(t, e.insp.ArchiveTask(q, id))
	}
	r := e.reconciler()
	r.Requeue = backoff.Backoff{Min: time.Hour, Max: time.Hour, Jitter: 0.01}

	// Archived by ArchiveTask: no failure time, so the first re-enqueue is due at once.
	n, err := r.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	ti := e.task(t, "arch")
	require.Equal(t, asynq.TaskStatePending, ti.State, "a fresh task replaced the archived one")
	p, err := queue.Decode[queue.RunTask](asynq.NewTask(ti.Type, ti.Payload))
	require.NoError(t, err)
	require.Equal(t, "arch", p.RunID)
	require.Equal(t, asynq.TaskStateArchived, e.task(t, "archcancel").State, "a cancel requested: the cancel path's")
	require.Equal(t, 2, e.tasks(t))
	cnt, err := e.rdb.Get(ctx, queue.RequeueKey("arch")).Int()
	require.NoError(t, err)
	require.Equal(t, 1, cnt)

	// The fresh task fails through its retries again (archived, with a failure time):
	// the second re-enqueue waits for the backoff (an hour here) …
	srv := asynq.NewServerFromRedisClient(e.rdb, asynq.Config{Concurrency: 1, Queues: map[string]int{q: 1},
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel,
		RetryDelayFunc: func(int, error, *asynq.Task) time.Duration { return 0 }})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { return errors.New("appwrite is down") })))
	require.Eventually(t, func() bool {
		ti := e.task(t, "arch")
		return ti != nil && ti.State == asynq.TaskStateArchived
	}, 20*time.Second, 20*time.Millisecond)
	srv.Shutdown()
	n, err = r.Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "inside the backoff: left archived")
	require.Equal(t, asynq.TaskStateArchived, e.task(t, "arch").State)

	// … and happens once it has passed.
	r.Requeue = backoff.Backoff{Min: time.Millisecond, Max: time.Millisecond}
	n, err = r.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, asynq.TaskStatePending, e.task(t, "arch").State)
	cnt, err = e.rdb.Get(ctx, queue.RequeueKey("arch")).Int()
	require.NoError(t, err)
	require.Equal(t, 2, cnt)

	// A run no longer queued keeps its archived task (the resume scanner owns it).
	require.NoError(t, e.insp.ArchiveTask(q, "arch"))
	schematest.SetRunStatus(t, e.store, "arch", schema.RunRunning, nil)
	n, err = r.Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Equal(t, asynq.TaskStateArchived, e.task(t, "arch").State)
}

// TestCancelledAndNonQueuedRunsAreSkipped: a queued run whose cancel was requested is
// the cancel path's to settle, and a run in any other status is not the outbox's.
func TestCancelledAndNonQueuedRunsAreSkipped(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	e.run(t, "cancelled", schema.RunQueued, true)
	e.run(t, "running", schema.RunRunning, false)
	e.run(t, "done", schema.RunCompleted, false)
	n, err := e.reconciler().Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.Zero(t, e.tasks(t))
}

// TestRedisDownIsAnErrorAndTheNextScanHeals: with Redis gone the scan fails (it does not
// pretend the run has a task); Redis comes back empty (it lost its data) and the next
// scan enqueues the run.
func TestRedisDownIsAnErrorAndTheNextScanHeals(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	e.run(t, "run3", schema.RunQueued, false)
	require.NoError(t, e.enq.EnqueueRun(ctx, q, queue.RunTask{RunID: "run3", OwnerID: owner, ConversationID: "conv1", Role: "research"}))

	e.redis.Crash()
	n, err := e.reconciler().Once(ctx)
	require.Error(t, err)
	require.Zero(t, n)

	e.redis.Restart() // no AOF: the task (and asynq's queue registry) is gone
	require.Nil(t, e.task(t, "run3"))
	n, err = e.reconciler().Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.NotNil(t, e.task(t, "run3"), "the queue is registered again, so the task is visible")
	n, err = e.reconciler().Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "healed once, not on every scan")
}

// TestStartScansUntilStop: Start scans in the background; after Stop returns no scan
// runs any more (goleak in TestMain proves the loop is gone).
func TestStartScansUntilStop(t *testing.T) {
	t.Parallel()
	e := setup(t)
	r := e.reconciler()
	r.Stop() // safe before Start
	require.NoError(t, r.Start(context.Background()))
	t.Cleanup(r.Stop)
	require.ErrorIs(t, r.Start(context.Background()), startstop.ErrStarted)
	e.run(t, "late", schema.RunQueued, false)
	require.Eventually(t, func() bool { return e.has("late") }, 5*time.Second, 10*time.Millisecond)
	r.Stop()
	r.Stop() // idempotent
	e.run(t, "afterstop", schema.RunQueued, false)
	require.Never(t, func() bool { return e.has("afterstop") }, 300*time.Millisecond, 20*time.Millisecond,
		"no scan after Stop (interval is 20 ms)")
}
