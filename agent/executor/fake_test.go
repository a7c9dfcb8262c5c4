package executor_test

import (
	"context"
	"sync"
	"time"

	"privateassistant/agent/harness"
)

// fakeHarness is a scripted harness: each submission plays its script (a list of events,
// paced by delay) on the stream, Stop cancels what is left, and Submit is idempotent by the
// key like the real ones.
type fakeHarness struct {
	mu     sync.Mutex
	runs   map[string]*fakeRun // by native id
	script func(key string) []harness.Event
	delay  time.Duration // between events
	// retention is what the fake reports as a harness.Retainer (newFake: Hermes's 24 h).
	retention time.Duration
	submits   int
	subs      []harness.Submission // every submission, in order
	onSubmit  func()               // called as each submission arrives (nil: none)
}

var _ harness.Harness = (*fakeHarness)(nil)

type fakeRun struct {
	mu       sync.Mutex
	id       string
	script   []harness.Event
	next     int
	state    string // running, completed, cancelled, failed
	output   string
	stop     chan struct{}
	stopOnce sync.Once
	approved map[string]string
	// ended: a stream delivered the run's terminal event. As with the real Hermes
	// (contracts/hermes.md, "Buffering, replay, late and second subscribers": one consumer
	// per run, its queue deleted once that consumer finishes, a later GET …/events 404),
	// such a run can no longer be streamed: Stream answers harness.ErrNotAttachable.
	ended bool
}

func newFake(script func(key string) []harness.Event, delay time.Duration) *fakeHarness {
	return &fakeHarness{runs: map[string]*fakeRun{}, script: script, delay: delay, retention: 24 * time.Hour}
}

func (f *fakeHarness) Kind() harness.Kind { return harness.HermesKind }

func (f *fakeHarness) Ready(context.Context) (harness.Info, error) { return harness.Info{}, nil }

func (f *fakeHarness) Submit(_ context.Context, s harness.Submission) (harness.Attached, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.submits++
	f.subs = append(f.subs, s)
	if f.onSubmit != nil {
		f.onSubmit()
	}
	id := "native-" + s.Key
	if _, ok := f.runs[id]; ok {
		return harness.Attached{NativeRunID: id, SessionID: s.SessionID, Replayed: true}, nil
	}
	f.runs[id] = &fakeRun{id: id, script: f.script(s.Key), state: "running", stop: make(chan struct{}), approved: map[string]string{}}
	return harness.Attached{NativeRunID: id, SessionID: s.SessionID}, nil
}

func (f *fakeHarness) run(id string) *fakeRun {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.runs[id]
}

func (f *fakeHarness) Stream(_ context.Context, id string, _ int64) (harness.Stream, error) {
	r := f.run(id)
	if r == nil {
		return nil, harness.ErrNotFound
	}
	r.mu.Lock()
	ended := r.ended
	r.mu.Unlock()
	if ended {
		return nil, harness.ErrNotAttachable
	}
	return &fakeStream{r: r, delay: f.delay, closed: make(chan struct{})}, nil
}

func (f *fakeHarness) Status(_ context.Context, id string) (harness.Status, error) {
	r := f.run(id)
	if r == nil {
		return harness.Status{}, harness.ErrNotFound
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := harness.Status{State: harness.State(r.state)}
	if r.state == "completed" {
		st.Output = &r.output
	}
	return st, nil
}

func (f *fakeHarness) Stop(_ context.Context, id string) error {
	r := f.run(id)
	if r == nil {
		return harness.ErrNotFound
	}
	r.stopOnce.Do(func() { close(r.stop) })
	return nil
}

func (f *fakeHarness) Approve(_ context.Context, id, requestID, choice string) error {
	r := f.run(id)
	if r == nil {
		return harness.ErrNotFound
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.approved[requestID] = choice
	return nil
}

func (f *fakeHarness) Retention(context.Context) (time.Duration, error) { return f.retention, nil }

func (f *fakeHarness) LastAssistant(context.Context, string) (string, error) { return "", nil }

type fakeStream struct {
	r         *fakeRun
	delay     time.Duration
	closed    chan struct{}
	closeOnce sync.Once
}

func (s *fakeStream) Next() (harness.Event, error) {
	r := s.r
	if s.delay > 0 {
		t := time.NewTimer(s.delay)
		select {
		case <-t.C:
		case <-r.stop:
			t.Stop()
		case <-s.closed:
			t.Stop()
			return harness.Event{}, harness.ErrStreamEnded
		}
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	select {
	case <-r.stop:
		if r.state == "running" {
			r.state, r.ended = "cancelled", true
			return harness.Event{Kind: harness.KindCancelled}, nil
		}
	default:
	}
	if r.next >= len(r.script) || r.state != "running" {
		r.mu.Unlock()
		<-s.closed // a finished stream stays open until the reader closes it
		r.mu.Lock()
		return harness.Event{}, harness.ErrStreamEnded
	}
	ev := r.script[r.next]
	r.next++
	switch ev.Kind {
	case harness.KindCompleted, harness.KindFailed, harness.KindCancelled:
		r.ended = true
	}
	if ev.Kind == harness.KindCompleted {
		r.state, r.output = "completed", ev.Text
	}
	if ev.Kind == harness.KindFailed {
		r.state = "failed"
	}
	return ev, nil
}

func (s *fakeStream) Close() error {
	s.closeOnce.Do(func() { close(s.closed) })
	return nil
}
