package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
)

// TestCancelWhileWaitingForTheDevice (issue 14, item 6): a run waits for its device (held
// by another job) and is cancelled, but neither asynq's CancelProcessing fast path nor a
// cancelled context reaches its handler. The waiting attempt notices the cancel itself —
// from the control stream, or from the record alone when the command was lost too — and
// ends cancelled without ever starting natively, while the other job keeps the device.
// Before the fix the run went on waiting until the device came free, then started.
func TestCancelWhileWaitingForTheDevice(t *testing.T) {
	for _, tc := range []struct {
		name    string
		command bool // the cancel command reached the control stream
	}{{"command on the control stream", true}, {"only the record says cancel", false}} {
		t.Run(tc.name, func(t *testing.T) {
			fake := newFake(func(string) []harness.Event { return deltas("never") }, time.Millisecond)
			s := setup(t, fake)
			s.exec.Slots = executor.NewSlots(map[string]int{"dev": 1})
			release, err := s.exec.Slots.Acquire(context.Background(), "dev", nil) // another job holds the device
			require.NoError(t, err)
			defer release()
			id := s.newRun(t)
			done := make(chan error, 1)
			go func() { done <- s.exec.Execute(context.Background(), id) }()
			require.Eventually(t, func() bool { return s.record(t, id).Status == schema.RunWaitingForResource }, 10*time.Second, 5*time.Millisecond)

			ctx := context.Background()
			_, err = schema.For[schema.Run](s.store, schema.CollRuns).Update(ctx, id, map[string]any{"cancelRequested": true})
			require.NoError(t, err)
			if tc.command {
				require.NoError(t, queue.SendControl(ctx, s.rdb, id, queue.Control{Type: queue.ControlCancel, By: owner}))
			}
			select {
			case err := <-done:
				require.NoError(t, err)
			case <-time.After(15 * time.Second):
				t.Fatal("the run kept waiting for the device after its cancel")
			}
			rec := s.record(t, id)
			require.Equal(t, schema.RunCancelled, rec.Status)
			require.NotNil(t, rec.ErrorSummary)
			require.Contains(t, *rec.ErrorSummary, "cancelled while waiting for the dev device")
			evs := s.requireLog(t, id)
			require.Equal(t, queue.EventRunCancelled, evs[len(evs)-1].Type)
			fake.mu.Lock()
			defer fake.mu.Unlock()
			require.Zero(t, fake.submits, "nothing started natively")
		})
	}
}

// stoppingHarness settles a stopped run at once, as Hermes does (the fake settles it only
// when a stream reads on).
type stoppingHarness struct{ *fakeHarness }

func (h stoppingHarness) Stop(ctx context.Context, id string) error {
	err := h.fakeHarness.Stop(ctx, id)
	if r := h.run(id); r != nil {
		r.mu.Lock()
		if r.state == "running" {
			r.state = "cancelled"
		}
		r.mu.Unlock()
	}
	return err
}

// TestCancelWhileWaitingStopsANativeRunAnEarlierAttemptStarted: an attempt started the
// native run and was aborted (a shutdown: the native run goes on); the next attempt waits
// for the device and is cancelled through the record alone. It stops the native run and
// settles the run cancelled from the native status, without submitting again.
func TestCancelWhileWaitingStopsANativeRunAnEarlierAttemptStarted(t *testing.T) {
	parts := make([]string, 2000)
	for i := range parts {
		parts[i] = "x"
	}
	fake := newFake(func(string) []harness.Event { return deltas(parts...) }, 2*time.Millisecond)
	s := setup(t, fake)
	s.exec.Slots = executor.NewSlots(map[string]int{"dev": 1})
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return stoppingHarness{fake}, nil }
	id := s.newRun(t)

	ctx1, abort := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(ctx1, id) }()
	waitForDelta(t, s, id)
	abort() // a shutdown: the native run is left running for the next attempt
	<-done
	native := fake.run("native-" + id)
	require.NotNil(t, native)

	release, err := s.exec.Slots.Acquire(context.Background(), "dev", nil) // another job holds the device
	require.NoError(t, err)
	defer release()
	go func() { done <- s.exec.Execute(context.Background(), id) }()
	require.Eventually(t, func() bool { return s.record(t, id).Status == schema.RunWaitingForResource }, 10*time.Second, 5*time.Millisecond)
	_, err = schema.For[schema.Run](s.store, schema.CollRuns).Update(context.Background(), id, map[string]any{"cancelRequested": true})
	require.NoError(t, err)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("the run kept waiting for the device after its cancel")
	}
	select {
	case <-native.stop:
	default:
		t.Fatal("the native run was not stopped")
	}
	require.Equal(t, schema.RunCancelled, s.record(t, id).Status)
	evs := s.requireLog(t, id)
	require.Equal(t, queue.EventRunCancelled, evs[len(evs)-1].Type)
	fake.mu.Lock()
	defer fake.mu.Unlock()
	require.Equal(t, 1, fake.submits, "never submitted again")
}
