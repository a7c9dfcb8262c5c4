package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/outbox"
	"privateassistant/ops"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// synthRun writes one run through the code paths a real run takes, minus the model: the
// run record, its task enqueued as admission does (and completed by an asynq server), the
// owner cache as the functions set it, a control command, three events through the event
// log (Redis stream and hot state, then Appwrite), and the terminal record.
func (e *env) synthRun(t testing.TB, id string, terminal bool) {
	ctx := context.Background()
	runs := schema.For[schema.Run](e.store, schema.CollRuns)
	run, err := runs.Create(ctx, id, owner, &schema.Run{OwnerID: owner, ConversationID: "conv1", MessageID: "msg-" + id,
		RequestID: "req-" + id, Role: "chat", Status: schema.RunRunning, QueuedAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	require.NoError(t, e.enq.EnqueueRun(ctx, q, queue.RunTask{RunID: id, OwnerID: owner, ConversationID: "conv1", Role: "chat"}))
	require.NoError(t, e.rdb.Set(ctx, queue.RunOwnerKey(id), owner, 30*24*time.Hour).Err())
	require.NoError(t, queue.SendControl(ctx, e.rdb, id, queue.Control{Type: queue.ControlCancel, By: owner}))
	l, err := eventlog.Open(ctx, e.rdb, e.store, run, eventlog.NewToken())
	require.NoError(t, err)
	_, err = l.Emit(ctx, queue.RunStatusData{Status: "running", Phase: "thinking"}, true)
	require.NoError(t, err)
	_, err = l.Emit(ctx, queue.MessageDeltaData{Text: "a synthetic answer of a few words"}, false)
	require.NoError(t, err)
	if terminal {
		l.SetStatus(schema.RunCompleted)
		_, err = l.Emit(ctx, queue.RunEndData{Type: queue.EventRunCompleted, Status: string(schema.RunCompleted)}, true)
		require.NoError(t, err)
	}
	require.NoError(t, l.Flush(ctx))
	l.Release(ctx)
	if terminal {
		schematest.SetRunStatus(t, e.store, id, schema.RunCompleted, map[string]any{"lastSequence": l.Last(),
			"finishedAt": time.Now().UTC().Format(time.RFC3339Nano)})
	}
}

// bulkRun is synthRun at a cost independent of how many runs exist: the Redis side with
// the same keys, shapes and sizes (the task enqueued as admission does, the owner cache,
// a control command, three events appended to the stream and the hot state through
// queue's fixture writers, which write what the event log writes, and the fence the
// event log leaves), and in Appwrite only what the Expirer reads: the terminal record and
// the last event (the emulator's event list queries grow with the collection).
func (e *env) bulkRun(t testing.TB, id string) {
	ctx := context.Background()
	require.NoError(t, e.enq.EnqueueRun(ctx, q, queue.RunTask{RunID: id, OwnerID: owner, ConversationID: "conv1", Role: "chat"}))
	require.NoError(t, e.rdb.Set(ctx, queue.RunOwnerKey(id), owner, 30*24*time.Hour).Err())
	require.NoError(t, queue.SendControl(ctx, e.rdb, id, queue.Control{Type: queue.ControlCancel, By: owner}))
	now := time.Now().UTC()
	evs := []queue.Event{
		{Sequence: 1, Type: queue.EventRunStatus, At: now, Data: []byte(`{"status":"running","phase":"thinking","queueReason":null,"queuePosition":null}`)},
		{Sequence: 2, Type: queue.EventMessageDelta, At: now, Data: []byte(`{"text":"a synthetic answer of a few words"}`)},
		{Sequence: 3, Type: queue.EventRunCompleted, At: now, Data: []byte(`{"status":"completed"}`)},
	}
	for _, ev := range evs {
		require.NoError(t, queue.AppendEvent(ctx, e.rdb, id, ev))
	}
	require.NoError(t, queue.SetRunState(ctx, e.rdb, id, queue.RunState{Status: "completed", Terminal: true, HeartbeatAt: now, LastSequence: 3}))
	require.NoError(t, e.rdb.Set(ctx, eventlog.AttemptKey(id), eventlog.NewToken(), 24*time.Hour).Err())
	_, err := schema.For[schema.Run](e.store, schema.CollRuns).Create(ctx, id, owner, &schema.Run{OwnerID: owner, ConversationID: "conv1",
		MessageID: "msg-" + id, RequestID: "req-" + id, Role: "chat", Status: schema.RunCompleted, LastSequence: schema.Ptr(int64(3)),
		QueuedAt: now.Format(time.RFC3339Nano), FinishedAt: schema.Ptr(now.Format(time.RFC3339Nano))})
	require.NoError(t, err)
	_, err = schema.For[schema.Event](e.store, schema.CollEvents).Create(ctx, schema.EventDocID(id, 3), owner,
		&schema.Event{OwnerID: owner, RunID: id, Sequence: 3, Type: queue.EventRunCompleted, Data: schema.Ptr(`{"status":"completed"}`)})
	require.NoError(t, err)
}

// synthRuns writes n runs (bulkRun) from 8 goroutines.
func (e *env) synthRuns(t *testing.T, prefix string, n int) {
	var wg sync.WaitGroup
	ids := make(chan string)
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for id := range ids {
				e.bulkRun(t, id)
			}
		}()
	}
	for i := 0; i < n; i++ {
		ids <- fmt.Sprintf("%s%d", prefix, i)
	}
	close(ids)
	wg.Wait()
}

func (e *env) expirer(retention time.Duration) *outbox.Expirer {
	return &outbox.Expirer{RDB: e.rdb, Store: e.store, Inspector: e.insp, Retention: retention, Every: 100 * time.Millisecond,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
}

// TestRetentionExpiresOnlyWhatAppwriteHolds: a terminal run whose record and events
// Appwrite holds gets an expiry on every per-run key and its task is deleted when the
// retention ends; a live run, and a terminal run whose last event Appwrite lacks, keep
// their keys without expiry.
func TestRetentionExpiresOnlyWhatAppwriteHolds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	e.synthRun(t, "done", true)
	e.synthRun(t, "live", false)
	e.synthRun(t, "unflushed", true)
	// Appwrite lost the last event of "unflushed" (its copy was still pending).
	require.NoError(t, schema.For[schema.Event](e.store, schema.CollEvents).Delete(ctx, schema.EventDocID("unflushed", 3)))

	x := e.expirer(time.Hour)
	sw, err := x.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 3, sw.Scanned)
	require.Equal(t, 1, sw.Expired)
	for _, k := range outbox.RunKeys("done") {
		if n, _ := e.rdb.Exists(ctx, k).Result(); n == 0 {
			continue
		}
		ttl, err := e.rdb.PTTL(ctx, k).Result()
		require.NoError(t, err)
		require.Greater(t, ttl, 59*time.Minute, k)
		require.LessOrEqual(t, ttl, time.Hour, k)
	}
	for _, id := range []string{"live", "unflushed"} {
		for _, k := range []string{queue.EventsKey(id), queue.StateKey(id), queue.ControlKey(id)} {
			ttl, err := e.rdb.PTTL(ctx, k).Result()
			require.NoError(t, err)
			require.Equal(t, time.Duration(-1), ttl, "%s keeps %s", id, k)
		}
	}
	sw, err = x.Once(ctx)
	require.NoError(t, err)
	require.Zero(t, sw.Expired, "a run already expiring is not looked at again")

	// The task is deleted once the retention has passed (scheduled in pa:retention:tasks).
	require.NoError(t, e.rdb.ZAdd(ctx, outbox.TasksDueKey, redisZ("done")).Err())
	sw, err = x.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sw.Tasks)
	require.Nil(t, e.task(t, "done"))
	require.NotNil(t, e.task(t, "live"))
}

// TestFiveThousandRunsLeaveRedisAsTheyFoundIt: 5,000 runs written through the real paths
// grow Redis; once their retention (scaled to 2 s here; 24 h by default) has passed,
// INFO used_memory is back within 10 % of the baseline, measured after a warm-up cycle
// (asynq's queue registration and stats keys, the script cache) in the same Redis.
// PA_RETENTION_RUNS changes the count. Under -race (make test) it writes 500 runs: the
// race detector makes the emulator too slow for 5,000; `make chaos` runs the 5,000
// without it.
func TestFiveThousandRunsLeaveRedisAsTheyFoundIt(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 5,000 runs")
	}
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	n := 5000
	if raceEnabled {
		n = 500
	}
	if v := os.Getenv("PA_RETENTION_RUNS"); v != "" {
		var err error
		n, err = strconv.Atoi(v)
		require.NoError(t, err)
	}
	var handled atomic.Int64
	srv := asynq.NewServerFromRedisClient(e.rdb, asynq.Config{Concurrency: 16, Queues: map[string]int{q: 1},
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(context.Context, *asynq.Task) error { handled.Add(1); return nil })))
	defer srv.Shutdown()
	// expire runs a sweeper (retention scaled to 2 s) until every run's keys and task are gone.
	expire := func(what string) {
		x := e.expirer(2 * time.Second)
		require.NoError(t, x.Start(ctx))
		defer x.Stop()
		require.Eventually(t, func() bool {
			keys, err := e.rdb.Keys(ctx, "pa:run:*").Result()
			require.NoError(t, err)
			qi, err := e.insp.GetQueueInfo(q)
			require.NoError(t, err)
			return len(keys) == 0 && qi.Size == 0 && qi.Completed == 0
		}, 2*time.Minute, 200*time.Millisecond, what)
	}
	memory := func() int64 {
		info, err := ops.ReadRedisMemory(ctx, e.rdb)
		require.NoError(t, err)
		return info.Used
	}
	completed := func(want int64) {
		require.Eventually(t, func() bool { return handled.Load() == want }, 2*time.Minute, 50*time.Millisecond, "every task ran")
		require.Eventually(t, func() bool {
			qi, err := e.insp.GetQueueInfo(q)
			return err == nil && qi.Size == qi.Completed
		}, time.Minute, 50*time.Millisecond, "every task completed")
	}

	e.synthRuns(t, "warm", 20)
	completed(20)
	expire("the warm-up runs expire")
	base := memory()

	start := time.Now()
	e.synthRuns(t, "r", n)
	completed(int64(20 + n))
	peak := memory()
	written := time.Since(start)
	expire("every run's keys and task are gone after the retention")
	final := memory()
	t.Logf("redis used_memory: baseline %d, after %d runs %d, after retention %d (%.1f%% of baseline); written in %s",
		base, n, peak, final, 100*float64(final)/float64(base), written.Round(time.Millisecond))
	fmt.Fprintf(os.Stderr, "retention: baseline %d B, %d runs %d B, after retention %d B (%.1f%%)\n", base, n, peak, final, 100*float64(final)/float64(base))
	require.Greater(t, peak, base+int64(n)*200, "the runs did occupy Redis (the test can fail)")
	require.LessOrEqual(t, final, base+base/10, "back within 10% of the baseline")
}

func redisZ(member string) redis.Z { return redis.Z{Score: 0, Member: member} }

// TestDeletedConversationsRunsLoseTheirEvents: the runs of a deleted conversation
// (queue.PurgeRunsKey) lose their events — in Appwrite and in the Redis stream — once
// settled: a settled run in the sweep that finds Appwrite holding it, one whose keys
// already expired too; a run still going keeps them (and stays listed) until it settles;
// a run of a conversation nobody deleted keeps them.
func TestDeletedConversationsRunsLoseTheirEvents(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	e.synthRun(t, "deleted-done", true)
	e.synthRun(t, "deleted-old", true)
	e.synthRun(t, "deleted-live", false)
	e.synthRun(t, "kept", true)
	// deleted-old's hot keys expired long ago (only its Appwrite events remain).
	for _, k := range outbox.RunKeys("deleted-old") {
		require.NoError(t, e.rdb.Del(ctx, k).Err())
	}
	for _, id := range []string{"deleted-done", "deleted-old", "deleted-live"} {
		require.NoError(t, e.rdb.ZAdd(ctx, queue.PurgeRunsKey, redisZ(id)).Err())
	}
	stored := func(id string) int {
		evs, err := schema.For[schema.Event](e.store, schema.CollEvents).All(ctx, schema.ListQuery{AllOwners: true,
			Filters: []string{`{"method":"equal","attribute":"runId","values":["` + id + `"]}`}})
		require.NoError(t, err)
		return len(evs)
	}
	streamed := func(id string) int64 {
		n, err := e.rdb.XLen(ctx, queue.EventsKey(id)).Result()
		require.NoError(t, err)
		return n
	}
	require.Equal(t, 3, stored("deleted-done"))
	require.Equal(t, 2, stored("deleted-live"))
	// deleted-done's bindings and context snapshot (server only) go with its record.
	_, err := schema.For[schema.ContextSnapshot](e.store, schema.CollContextSnapshots).Create(ctx, "snap-deleted-done", owner,
		&schema.ContextSnapshot{OwnerID: owner, ConversationID: "conv1", ThroughSequence: 1, Context: schema.Ptr("[]"), Checksum: "x"})
	require.NoError(t, err)
	_, err = schema.For[schema.RunBinding](e.store, schema.CollRunBindings).Create(ctx, "deleted-done", owner,
		&schema.RunBinding{OwnerID: owner, RunID: "deleted-done", ConversationID: "conv1", MessageID: "msg-deleted-done",
			ContextSnapshotID: "snap-deleted-done", HarnessProfileID: "direct", HarnessRevision: 1, RouteID: "chat", RouteRevision: 1, Queue: q})
	require.NoError(t, err)
	exists := func(coll, id string) bool {
		_, err := schema.For[map[string]any](e.store, coll).Get(ctx, id)
		if errors.Is(err, schema.ErrNotFound) {
			return false
		}
		require.NoError(t, err)
		return true
	}

	x := e.expirer(time.Hour)
	sw, err := x.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, sw.Purged)
	for _, id := range []string{"deleted-done", "deleted-old"} {
		require.Zero(t, stored(id), id)
		require.Zero(t, streamed(id), id)
		require.False(t, exists(schema.CollRuns, id), "%s: the settled run's record is deleted (issue 30)", id)
	}
	require.False(t, exists(schema.CollRunBindings, "deleted-done"))
	require.False(t, exists(schema.CollContextSnapshots, "snap-deleted-done"))
	require.True(t, exists(schema.CollRuns, "deleted-live"), "still going: its record stays")
	require.True(t, exists(schema.CollRuns, "kept"))
	require.Equal(t, 2, stored("deleted-live"), "still going: its events stay until it settles")
	require.EqualValues(t, 2, streamed("deleted-live"))
	require.Equal(t, 3, stored("kept"))
	require.EqualValues(t, 3, streamed("kept"))
	left, err := e.rdb.ZRange(ctx, queue.PurgeRunsKey, 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"deleted-live"}, left)

	// deleted-live settles (its cancellation lands): the next sweeps purge it.
	run, err := schema.For[schema.Run](e.store, schema.CollRuns).Get(ctx, "deleted-live")
	require.NoError(t, err)
	l, err := eventlog.Open(ctx, e.rdb, e.store, run, eventlog.NewToken())
	require.NoError(t, err)
	l.SetStatus(schema.RunCancelled)
	_, err = l.Emit(ctx, queue.RunEndData{Type: queue.EventRunCancelled, Status: string(schema.RunCancelled)}, true)
	require.NoError(t, err)
	require.NoError(t, l.Flush(ctx))
	l.Release(ctx)
	schematest.SetRunStatus(t, e.store, "deleted-live", schema.RunCancelled, map[string]any{"lastSequence": l.Last(),
		"finishedAt": time.Now().UTC().Format(time.RFC3339Nano)})
	sw, err = x.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, sw.Purged)
	require.Zero(t, stored("deleted-live"))
	require.Zero(t, streamed("deleted-live"))
	require.False(t, exists(schema.CollRuns, "deleted-live"))
	n, err := e.rdb.Exists(ctx, queue.PurgeRunsKey).Result()
	require.NoError(t, err)
	require.Zero(t, n, "every purge done")
}

// TestForgottenUsersHomesGoFromEveryHost: each sweep hands every forgotten user
// (queue.PurgeHomesKey) with the time of the forget to ForgetHome, on every agent (the
// entries stay for the other hosts), and drops the entries past HomesPurgeKeep.
func TestForgottenUsersHomesGoFromEveryHost(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	now := time.Now()
	old := now.Add(-outbox.HomesPurgeKeep - time.Hour)
	for id, at := range map[string]time.Time{"app1-gabe": now, "app1-old": old} {
		require.NoError(t, e.rdb.ZAdd(ctx, queue.PurgeHomesKey, redis.Z{Score: float64(at.UnixMilli()), Member: id}).Err())
	}
	host := func() (*outbox.Expirer, map[string]time.Time) {
		got := map[string]time.Time{}
		x := e.expirer(time.Hour)
		x.ForgetHome = func(_ context.Context, owner string, at time.Time) error { got[owner] = at; return nil }
		return x, got
	}
	for range 2 { // two GPU hosts, each with its own homes
		x, got := host()
		sw, err := x.Once(ctx)
		require.NoError(t, err)
		require.Equal(t, 1, sw.Homes)
		require.Equal(t, map[string]time.Time{"app1-gabe": time.UnixMilli(now.UnixMilli())}, got)
	}
	left, err := e.rdb.ZRange(ctx, queue.PurgeHomesKey, 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{"app1-gabe"}, left, "kept for the other hosts; the expired entry went")

	x, _ := host()
	x.ForgetHome = func(context.Context, string, time.Time) error { return errors.New("disk full") }
	_, err = x.Once(ctx)
	require.ErrorContains(t, err, "disk full", "a failed forget fails the sweep (the next one tries again)")
}
