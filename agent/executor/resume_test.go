package executor_test

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

func (s *suite) resumer() *executor.Resumer {
	return &executor.Resumer{RDB: s.rdb, Store: s.store, Enq: queue.NewEnqueuer(asynq.NewClientFromRedisClient(s.rdb)),
		Inspector: asynq.NewInspectorFromRedisClient(s.rdb), Queues: []string{"q"}, Active: s.exec.Active,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// serveQueue runs an asynq server on queue "q" whose handler is the executor's, as the
// daemon's are: a run busy elsewhere is retried (soon, here) without counting as a failure.
func (s *suite) serveQueue(t *testing.T) {
	t.Helper()
	srv := asynq.NewServerFromRedisClient(s.rdb, asynq.Config{Concurrency: 4, Queues: map[string]int{"q": 1},
		TaskCheckInterval: 5 * time.Millisecond, ShutdownTimeout: 5 * time.Second, LogLevel: asynq.FatalLevel,
		IsFailure: func(err error) bool { return !errors.Is(err, executor.ErrBusy) },
		RetryDelayFunc: func(n int, err error, t *asynq.Task) time.Duration {
			if errors.Is(err, executor.ErrBusy) {
				return 20 * time.Millisecond
			}
			return asynq.DefaultRetryDelayFunc(n, err, t)
		}})
	mux := asynq.NewServeMux()
	mux.HandleFunc(queue.TypeRun, s.exec.HandleTask)
	require.NoError(t, srv.Start(mux))
	t.Cleanup(srv.Shutdown)
}

func (s *suite) taskState(t *testing.T, id string) asynq.TaskState {
	t.Helper()
	ti, err := asynq.NewInspectorFromRedisClient(s.rdb).GetTaskInfo("q", id)
	require.NoError(t, err)
	return ti.State
}

func (s *suite) inLeaseSet(t *testing.T, id string) bool {
	t.Helper()
	_, err := s.rdb.ZScore(context.Background(), queue.LeasesKey("q"), id).Result()
	if errors.Is(err, redis.Nil) {
		return false
	}
	require.NoError(t, err)
	return true
}

// TestKilledExecutorIsResumedThroughItsQueueOnce: an agent killed holding a run's lease
// (nothing renews or releases it) leaves an expired entry in the queue's lease set; two
// agents scanning at once enqueue one resume task on the run's queue, named after the
// lost lease; the queue's ordinary worker runs it to the end and the run leaves the set.
func TestKilledExecutorIsResumedThroughItsQueueOnce(t *testing.T) {
	s := setup(t, newFake(func(string) []harness.Event { return deltas("a", "b", "c") }, time.Millisecond))
	ctx := context.Background()
	id := s.newRun(t)
	require.NoError(t, executor.LeaseAndDie(ctx, s.rdb, id, "q", 100*time.Millisecond))
	a, b := s.resumer(), s.resumer()
	for _, r := range []*executor.Resumer{a, b} { // the first scans list everything: the lease is live
		n, err := r.Once(ctx)
		require.NoError(t, err)
		require.Zero(t, n, "a run with a live lease is its executor's")
	}
	require.Eventually(t, func() bool { return s.rdb.Exists(ctx, executor.LeaseKey(id)).Val() == 0 }, 5*time.Second, 5*time.Millisecond)

	var wg sync.WaitGroup
	created := make([]int, 2)
	for i, r := range []*executor.Resumer{a, b} {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n, err := r.Once(ctx)
			require.NoError(t, err)
			created[i] = n
		}()
	}
	wg.Wait()
	require.Equal(t, 1, created[0]+created[1], "two agents enqueue one resume task")
	task := queue.ResumeTaskID(id, 1)
	require.Equal(t, asynq.TaskStatePending, s.taskState(t, task))
	n, err := a.Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a run whose resume task waits is not enqueued again")
	require.Zero(t, s.fake.submits, "the resumer executes nothing itself")

	s.serveQueue(t)
	require.Eventually(t, func() bool { return s.taskState(t, task) == asynq.TaskStateCompleted }, 10*time.Second, 5*time.Millisecond)
	s.requireLog(t, id)
	require.False(t, s.inLeaseSet(t, id), "a settled run leaves the lease set")
}

// TestOriginalAndResumeTaskExecuteTheRunOnce: the run's own task (asynq's recoverer hands
// it out again after its agent died) and its resume task run at once on two workers: the
// run lease lets one execute, the other is busy and, retried, finds the run settled and
// completes. One claim, one native run, one terminal event.
func TestOriginalAndResumeTaskExecuteTheRunOnce(t *testing.T) {
	s := setup(t, newFake(func(string) []harness.Event { return deltas("a", "b", "c", "d", "e", "f") }, 20*time.Millisecond))
	ctx := context.Background()
	id := s.newRun(t)
	enq := queue.NewEnqueuer(asynq.NewClientFromRedisClient(s.rdb))
	p := queue.RunTask{RunID: id, OwnerID: owner, ConversationID: "c", Role: "chat"}
	require.NoError(t, enq.EnqueueRun(ctx, "q", p))
	created, err := enq.EnqueueResume(ctx, "q", p, 1)
	require.NoError(t, err)
	require.True(t, created)
	again, err := enq.EnqueueResume(ctx, "q", p, 1)
	require.NoError(t, err)
	require.False(t, again, "the same resume task id is already there")

	s.serveQueue(t)
	for _, task := range []string{id, queue.ResumeTaskID(id, 1)} {
		require.Eventually(t, func() bool { return s.taskState(t, task) == asynq.TaskStateCompleted }, 10*time.Second, 5*time.Millisecond, task)
	}
	s.requireLog(t, id)
	b, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(1), *b.Attempt, "one attempt claimed the run")
	s.fake.mu.Lock()
	defer s.fake.mu.Unlock()
	require.Len(t, s.fake.runs, 1, "one native run")
	require.Equal(t, 1, s.fake.submits)
}

// TestResumeTaskOfASettledRunDoesNothing: a resume task that arrives after its run
// settled completes without a claim, an event or a record write; a settled run's stale
// lease-set entry is dropped by the scan, which enqueues nothing for it.
func TestResumeTaskOfASettledRunDoesNothing(t *testing.T) {
	s := setup(t, newFake(func(string) []harness.Event { return deltas("a", "b") }, time.Millisecond))
	ctx := context.Background()
	id := s.newRun(t)
	require.NoError(t, s.exec.Execute(ctx, id))
	before := s.requireLog(t, id)
	rec := s.record(t, id)
	require.False(t, s.inLeaseSet(t, id))

	task, err := queue.Build(queue.RunTask{RunID: id, OwnerID: owner, ConversationID: "c", Role: "chat"})
	require.NoError(t, err)
	require.NoError(t, s.exec.HandleTask(ctx, task))
	require.Equal(t, before, s.requireLog(t, id), "no event")
	require.Equal(t, *rec.Version, *s.record(t, id).Version, "no record write")
	b, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, int64(1), *b.Attempt, "no claim")
	require.Equal(t, 1, s.fake.submits)

	require.NoError(t, s.rdb.ZAdd(ctx, queue.LeasesKey("q"), redis.Z{Score: 0, Member: id}).Err())
	n, err := s.resumer().Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	require.False(t, s.inLeaseSet(t, id), "the scan drops a settled run")
	_, err = asynq.NewInspectorFromRedisClient(s.rdb).GetTaskInfo("q", queue.ResumeTaskID(id, 1))
	require.ErrorIs(t, err, asynq.ErrQueueNotFound)
}

// TestBackstopFindsRunsWithoutAnIndexedLease: a running run nobody holds and that is in
// no lease set (leased by an agent of an older version) is found by the full listing a
// process starts with; a queued run whose task waits in asynq is left to asynq; the scans
// between backstops list nothing.
func TestBackstopFindsRunsWithoutAnIndexedLease(t *testing.T) {
	s := setup(t, newFake(func(string) []harness.Event { return deltas("a") }, time.Millisecond))
	ctx := context.Background()
	orphan, waiting := s.newRun(t), s.newRun(t)
	schematest.SetRunStatus(t, s.store, orphan, schema.RunRunning, nil)
	enq := queue.NewEnqueuer(asynq.NewClientFromRedisClient(s.rdb))
	require.NoError(t, enq.EnqueueRun(ctx, "q", queue.RunTask{RunID: waiting, OwnerID: owner, ConversationID: "c", Role: "chat"}))

	r := s.resumer()
	n, err := r.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Equal(t, asynq.TaskStatePending, s.taskState(t, queue.ResumeTaskID(orphan, 0)))
	require.Equal(t, asynq.TaskStatePending, s.taskState(t, waiting))

	other := s.resumer() // another agent's first scan: the task is already there
	n, err = other.Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
	n, err = r.Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestRunIsIndexedAgainAfterRedisLostItsData: Redis loses its data mid-run (the lease, the
// lease set, the fence, the task): the attempt ends without settling the run, and its
// release puts the run back in the lease set, expired, although its lease is gone; once
// its back-off passed a scan enqueues its resume task and the queue's worker completes it.
func TestRunIsIndexedAgainAfterRedisLostItsData(t *testing.T) {
	s := setup(t, newFake(func(string) []harness.Event {
		return deltas(strings.Fields(strings.Repeat("tok ", 60))...)
	}, 20*time.Millisecond))
	ctx := context.Background()
	id := s.newRun(t)
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(ctx, id) }()
	require.Eventually(t, func() bool {
		evs, _, _ := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
		return len(evs) >= 5
	}, 10*time.Second, 5*time.Millisecond)
	require.NoError(t, s.rdb.FlushAll(ctx).Err())
	select {
	case err := <-done:
		t.Logf("the first attempt ended: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt did not end after Redis lost its data")
	}
	require.False(t, s.record(t, id).Status.Terminal())
	require.True(t, s.inLeaseSet(t, id), "the release indexed the run again")

	// The failed attempt's back-off (executor.RetryBackoff) keeps the scan away first.
	r := s.resumer()
	require.Eventually(t, func() bool {
		n, err := r.Once(ctx)
		require.NoError(t, err)
		return n == 1
	}, 10*time.Second, 20*time.Millisecond)
	s.serveQueue(t)
	require.Eventually(t, func() bool { return s.record(t, id).Status.Terminal() }, 20*time.Second, 10*time.Millisecond)
}

// TestEntriesBackingOffDoNotStarveTheRest: a scan handles at most 100 expired entries a
// queue; entries it must leave alone (backing off here) move behind the others, so a run
// whose executor vanished behind more than 100 of them is still resumed, a scan later.
func TestEntriesBackingOffDoNotStarveTheRest(t *testing.T) {
	s := setup(t, newFake(func(string) []harness.Event { return deltas("a") }, time.Millisecond))
	ctx := context.Background()
	id := s.newRun(t)
	r := s.resumer()
	n, err := r.Once(ctx) // the backstop: a queued run without an active task is asynq's
	require.NoError(t, err)
	require.Zero(t, n)
	for i := 0; i < 100; i++ {
		other := "backing-off-" + strconv.Itoa(i)
		require.NoError(t, s.rdb.ZAdd(ctx, queue.LeasesKey("q"), redis.Z{Score: float64(i + 1), Member: other}).Err())
		require.NoError(t, s.rdb.Set(ctx, executor.BackoffKey(other), "1", time.Minute).Err())
	}
	require.NoError(t, s.rdb.ZAdd(ctx, queue.LeasesKey("q"), redis.Z{Score: 1000, Member: id}).Err())
	n, err = r.Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "the first 100 expired entries are backing off")
	n, err = r.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n, "they moved behind the vanished run")
	require.Equal(t, asynq.TaskStatePending, s.taskState(t, queue.ResumeTaskID(id, 0)))
}
