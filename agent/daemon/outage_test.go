package daemon_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"privateassistant/hermes"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// outageRun admits one Hermes run that streams for a few seconds and calls outage at its
// first delta; then every run invariant is checked (one native run, contiguous events in
// Redis and Appwrite, one terminal event, one answer).
func outageRun(t *testing.T, email string, outage func(env *stacktest.Env)) {
	t.Helper()
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.Model.SetScript("#steady", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 80)), TokenDelay: 30 * time.Millisecond}}})
	env.StartAgent(t)
	owner, jwt := env.SignUp(t, email, "password-outage")
	conv := env.Conversation(t, jwt)
	a := env.Admit(t, jwt, conv, "o1", "go #steady", "")
	hit := false
	env.Follow(t, jwt, a.RunID, 30*time.Second, func(ev queue.Event) bool {
		if ev.Type == queue.EventMessageDelta && !hit {
			hit = true
			outage(env)
			return false
		}
		return true
	})
	require.True(t, hit)
	checkExactlyOnce(t, env, owner, jwt, []string{a.RunID})
	rdb := env.Redis.Client()
	defer rdb.Close()
	// The task completes once its handler returns, which is after the terminal event a
	// follower sees (a loaded CI saw it still active right after): none is left queued.
	insp := asynq.NewInspectorFromRedisClient(rdb)
	var left int
	require.Eventually(t, func() bool {
		qi, err := insp.GetQueueInfo(queue.DeviceQueue("arc"))
		if err != nil {
			return true // no queue: nothing queued
		}
		left = qi.Pending + qi.Active + qi.Scheduled
		return left == 0
	}, 30*time.Second, 50*time.Millisecond, "no task left queued")
	require.Zero(t, left)
}

// TestOutageRedisRestartedFromAOF: Redis (appendonly, as deploy/redis.conf has it) is
// restarted mid-run and comes back from its AOF: the run completes exactly once.
func TestOutageRedisRestartedFromAOF(t *testing.T) {
	t.Parallel()
	outageRun(t, "aof@example.com", func(env *stacktest.Env) {
		ctx := context.Background()
		rdb := env.Redis.Client()
		defer rdb.Close()
		require.NoError(t, rdb.ConfigSet(ctx, "appendonly", "yes").Err())
		require.Eventually(t, func() bool { // the first AOF is written in the background
			s, err := rdb.Info(ctx, "persistence").Result()
			return err == nil && strings.Contains(s, "aof_enabled:1") && strings.Contains(s, "aof_rewrite_in_progress:0") &&
				!strings.Contains(s, "aof_rewrite_scheduled:1")
		}, 10*time.Second, 20*time.Millisecond)
		env.Redis.Restart(redistest.Options{AppendOnly: true})
		n, err := env.Redis.Client().Exists(ctx, "asynq:queues").Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), n, "Redis came back with its data")
	})
}

// TestOutageRedisWiped: Redis restarts empty mid-run (its data lost): the run is resumed
// from Appwrite (the resume scanner finds it running with no lease) and completes
// exactly once.
func TestOutageRedisWiped(t *testing.T) {
	t.Parallel()
	outageRun(t, "wiped@example.com", func(env *stacktest.Env) {
		env.Redis.Restart() // no AOF: everything is gone
	})
}

// runTask reads a run's asynq task (nil when there is none).
func runTask(t *testing.T, env *stacktest.Env, q, runID string) *asynq.TaskInfo {
	t.Helper()
	rdb := env.Redis.Client()
	defer rdb.Close()
	ti, err := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo(q, runID)
	if err != nil {
		return nil
	}
	return ti
}

// TestOutageCancelIsNotAnAsynqFailure: a user's cancel reaches a running handler through
// asynq's CancelProcessing, which makes asynq record the handler's context error at once.
// That used to count as a failure (a retry used, "context canceled" in asynqmon's failed
// count, archived after three cancels of retried runs); now the task's next delivery finds
// the run cancelled and completes, with no retry used and no failure counted.
func TestOutageCancelIsNotAnAsynqFailure(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.StartAgent(t)
	_, jwt := env.SignUp(t, "cancelfail@example.com", "password-cancel")
	conv := env.Conversation(t, jwt)
	a := env.Admit(t, jwt, conv, "c1", "tell a #long story", "")
	cancelled := false
	_, status := env.Follow(t, jwt, a.RunID, 60*time.Second, func(ev queue.Event) bool {
		if ev.Type == queue.EventMessageDelta && !cancelled {
			cancelled = true
			require.Equal(t, 202, env.Do(t, "POST", "/api/runs/"+a.RunID+"/cancel", jwt, nil).Status)
		}
		return true
	})
	require.Equal(t, "cancelled", status)
	q := queue.DeviceQueue("arc")
	require.Eventually(t, func() bool {
		ti := runTask(t, env, q, a.RunID)
		return ti != nil && ti.State == asynq.TaskStateCompleted
	}, 30*time.Second, 50*time.Millisecond, "the task completes")
	require.Zero(t, runTask(t, env, q, a.RunID).Retried, "a cancel uses no retry")
	rdb := env.Redis.Client()
	defer rdb.Close()
	qi, err := asynq.NewInspectorFromRedisClient(rdb).GetQueueInfo(q)
	require.NoError(t, err)
	require.Zero(t, qi.FailedTotal, "asynq counted no failure")
}

// TestOutageCancelDuringRetryStopsTheNativeRun: a run whose task waits for its next
// delivery (here handed back by an aborted shutdown) while its native run goes on is
// cancelled. Control used to delete the waiting task and settle the run as cancelled
// itself, leaving the native run running with nobody to stop it; now the next executor
// settles the cancel and stops the native run.
func TestOutageCancelDuringRetryStopsTheNativeRun(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.Model.SetScript("#steady", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 400)), TokenDelay: 30 * time.Millisecond}}})
	first := env.StartAgent(t)
	_, jwt := env.SignUp(t, "cancelretry@example.com", "password-cancel")
	conv := env.Conversation(t, jwt)
	a := env.Admit(t, jwt, conv, "r1", "go #steady", "")
	env.Follow(t, jwt, a.RunID, 30*time.Second, func(ev queue.Event) bool { return ev.Type != queue.EventMessageDelta })
	first.StopIntake()
	first.Shutdown() // abort: the task goes back to asynq, the native run goes on
	ti := runTask(t, env, queue.DeviceQueue("arc"), a.RunID)
	require.NotNil(t, ti)
	require.NotEqual(t, asynq.TaskStateActive, ti.State)

	res := env.Do(t, "POST", "/api/runs/"+a.RunID+"/cancel", jwt, nil)
	require.Equal(t, 202, res.Status)
	env.StartAgent(t)
	_, status := env.Follow(t, jwt, a.RunID, 60*time.Second, nil)
	require.Equal(t, "cancelled", status)

	b, err := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).Get(context.Background(), a.RunID)
	require.NoError(t, err)
	require.NotNil(t, b.NativeRunID)
	hc := &hermes.Client{BaseURL: env.HermesURL, APIKey: stacktest.HermesKey}
	require.Eventually(t, func() bool {
		st, err := hc.GetRun(context.Background(), *b.NativeRunID)
		return err == nil && st.Status == "cancelled"
	}, 15*time.Second, 50*time.Millisecond, "the native run was stopped")
	require.Equal(t, 1, env.Hermes.RunsCreated(), "one native run")
}
