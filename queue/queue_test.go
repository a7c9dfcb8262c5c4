package queue_test

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"privateassistant/queue"
	"privateassistant/queue/redistest"
)

// TestMain fails the package when a goroutine outlives the tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestBuildDecodeRoundTrip(t *testing.T) {
	t.Parallel()
	p := queue.RunTask{RunID: "r1", OwnerID: "u1", ConversationID: "c1", Role: "chat"}
	task, err := queue.Build(p)
	require.NoError(t, err)
	require.Equal(t, "pa:run", task.Type())
	got, err := queue.Decode[queue.RunTask](task)
	require.NoError(t, err)
	p.V = queue.RunTaskVersion // Build stamps the version
	require.Equal(t, p, got)

	_, err = queue.Build(queue.RunTask{RunID: "r1"})
	require.Error(t, err)
	_, err = queue.Decode[queue.RunTask](asynq.NewTask("other", nil))
	require.ErrorContains(t, err, "is not")
	require.ErrorIs(t, err, asynq.SkipRetry)
	// Unknown fields are ignored: a newer producer's additions never fail an older agent.
	got, err = queue.Decode[queue.RunTask](asynq.NewTask(queue.TypeRun, []byte(`{"runId":"r","ownerId":"o","conversationId":"c","extra":1}`)))
	require.NoError(t, err)
	require.Equal(t, "r", got.RunID)
}

// fixture reads a committed golden payload. Never edit one: add a file per version.
func fixture(t *testing.T, name string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", "run_task", name))
	require.NoError(t, err)
	return bytes.TrimSpace(b)
}

// TestRunTaskGoldenFixtures: every payload version ever produced still decodes (N−1 is
// the payload as written before versioning, byte for byte; N carries "v" and a field
// this code does not know), a newer major is retryable rather than archived, and what
// Build writes today is N without its unknown field.
func TestRunTaskGoldenFixtures(t *testing.T) {
	t.Parallel()
	want := queue.RunTask{RunID: "run-golden-0001", OwnerID: "owner-golden", ConversationID: "conv-golden", Role: "chat"}
	for name, v := range map[string]int{"v1-unversioned.json": 0, "v1.json": 1} {
		got, err := queue.Decode[queue.RunTask](asynq.NewTask(queue.TypeRun, fixture(t, name)))
		require.NoError(t, err, name)
		w := want
		w.V = v
		require.Equal(t, w, got, name)
	}

	_, err := queue.Decode[queue.RunTask](asynq.NewTask(queue.TypeRun, fixture(t, "v2-future.json")))
	require.ErrorIs(t, err, queue.ErrNewerVersion)
	require.NotErrorIs(t, err, asynq.SkipRetry, "a newer major is retried later, never archived")
	require.NotErrorIs(t, err, queue.ErrMalformed)

	for _, bad := range []string{`{`, `{"runId":"r"}`, `{"v":"1","runId":"r","ownerId":"o","conversationId":"c"}`, `{"v":-1,"runId":"r","ownerId":"o","conversationId":"c"}`} {
		_, err := queue.Decode[queue.RunTask](asynq.NewTask(queue.TypeRun, []byte(bad)))
		require.ErrorIs(t, err, queue.ErrMalformed, bad)
		require.ErrorIs(t, err, asynq.SkipRetry, bad)
	}

	// Attachments (issue 17) are a minor addition: this code reads them, and an agent
	// from before them (its RunTask without the field) reads the same bytes as before.
	got, err := queue.Decode[queue.RunTask](asynq.NewTask(queue.TypeRun, fixture(t, "v1-attachments.json")))
	require.NoError(t, err)
	w := want
	w.V, w.Attachments = 1, []string{"f-golden-1", "f-golden-2"}
	require.Equal(t, w, got)
	old, err := queue.Decode[runTaskBeforeAttachments](asynq.NewTask(queue.TypeRun, fixture(t, "v1-attachments.json")))
	require.NoError(t, err)
	require.Equal(t, runTaskBeforeAttachments{V: 1, RunID: want.RunID, OwnerID: want.OwnerID, ConversationID: want.ConversationID, Role: "chat"}, old)
	built, err := queue.Build(w)
	require.NoError(t, err)
	require.JSONEq(t, string(fixture(t, "v1-attachments.json")), string(built.Payload()))
	_, err = queue.Decode[queue.RunTask](asynq.NewTask(queue.TypeRun, []byte(`{"v":1,"runId":"r","ownerId":"o","conversationId":"c","attachments":["../x"]}`)))
	require.ErrorIs(t, err, queue.ErrMalformed, "an attachment id is an id")

	// Build writes N: the fixture minus the field this version does not know.
	task, err := queue.Build(want)
	require.NoError(t, err)
	var builtN, n map[string]any
	require.NoError(t, json.Unmarshal(task.Payload(), &builtN))
	require.NoError(t, json.Unmarshal(fixture(t, "v1.json"), &n))
	delete(n, "priority")
	require.Equal(t, n, builtN)
}

// runTaskBeforeAttachments is queue.RunTask as an agent from before issue 17 has it (N−1).
type runTaskBeforeAttachments struct {
	V              int    `json:"v"`
	RunID          string `json:"runId"`
	OwnerID        string `json:"ownerId"`
	ConversationID string `json:"conversationId"`
	Role           string `json:"role"`
}

func (runTaskBeforeAttachments) TaskType() string { return queue.TypeRun }
func (p runTaskBeforeAttachments) Validate() error {
	return queue.RunTask{V: p.V, RunID: p.RunID, OwnerID: p.OwnerID, ConversationID: p.ConversationID, Role: p.Role}.Validate()
}

func TestEnqueueIsIdempotentWithExplicitOptions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := redistest.Start(t)
	opt := asynq.RedisClientOpt{Addr: r.Addr}
	c := asynq.NewClient(opt)
	defer c.Close()
	e := queue.NewEnqueuer(c)
	p := queue.RunTask{RunID: "run1", OwnerID: "u", ConversationID: "c", Role: "research"}
	var wg sync.WaitGroup
	var mu sync.Mutex
	created := 0
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ok, err := e.EnqueueRunNew(ctx, queue.DeviceQueue("xtx"), p)
			assert.NoError(t, err)
			mu.Lock()
			defer mu.Unlock()
			if ok {
				created++
			}
		}()
	}
	wg.Wait()
	require.Equal(t, 1, created, "one call created the task; the others found it")
	insp := asynq.NewInspector(opt)
	defer insp.Close()
	info, err := insp.GetQueueInfo("gpu:xtx")
	require.NoError(t, err)
	require.Equal(t, 1, info.Pending, "twenty enqueues, one task")
	ti, err := insp.GetTaskInfo("gpu:xtx", "run1")
	require.NoError(t, err)
	require.Equal(t, 3, ti.MaxRetry)
	require.Equal(t, 12*time.Hour, ti.Timeout)
	require.Equal(t, 7*24*time.Hour, ti.Retention)

	chat := queue.RunTask{RunID: "run2", OwnerID: "u", ConversationID: "c", Role: "chat"}
	require.NoError(t, e.EnqueueRun(ctx, queue.DeviceQueue("arc"), chat))
	ti, err = insp.GetTaskInfo("gpu:arc", "run2")
	require.NoError(t, err)
	require.Equal(t, 30*time.Minute, ti.Timeout)
}

func TestEventStreamAppendReadWait(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := redistest.Start(t)
	rdb := r.Client()
	defer rdb.Close()
	ev := func(n int64, typ string) queue.Event {
		return queue.Event{Sequence: n, Type: typ, Data: json.RawMessage(`{"n":1}`), At: time.Now().UTC()}
	}
	for i := int64(1); i <= 5; i++ {
		require.NoError(t, queue.AppendEvent(ctx, rdb, "r1", ev(i, queue.EventMessageDelta)))
	}
	require.ErrorIs(t, queue.AppendEvent(ctx, rdb, "r1", ev(3, queue.EventMessageDelta)), queue.ErrDuplicateEvent)
	require.ErrorIs(t, queue.AppendEvent(ctx, rdb, "r1", ev(5, queue.EventMessageDelta)), queue.ErrDuplicateEvent)
	require.Error(t, queue.AppendEvent(ctx, rdb, "r1", ev(0, queue.EventMessageDelta)))

	got, first, err := queue.ReadEvents(ctx, rdb, "r1", 2, 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), first)
	require.Len(t, got, 3)
	require.Equal(t, int64(3), got[0].Sequence)
	got, _, err = queue.ReadEvents(ctx, rdb, "r1", 0, 2)
	require.NoError(t, err)
	require.Len(t, got, 2)

	// Trimmed streams report where they start now.
	require.NoError(t, rdb.XTrimMinID(ctx, queue.EventsKey("r1"), "4-0").Err())
	_, first, err = queue.ReadEvents(ctx, rdb, "r1", 0, 0)
	require.NoError(t, err)
	require.Equal(t, int64(4), first)

	// WaitEvents wakes on an append.
	done := make(chan []queue.Event, 1)
	go func() {
		evs, err := queue.WaitEvents(ctx, rdb, "r1", 5, 5*time.Second)
		require.NoError(t, err)
		done <- evs
	}()
	time.Sleep(50 * time.Millisecond) // let XREAD block first; the assertion does not depend on it
	require.NoError(t, queue.AppendEvent(ctx, rdb, "r1", ev(6, queue.EventRunCompleted)))
	select {
	case evs := <-done:
		require.Len(t, evs, 1)
		require.Equal(t, int64(6), evs[0].Sequence)
		require.True(t, queue.IsTerminalEvent(evs[0].Type))
	case <-time.After(5 * time.Second):
		t.Fatal("WaitEvents did not wake")
	}
	evs, err := queue.WaitEvents(ctx, rdb, "r1", 6, 20*time.Millisecond)
	require.NoError(t, err)
	require.Empty(t, evs)
}

func TestControlStreamAndState(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	r := redistest.Start(t)
	rdb := r.Client()
	defer rdb.Close()
	require.NoError(t, queue.SendControl(ctx, rdb, "r1", queue.Control{Type: queue.ControlApproval, RequestID: "a1", Choice: "once", By: "u"}))
	require.NoError(t, queue.SendControl(ctx, rdb, "r1", queue.Control{Type: queue.ControlCancel}))
	cs, last, err := queue.ReadControl(ctx, rdb, "r1", "0", time.Millisecond)
	require.NoError(t, err)
	require.Len(t, cs, 2)
	require.Equal(t, "a1", cs[0].RequestID)
	cs, last2, err := queue.ReadControl(ctx, rdb, "r1", last, 10*time.Millisecond)
	require.NoError(t, err)
	require.Empty(t, cs)
	require.Equal(t, last, last2)

	_, ok, err := queue.GetRunState(ctx, rdb, "r1")
	require.NoError(t, err)
	require.False(t, ok)
	hb := time.Now().UTC().Truncate(time.Millisecond)
	require.NoError(t, queue.SetRunState(ctx, rdb, "r1", queue.RunState{Status: "running", HeartbeatAt: hb}))
	st, ok, err := queue.GetRunState(ctx, rdb, "r1")
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, "running", st.Status)
	require.False(t, st.Terminal)
	require.True(t, hb.Equal(st.HeartbeatAt))
}
