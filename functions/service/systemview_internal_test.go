package service

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/queue/redistest"
)

// TestQueueViewsMatchTheInspector: the stream service's queue reader (plain read commands
// on asynq's keys, no scripts) answers what the function's asynq inspector answers —
// pending, running (a settled run's task not counted), scheduled, paused, the oldest
// pending task's age — so a change of asynq's key layout fails here.
func TestQueueViewsMatchTheInspector(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := redistest.Start(t)
	rdb := r.Client()
	defer rdb.Close()
	cl := asynq.NewClientFromRedisClient(rdb)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	defer insp.Close()
	enqueue := func(q, id string, opts ...asynq.Option) {
		_, err := cl.Enqueue(asynq.NewTask("run", []byte(`{}`)), append(opts, asynq.Queue(q), asynq.TaskID(id))...)
		require.NoError(t, err)
	}
	started, release := make(chan string, 1), make(chan struct{})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: r.Addr}, asynq.Config{Concurrency: 1,
		Queues: map[string]int{"gpu:arc": 1}, TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(ctx context.Context, t *asynq.Task) error {
		id, _ := asynq.GetTaskID(ctx)
		started <- id
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})))
	defer srv.Shutdown()
	defer close(release)
	enqueue("gpu:arc", "run-a1")
	var active string
	select {
	case active = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("worker never started")
	}
	enqueue("gpu:arc", "run-a2")
	time.Sleep(20 * time.Millisecond) // an age to compare
	enqueue("gpu:arc", "run-a3")
	enqueue("gpu:arc", "run-a4", asynq.ProcessIn(time.Hour))
	enqueue("gpu:xtx", "run-x1")
	enqueue("default", "run-d1") // not a device queue
	require.NoError(t, insp.PauseQueue("gpu:xtx"))

	compare := func(what string) []QueueView {
		t.Helper()
		want, err := SystemReader{RDB: rdb, Inspector: insp}.Queues(ctx)
		require.NoError(t, err)
		got, err := SystemReader{RDB: rdb}.Queues(ctx)
		require.NoError(t, err)
		require.Len(t, got, len(want))
		for i := range want {
			require.InDelta(t, want[i].LatencyMs, got[i].LatencyMs, 500, what)
			require.Positive(t, got[i].LatencyMs, what)
			want[i].LatencyMs, got[i].LatencyMs = 0, 0
		}
		require.Equal(t, want, got, what)
		return got
	}
	got := compare("a running task")
	require.Equal(t, []QueueView{{Name: "gpu:arc", Pending: 2, Active: 1, Scheduled: 1}, {Name: "gpu:xtx", Pending: 1, Paused: true}}, got)
	// A taken run waiting in the GPU manager for the device is waiting, one waiting for its
	// owner's approval holds nothing: the counts agree with the cards (issue 32 item 4).
	require.NoError(t, queue.SetRunState(ctx, rdb, active, queue.RunState{Status: "waiting_for_resource", HeartbeatAt: time.Now()}))
	got = compare("its run waits for the device")
	require.Equal(t, QueueView{Name: "gpu:arc", Pending: 2, Waiting: 1, Scheduled: 1}, got[0])
	require.NoError(t, queue.SetRunState(ctx, rdb, active, queue.RunState{Status: "waiting_for_approval", HeartbeatAt: time.Now()}))
	got = compare("its run waits for its owner")
	require.Equal(t, QueueView{Name: "gpu:arc", Pending: 2, Approval: 1, Scheduled: 1}, got[0])
	require.NoError(t, queue.SetRunState(ctx, rdb, active, queue.RunState{Status: "completed", Terminal: true, HeartbeatAt: time.Now()}))
	got = compare("its run settled")
	require.Equal(t, 0, got[0].Active)
}
