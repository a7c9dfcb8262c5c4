package daemon_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"privateassistant/agent/daemon"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// TestShutdownLeavesNoGoroutines starts an agent, runs work to completion, aborts a run
// in flight with the two-stage shutdown, and checks that no goroutine the agent started
// is left, then (after the test's doubles stop) that nothing at all is. Not parallel:
// goleak compares against the goroutines present when it starts.
func TestShutdownLeavesNoGoroutines(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { // registered first, so it runs after every other cleanup
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		goleak.VerifyNone(t, before)
	})
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.Model.SetScript("#steady", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 120)), TokenDelay: 20 * time.Millisecond}}})
	_, jwt := env.SignUp(t, "leak@example.com", "password-leak")
	conv := env.Conversation(t, jwt)
	envOnly := goleak.IgnoreCurrent() // the doubles' goroutines, before the agent exists

	a := env.StartAgent(t)
	done := env.Admit(t, jwt, conv, "l1", "hello", "")
	_, status := env.Follow(t, jwt, done.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	settledRun(t, env, done.RunID)

	inflight := env.Admit(t, jwt, conv, "l2", "go #steady", "research")
	env.Follow(t, jwt, inflight.RunID, 30*time.Second, func(ev queue.Event) bool { return ev.Type != queue.EventMessageDelta })
	require.True(t, a.Busy())
	a.StopIntake()
	require.True(t, a.Busy(), "stage one lets the run go on")
	start := time.Now()
	a.Shutdown()
	took := time.Since(start)
	require.False(t, a.Busy())
	a.Shutdown() // idempotent
	t.Logf("shutdown with a run in flight took %s", took)
	// The run had over two seconds to go: the abort cancels it at once instead of waiting
	// (up to asynq's 5 s ShutdownTimeout) for it to end.
	require.Less(t, took, time.Second, "the abort does not wait for the run")

	// Everything the agent started is gone. The Hermes double goes on with the aborted
	// native run (as real Hermes would) until it ends, so poll, bounded; the doubles'
	// server-side handlers of closed connections end on their own (the final check, after
	// cleanup, covers them).
	var leak error
	for deadline := time.Now().Add(15 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		// The functions' own Appwrite connections (an admission writes two documents at
		// once) are the environment's, not the agent's.
		env.Svc.CloseIdleConnections()
		if leak = goleak.Find(envOnly, goleak.IgnoreAnyFunction("net/http.(*conn).serve")); leak == nil || time.Now().After(deadline) {
			break
		}
	}
	require.NoError(t, leak, "goroutines left after Shutdown")

	// The aborted task went back to asynq without using its retry budget.
	insp := asynq.NewInspectorFromRedisClient(env.Redis.Client())
	ti, err := insp.GetTaskInfo(queue.DeviceQueue("xtx"), inflight.RunID)
	require.NoError(t, err)
	require.Zero(t, ti.Retried, "an aborted handler is not a failure")
}

// TestRollingUpgradePayloads enqueues the committed golden payloads byte for byte (ids
// replaced by admitted runs'): the payload as written before versioning (N−1) and the
// current version with a field this agent does not know (N), and N with the optional
// attachments (issue 17; the agent acts on the message record's) all run to completion; a
// major version newer than this agent is offered again later, never archived (so its
// TaskID never blocks the outbox).
func TestRollingUpgradePayloads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := stacktest.New(t)
	owner, jwt := env.SignUp(t, "upgrade@example.com", "password-upgrade")
	conv := env.Conversation(t, jwt)
	rdb := env.Redis.Client()
	defer rdb.Close()
	insp := asynq.NewInspectorFromRedisClient(rdb)
	client := asynq.NewClientFromRedisClient(rdb)
	q := queue.DeviceQueue("arc")

	runs := map[string]string{} // fixture → run id
	for _, name := range []string{"v1-unversioned.json", "v1.json", "v1-attachments.json", "v2-future.json"} {
		r := env.Admit(t, jwt, conv, "up-"+name, "hello from "+name, "")
		require.NoError(t, insp.DeleteTask(q, r.RunID)) // replace admission's task by the fixture's bytes
		raw, err := os.ReadFile(filepath.Join("..", "..", "queue", "testdata", "run_task", name))
		require.NoError(t, err)
		raw = bytes.TrimSpace(raw)
		raw = bytes.ReplaceAll(raw, []byte(`"run-golden-0001"`), []byte(`"`+r.RunID+`"`))
		raw = bytes.ReplaceAll(raw, []byte(`"owner-golden"`), []byte(`"`+owner+`"`))
		raw = bytes.ReplaceAll(raw, []byte(`"conv-golden"`), []byte(`"`+conv+`"`))
		o := queue.RunOptions("chat")
		_, err = client.EnqueueContext(ctx, asynq.NewTask(queue.TypeRun, raw), asynq.TaskID(r.RunID), asynq.Queue(q),
			asynq.Timeout(o.Timeout), asynq.MaxRetry(o.MaxRetry), asynq.Retention(o.Retention))
		require.NoError(t, err)
		runs[name] = r.RunID
	}

	env.StartAgent(t)
	for _, name := range []string{"v1-unversioned.json", "v1.json", "v1-attachments.json"} {
		_, status := env.Follow(t, jwt, runs[name], 30*time.Second, nil)
		require.Equal(t, "completed", status, name)
		require.Len(t, answers(t, env, owner, runs[name]), 1, name)
	}

	future := runs["v2-future.json"]
	var ti *asynq.TaskInfo
	require.Eventually(t, func() bool {
		var err error
		ti, err = insp.GetTaskInfo(q, future)
		return err == nil && ti.State == asynq.TaskStateRetry
	}, 10*time.Second, 20*time.Millisecond, "a newer major goes back to the queue")
	require.Contains(t, ti.LastErr, "newer")
	require.Zero(t, ti.Retried, "not counted against the retry budget, so never archived")
	require.Equal(t, schema.RunQueued, runRecord(t, env, future).Status, "the run waits for an agent that can run it")
}

// TestStartFailureThenShutdown: a Start that fails half way (the ops port is taken, after
// the asynq servers, outbox and resumer have started) leaves nothing behind once the
// caller calls Shutdown, as main does; goleak in TestMain checks.
func TestStartFailureThenShutdown(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	a, err := daemon.New(daemon.Settings{AppwriteEndpoint: "http://127.0.0.1:1/v1", AppwriteProject: "p", AppwriteKey: "k",
		RedisAddr: rs.Addr, AgentID: "fail-start", Devices: "arc:1", ChatDevice: "arc", OpsAddr: taken.Addr().String(),
		LeaseTTL: 3 * time.Second, Heartbeat: time.Second, ResumeEvery: time.Hour, OutboxEvery: time.Hour, HTTPTimeout: time.Second},
		slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	require.Error(t, a.Start(context.Background()), "the ops address is in use")
	done := make(chan struct{})
	go func() { a.Shutdown(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("Shutdown after a failed Start did not return")
	}
}
