package executor_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/hermes/hermestest"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// yieldAcquirer is a GPU manager whose first grant is asked to yield when the test
// closes yield; the second acquisition waits until the test closes regrant.
type yieldAcquirer struct {
	mu       sync.Mutex
	calls    int
	yield    chan struct{}
	regrant  chan struct{}
	released int
}

func (y *yieldAcquirer) Manages(string) bool { return true }

func (y *yieldAcquirer) AcquireRun(context.Context, string, string, string, func(int, string)) (func(), <-chan struct{}, error) {
	panic("the executor asks a YieldingAcquirer for its yield")
}

func (y *yieldAcquirer) AcquireRunYield(ctx context.Context, _, _, _ string, _ func(int, string)) (func(), <-chan struct{}, <-chan struct{}, error) {
	y.mu.Lock()
	y.calls++
	n := y.calls
	y.mu.Unlock()
	release := func() { y.mu.Lock(); y.released++; y.mu.Unlock() }
	if n == 1 {
		return release, nil, y.yield, nil
	}
	select {
	case <-y.regrant:
	case <-ctx.Done():
		return nil, nil, nil, ctx.Err()
	}
	return release, nil, make(chan struct{}), nil
}

// recordingHarness records the submissions and what they attached to.
type recordingHarness struct {
	harness.Harness
	mu       sync.Mutex
	subs     []harness.Submission
	attached []harness.Attached
}

func (r *recordingHarness) Submit(ctx context.Context, s harness.Submission) (harness.Attached, error) {
	a, err := r.Harness.Submit(ctx, s)
	r.mu.Lock()
	defer r.mu.Unlock()
	r.subs, r.attached = append(r.subs, s), append(r.attached, a)
	return a, err
}

// lateTokens makes the first native stream deliver one more delta ("late ") just before
// its cancelled terminal, as Hermes does with a token in flight when a stop lands.
type lateTokens struct {
	*recordingHarness
	once sync.Once
}

func (l *lateTokens) Stream(ctx context.Context, nativeRunID string, after int64) (harness.Stream, error) {
	st, err := l.recordingHarness.Stream(ctx, nativeRunID, after)
	if err != nil {
		return st, err
	}
	first := false
	l.once.Do(func() { first = true })
	if !first {
		return st, nil
	}
	return &lateStream{Stream: st}, nil
}

type lateStream struct {
	harness.Stream
	held *harness.Event
}

func (s *lateStream) Next() (harness.Event, error) {
	if s.held != nil {
		ev := *s.held
		s.held = nil
		return ev, nil
	}
	ev, err := s.Stream.Next()
	if err == nil && ev.Kind == harness.KindCancelled {
		s.held = &ev
		return harness.Event{Kind: harness.KindDelta, Text: "late ", Seq: -1}, nil
	}
	return ev, err
}

// A preemptible holder asked to yield mid-stream pauses at a turn boundary: it shows
// "paused for …" while it waits for the device again, then goes on in the same native
// session with the handoff (key "<run>:p1"); the answer is the text before the pause
// plus the text after it, one final message, no message.reset, and the stopped native
// run's cancellation does not end the run.
func TestYieldPausesAndResumesInTheSameSession(t *testing.T) {
	s := setupHermes(t, hermestest.Options{})
	s.model.SetScript("#pausable", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: strings.Fields(strings.Repeat("part-one ", 100)), TokenDelay: 20 * time.Millisecond}}})
	s.model.SetScript("You were paused", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{" and", " part", " two."}}}})
	rec := &recordingHarness{Harness: &harness.Hermes{Client: s.client}}
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return &lateTokens{recordingHarness: rec}, nil }
	acq := &yieldAcquirer{yield: make(chan struct{}), regrant: make(chan struct{})}
	s.exec.GPU = acq

	id := s.newRunSaying(t, "write at length #pausable")
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(ctx, id) }()
	require.Eventually(t, func() bool {
		evs, _, _ := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
		for _, e := range evs {
			if e.Type == queue.EventMessageDelta {
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "the answer starts streaming")
	close(acq.yield)

	require.Eventually(t, func() bool {
		r := s.record(t, id)
		return r.Status == schema.RunWaitingForResource && r.QueueReason != nil && strings.Contains(*r.QueueReason, "paused for")
	}, 20*time.Second, 10*time.Millisecond, "the run shows it is paused while it waits for the device")
	require.Eventually(t, func() bool {
		acq.mu.Lock()
		defer acq.mu.Unlock()
		return acq.released == 1
	}, 5*time.Second, 5*time.Millisecond, "the device was given back")
	// What was published before the pause.
	evs, _, err := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
	require.NoError(t, err)
	var before strings.Builder
	for _, e := range evs {
		require.False(t, queue.IsTerminalEvent(e.Type), "the stopped native run did not end the run")
		if e.Type == queue.EventMessageDelta {
			var d queue.MessageDeltaData
			require.NoError(t, jsonUnmarshal(e.Data, &d))
			before.WriteString(d.Text)
		}
	}
	require.Contains(t, before.String(), "part-one")
	require.NotContains(t, before.String(), "two", "paused before the end of the first turn")
	require.True(t, strings.HasSuffix(before.String(), "late "), "a token that arrived after the stop is published before the pause: %q", before.String())

	close(acq.regrant)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the paused run did not finish")
	}

	evs = s.requireLog(t, id) // one terminal, last; the stored answer is the streamed text
	require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
	for _, e := range evs {
		require.NotEqual(t, queue.EventMessageReset, e.Type, "the text before the pause stays")
	}
	r := s.record(t, id)
	require.Equal(t, schema.RunCompleted, r.Status)
	require.NotNil(t, r.AssistantMessageID)
	m, err := schema.For[schema.Message](s.store, schema.CollMessages).Get(ctx, *r.AssistantMessageID)
	require.NoError(t, err)
	require.Equal(t, before.String()+" and part two.", *m.Text, "the answer is the text before the pause plus the text after")
	answers, err := schema.For[schema.Message](s.store, schema.CollMessages).All(ctx, schema.ListQuery{Owner: owner,
		Filters: []string{query.Equal("conversationId", r.ConversationID), query.Equal("role", "assistant")}, Limit: 10})
	require.NoError(t, err)
	require.Len(t, answers, 1, "exactly one final message")

	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.subs, 2)
	require.Equal(t, id, rec.subs[0].Key)
	require.Equal(t, id+":p1", rec.subs[1].Key)
	require.Equal(t, id, rec.subs[1].Run, "the model calls still name the run")
	require.Equal(t, executor.Handoff, rec.subs[1].Input)
	require.Equal(t, rec.attached[0].SessionID, rec.subs[1].SessionID, "the same native session")
	require.Equal(t, rec.attached[0].SessionID, rec.attached[1].SessionID)
	require.NotEqual(t, rec.attached[0].NativeRunID, rec.attached[1].NativeRunID)
}

// An attempt that ends while the paused run waits for the device (a shutdown) leaves the
// pause recorded: the next attempt submits the handoff to the same session ("<run>:p1",
// not the first turn again) and the answer still starts with the text published before.
func TestPausedRunResumesAfterARestart(t *testing.T) {
	s := setupHermes(t, hermestest.Options{})
	s.model.SetScript("#pausable", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: strings.Fields(strings.Repeat("part-one ", 100)), TokenDelay: 20 * time.Millisecond}}})
	s.model.SetScript("You were paused", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{" and", " part", " two."}}}})
	rec := &recordingHarness{Harness: &harness.Hermes{Client: s.client}}
	// A token arrives after the stop: it is published before the run shows it is paused.
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return &lateTokens{recordingHarness: rec}, nil }
	acq := &yieldAcquirer{yield: make(chan struct{}), regrant: make(chan struct{})}
	s.exec.GPU = acq

	id := s.newRunSaying(t, "write at length #pausable")
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(ctx, id) }()
	require.Eventually(t, func() bool {
		evs, _, _ := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
		return len(evs) > 2
	}, 20*time.Second, 5*time.Millisecond)
	close(acq.yield)
	require.Eventually(t, func() bool {
		r := s.record(t, id)
		return r.Status == schema.RunWaitingForResource && r.QueueReason != nil && strings.Contains(*r.QueueReason, "paused for")
	}, 20*time.Second, 10*time.Millisecond)
	stop() // the agent shuts down while the run waits for the device
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the attempt did not end")
	}
	require.False(t, s.record(t, id).Status.Terminal())

	s.exec.GPU = &yieldAcquirer{yield: make(chan struct{})} // granted at once, never asked to yield
	require.NoError(t, s.exec.Execute(context.Background(), id))
	evs := s.requireLog(t, id)
	require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
	var before strings.Builder // the deltas published before the pause
	paused := false
	for _, e := range evs {
		require.NotEqual(t, queue.EventMessageReset, e.Type)
		if e.Type == queue.EventRunStatus && strings.Contains(string(e.Data), "paused for") {
			paused = true
		}
		if e.Type == queue.EventMessageDelta && !paused {
			var d queue.MessageDeltaData
			require.NoError(t, jsonUnmarshal(e.Data, &d))
			before.WriteString(d.Text)
		}
	}
	require.True(t, paused)
	require.Contains(t, before.String(), "part-one")
	require.True(t, strings.HasSuffix(before.String(), "late "), "the token that arrived after the stop is published before the pause: %q", before.String())
	r := s.record(t, id)
	m, err := schema.For[schema.Message](s.store, schema.CollMessages).Get(context.Background(), *r.AssistantMessageID)
	require.NoError(t, err)
	require.Equal(t, before.String()+" and part two.", *m.Text)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.subs, 2, "the first turn is not submitted again")
	require.Equal(t, id+":p1", rec.subs[1].Key)
	require.Equal(t, executor.Handoff, rec.subs[1].Input)
	require.Equal(t, rec.attached[0].SessionID, rec.subs[1].SessionID)
}
