package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/queue"
)

// TestSystemActiveCountsOnlyRunningWork: a task asynq still lists as active whose run has
// settled is not "running" in /api/system (the panel showed "1 running" while idle).
func TestSystemActiveCountsOnlyRunningWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "sys@example.com", "password-sys1")
	conv := env.Conversation(t, jwt)
	started, release := make(chan struct{}), make(chan struct{})
	srv := asynq.NewServer(asynq.RedisClientOpt{Addr: env.Redis.Addr}, asynq.Config{Concurrency: 1,
		Queues: map[string]int{"gpu:arc": 1}, TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(ctx context.Context, _ *asynq.Task) error {
		close(started)
		select {
		case <-release:
		case <-ctx.Done():
		}
		return nil
	})))
	defer srv.Shutdown()
	defer close(release)
	a := admitOne(t, env, jwt, conv, "sys")
	select {
	case <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("worker never started")
	}
	active := func() int {
		res := env.Do(t, "GET", "/api/system", jwt, nil)
		require.Equal(t, 200, res.Status, string(res.Body))
		var body struct {
			Queues []struct {
				Name   string
				Active int
			}
		}
		res.JSON(t, &body)
		for _, q := range body.Queues {
			if q.Name == "gpu:arc" {
				return q.Active
			}
		}
		return -1
	}
	require.Equal(t, 1, active(), "claimed, no state yet: running")
	rdb := env.Redis.Client()
	defer rdb.Close()
	require.NoError(t, queue.SetRunState(ctx, rdb, a.RunID, queue.RunState{Status: "running", HeartbeatAt: time.Now()}))
	require.Equal(t, 1, active())
	require.NoError(t, queue.SetRunState(ctx, rdb, a.RunID, queue.RunState{Status: "completed", Terminal: true, HeartbeatAt: time.Now()}))
	require.Equal(t, 0, active(), "asynq still lists the task, but its run is over")
}
