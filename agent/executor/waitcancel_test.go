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
