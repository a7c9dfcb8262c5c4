package executor_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

func TestRunCompletes(t *testing.T) {
	fake := newFake(func(string) []harness.Event {
		return append([]harness.Event{{Kind: harness.KindToolStarted, Tool: "t"}, {Kind: harness.KindToolCompleted, Tool: "t"}}, deltas("a", "b", "c")...)
	}, 0)
	s := setup(t, fake)
	id := s.newRun(t)
	require.NoError(t, s.exec.Execute(context.Background(), id))
	evs := s.requireLog(t, id)
	require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
	rec := s.record(t, id)
	require.Equal(t, schema.RunCompleted, rec.Status)
	require.NotNil(t, rec.AssistantMessageID)
	types := map[string]int{}
	for _, ev := range evs {
		types[ev.Type]++
	}
	require.Equal(t, 1, types[queue.EventToolStarted])
	require.Equal(t, 1, types[queue.EventToolCompleted])
	require.GreaterOrEqual(t, types[queue.EventRunStatus], 2) // starting, thinking
}

// The heartbeat beats every millisecond while the loop writes phases (tool events) and
// deltas: the old heartbeat goroutine patched the record and flushed the log itself,
// racing the loop on attempt.patchQ (a map) and on the log's queue heads.
func TestHeartbeatDuringWrites(t *testing.T) {
	fake := newFake(func(string) []harness.Event {
		var evs []harness.Event
		for i := 0; i < 20; i++ {
			evs = append(evs, harness.Event{Kind: harness.KindToolStarted, Tool: "t"}, harness.Event{Kind: harness.KindDelta, Text: "x"},
				harness.Event{Kind: harness.KindToolCompleted, Tool: "t"})
		}
		return append(evs, harness.Event{Kind: harness.KindCompleted, Text: "xxxxxxxxxxxxxxxxxxxx"})
	}, 200*time.Microsecond)
	s := setup(t, fake)
	id := s.newRun(t)
	require.NoError(t, s.exec.Execute(context.Background(), id))
	s.requireLog(t, id)
	require.Equal(t, schema.RunCompleted, s.record(t, id).Status)
}

func cancelRun(t testing.TB, s *suite, id string) {
	t.Helper()
	require.NoError(t, s.requestCancel(id))
}

// requestCancel does what control does for a run that is executing: the record first,
// then the command.
func (s *suite) requestCancel(id string) error {
	ctx := context.Background()
	if _, err := schema.For[schema.Run](s.store, schema.CollRuns).Update(ctx, id, map[string]any{"cancelRequested": true}); err != nil {
		return err
	}
	return queue.SendControl(ctx, s.rdb, id, queue.Control{Type: queue.ControlCancel, By: owner})
}

func TestCancelMidStream(t *testing.T) {
	parts := make([]string, 500)
	for i := range parts {
		parts[i] = "x"
	}
	fake := newFake(func(string) []harness.Event { return deltas(parts...) }, time.Millisecond)
	s := setup(t, fake)
	id := s.newRun(t)
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(context.Background(), id) }()
	require.Eventually(t, func() bool {
		evs, _, _ := queue.ReadEvents(context.Background(), s.rdb, id, 0, 0)
		for _, ev := range evs {
			if ev.Type == queue.EventMessageDelta {
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond)
	cancelRun(t, s, id)
	require.NoError(t, <-done)
	evs := s.requireLog(t, id)
	require.Equal(t, queue.EventRunCancelled, evs[len(evs)-1].Type)
	require.Equal(t, schema.RunCancelled, s.record(t, id).Status)
}

// waitForDelta waits until the run's stream holds a delta.
func waitForDelta(t testing.TB, s *suite, id string) {
	t.Helper()
	require.Eventually(t, func() bool {
		evs, _, _ := queue.ReadEvents(context.Background(), s.rdb, id, 0, 0)
		for _, ev := range evs {
			if ev.Type == queue.EventMessageDelta {
				return true
			}
		}
		return false
	}, 10*time.Second, time.Millisecond)
}

// A newer owner claims the run (the fence in Redis, then one write of the record) while
// an attempt streams: the older attempt lands nothing after the claim, neither events nor
// record patches nor the answer, and stops with ErrFenced.
func TestFencedAttemptWritesNothingAfterTheClaim(t *testing.T) {
	parts := make([]string, 2000)
	for i := range parts {
		parts[i] = "x"
	}
	fake := newFake(func(string) []harness.Event { return deltas(parts...) }, 500*time.Microsecond)
	s := setup(t, fake)
	id := s.newRun(t)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(ctx, id) }()
	waitForDelta(t, s, id)

	run := s.record(t, id)
	newer, err := eventlog.Open(ctx, s.rdb, s.store, run, eventlog.NewToken())
	require.NoError(t, err)
	rec := runstate.Track(schema.For[schema.Run](s.store, schema.CollRuns), run, newer.Check)
	require.NoError(t, rec.Change(ctx, "", runstate.Patch{Phase: runstate.Set("claimed by a newer attempt")}))
	claimed := rec.Run().UpdatedAt

	require.ErrorIs(t, <-done, eventlog.ErrFenced)
	after := s.record(t, id)
	require.Equal(t, claimed, after.UpdatedAt, "no write of the older attempt landed after the claim")
	require.Equal(t, "claimed by a newer attempt", *after.Phase)
	require.Nil(t, after.AssistantMessageID)
	evs, _, err := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
	require.NoError(t, err)
	require.Equal(t, newer.Last(), int64(len(evs)), "the stream ends where the newer owner took over")
	_, err = schema.For[schema.Message](s.store, schema.CollMessages).Get(ctx, "a"+id[1:])
	require.ErrorIs(t, err, schema.ErrNotFound)
	newer.Release(ctx)
}

// A run settled elsewhere while it streams (control cancelling a run whose task it
// deleted, through the event log and the state machine): the attempt stops writing, asks
// the harness to stop, and the terminal record is never patched again.
func TestSettledElsewhereStaysSettled(t *testing.T) {
	parts := make([]string, 2000)
	for i := range parts {
		parts[i] = "x"
	}
	fake := newFake(func(string) []harness.Event { return deltas(parts...) }, 500*time.Microsecond)
	s := setup(t, fake)
	id := s.newRun(t)
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(ctx, id) }()
	waitForDelta(t, s, id)

	run := s.record(t, id)
	l, err := eventlog.Open(ctx, s.rdb, s.store, run, eventlog.NewToken())
	require.NoError(t, err)
	l.SetStatus(schema.RunCancelled)
	_, err = l.Emit(ctx, queue.RunEndData{Type: queue.EventRunCancelled, Status: "cancelled"}, true)
	require.NoError(t, err)
	rec := runstate.Track(schema.For[schema.Run](s.store, schema.CollRuns), run, l.Check)
	require.NoError(t, rec.Change(ctx, schema.RunCancelled, runstate.Patch{LastSequence: runstate.Set(l.Last()), Phase: runstate.Set("cancelled")}))
	settled := rec.Run().UpdatedAt

	err = <-done
	require.True(t, err == nil || errors.Is(err, eventlog.ErrFenced), "%v", err)
	after := s.record(t, id)
	require.Equal(t, schema.RunCancelled, after.Status)
	require.Equal(t, settled, after.UpdatedAt)
	s.requireLog(t, id)
	l.Release(ctx)
}

// A run whose cancel was requested before any native run existed settles as cancelled
// without touching the harness.
func TestCancelledBeforeItStarted(t *testing.T) {
	fake := newFake(func(string) []harness.Event { return deltas("never") }, 0)
	s := setup(t, fake)
	id := s.newRun(t)
	_, err := schema.For[schema.Run](s.store, schema.CollRuns).Update(context.Background(), id, map[string]any{"cancelRequested": true})
	require.NoError(t, err)
	require.NoError(t, s.exec.Execute(context.Background(), id))
	evs := s.requireLog(t, id)
	require.Len(t, evs, 1)
	require.Equal(t, queue.EventRunCancelled, evs[0].Type)
	require.Nil(t, fake.run("native-"+id))
	// A later attempt (asynq's retry, the resumer) finds it settled and writes nothing.
	before := s.record(t, id).UpdatedAt
	require.NoError(t, s.exec.Execute(context.Background(), id))
	require.Equal(t, before, s.record(t, id).UpdatedAt)
}

func TestTypedEventPayloads(t *testing.T) {
	fake := newFake(func(string) []harness.Event { return deltas("hi") }, 0)
	s := setup(t, fake)
	id := s.newRun(t)
	require.NoError(t, s.exec.Execute(context.Background(), id))
	evs := s.requireLog(t, id)
	var end queue.RunEndData
	require.NoError(t, jsonUnmarshal(evs[len(evs)-1].Data, &end))
	require.Equal(t, "completed", end.Status)
	require.Equal(t, "a"+id[1:], end.MessageID)
	require.NotNil(t, end.Usage)
	var st queue.RunStatusData
	require.NoError(t, jsonUnmarshal(evs[0].Data, &st))
	require.Equal(t, queue.EventRunStatus, evs[0].Type)
	require.Equal(t, "running", st.Status)
	require.Nil(t, st.QueueReason)
}

// A second executor takes a run over while the first still streams it: the first stopped
// renewing its lease (a paused process, a partition) and the lease lapsed. The second
// claims the run and re-attaches to the same native run; the first lands nothing after
// the claim and stops with ErrFenced; the log stays contiguous with one terminal event,
// in Redis and in Appwrite alike.
func TestSecondAttemptTakesOver(t *testing.T) {
	parts := make([]string, 2000)
	for i := range parts {
		parts[i] = "x"
	}
	fake := newFake(func(string) []harness.Event { return deltas(parts...) }, 300*time.Microsecond)
	s := setup(t, fake)
	id := s.newRun(t)
	ctx := context.Background()
	paused := s.newExecutor("agent-1")
	paused.HeartbeatEvery, paused.LeaseTTL = time.Hour, 50*time.Millisecond // never renews
	first := make(chan error, 1)
	go func() { first <- paused.Execute(ctx, id) }()
	waitForDelta(t, s, id)
	require.Eventually(t, func() bool {
		n, err := s.rdb.Exists(ctx, executor.LeaseKey(id)).Result()
		return err == nil && n == 0
	}, 5*time.Second, time.Millisecond, "the first executor's lease lapses")

	second := make(chan error, 1)
	go func() { second <- s.newExecutor("agent-2").Execute(ctx, id) }()
	require.ErrorIs(t, <-first, eventlog.ErrFenced)
	require.NoError(t, <-second)
	evs, _, err := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
	require.NoError(t, err)
	for i, ev := range evs {
		require.Equal(t, int64(i+1), ev.Sequence)
		require.Equal(t, i == len(evs)-1, queue.IsTerminalEvent(ev.Type))
	}
	require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
	rec := s.record(t, id)
	require.Equal(t, schema.RunCompleted, rec.Status)
	require.Equal(t, int64(len(evs)), *rec.LastSequence)
	stored, err := schema.For[schema.Event](s.store, schema.CollEvents).All(ctx, schema.ListQuery{Owner: owner,
		Filters: []string{`{"method":"equal","attribute":"runId","values":["` + id + `"]}`}, Limit: 100})
	require.NoError(t, err)
	require.Len(t, stored, len(evs))
}
