package eventlog_test

import (
	"context"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/queue/eventlog"
)

// Two concurrent Flush calls over 200 pending events: the old log read the head, did the
// I/O unlocked and dropped the head after, so both callers dropped one head each and the
// last drop panicked with "slice bounds out of range [1:0]" while holding the mutex.
func TestConcurrentFlushOverPendingEvents(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	run := s.newRun(t)
	l, err := eventlog.Open(ctx, s.rdb, s.store, run, "tok")
	require.NoError(t, err)
	dead, cancel := context.WithCancel(ctx)
	cancel()
	for i := 0; i < 200; i++ {
		_, _ = l.Emit(dead, queue.MessageDeltaData{Text: "x"}, false) // Redis refuses: the context is done
	}
	r, st := l.Pending()
	require.Equal(t, 200, r)
	require.Equal(t, 200, st)
	var wg sync.WaitGroup
	for g := 0; g < 2; g++ {
		wg.Add(1)
		go func() { defer wg.Done(); _ = l.Flush(ctx) }()
	}
	wg.Wait()
	require.NoError(t, l.Flush(ctx))
	r, st = l.Pending()
	require.Zero(t, r)
	require.Zero(t, st)
	s.requireLog(t, run, 200)
}
