package executor_test

import (
	"context"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/schema"
)

// longReasonGPU is a managed device whose queue explains itself at length: it tells the
// waiting run a reason longer than the record's queueReason field, then grants once let.
type longReasonGPU struct {
	reason string
	grant  chan struct{}
}

func (g *longReasonGPU) Manages(string) bool { return true }

func (g *longReasonGPU) AcquireRun(ctx context.Context, _, _, _ string, onWait func(int, string)) (func(), <-chan struct{}, error) {
	onWait(1, g.reason)
	select {
	case <-g.grant:
		return func() {}, nil, nil
	case <-ctx.Done():
		return nil, nil, ctx.Err()
	}
}

// A waiting reason longer than its field (model names and counts add up: a 270-character
// one once left a job "queued" while it ran, every later write of its record refused) is
// cut to fit on the card, never refused: the run shows waiting_for_resource with it, then
// runs and completes.
func TestALongWaitingReasonIsCutNotRefused(t *testing.T) {
	fake := newFake(func(string) []harness.Event { return deltas("done") }, 0)
	s := setup(t, fake)
	gpu := &longReasonGPU{reason: "the device is held by " + strings.Repeat("a very long model name ", 20), grant: make(chan struct{})}
	s.exec.GPU = gpu
	id := s.newRun(t)
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(context.Background(), id) }()
	var r *schema.Run
	require.Eventually(t, func() bool {
		r = s.record(t, id)
		return r.Status == schema.RunWaitingForResource
	}, 10*time.Second, 5*time.Millisecond)
	require.NotNil(t, r.QueueReason)
	require.LessOrEqual(t, utf8.RuneCountInString(*r.QueueReason), schema.SizeQueueReason)
	require.True(t, strings.HasPrefix(*r.QueueReason, "the device is held by a very long model name"), *r.QueueReason)
	require.True(t, strings.HasSuffix(*r.QueueReason, "…"), "the cut is shown")
	require.Equal(t, int64(1), *r.QueuePosition)
	close(gpu.grant)
	require.NoError(t, <-done)
	r = s.record(t, id)
	require.Equal(t, schema.RunCompleted, r.Status)
	require.Nil(t, r.QueueReason)
}

// A run whose own model is loading says so as its phase (issue 32 item 5); waiting behind
// another model is "waiting for resource" with the reason.
func TestTheRunsOwnModelLoadingIsItsPhase(t *testing.T) {
	for reason, phase := range map[string]string{"loading m": executor.PhaseLoading, "loading m2": "waiting for resource"} {
		fake := newFake(func(string) []harness.Event { return deltas("done") }, 0)
		s := setup(t, fake)
		gpu := &longReasonGPU{reason: reason, grant: make(chan struct{})}
		s.exec.GPU = gpu
		id := s.newRun(t)
		done := make(chan error, 1)
		go func() { done <- s.exec.Execute(context.Background(), id) }()
		require.Eventually(t, func() bool {
			r := s.record(t, id)
			return r.Status == schema.RunWaitingForResource && r.Phase != nil && *r.Phase == phase && *r.QueueReason == reason
		}, 10*time.Second, 5*time.Millisecond, reason)
		close(gpu.grant)
		require.NoError(t, <-done)
	}
}
