package startstop

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestStopWaitsForEveryGoroutine(t *testing.T) {
	var r Runner
	var exited atomic.Int32
	require.NoError(t, r.Start(context.Background(), func(ctx context.Context) {
		<-ctx.Done()
		exited.Add(1)
	}))
	require.ErrorIs(t, r.Start(context.Background(), nil), ErrStarted)
	for range 5 {
		require.True(t, r.Go(func(ctx context.Context) {
			<-ctx.Done()
			time.Sleep(5 * time.Millisecond) // still exiting when Stop is called
			exited.Add(1)
		}))
	}
	r.Stop()
	require.EqualValues(t, 6, exited.Load(), "Stop returned before its goroutines exited")
	require.False(t, r.Go(func(context.Context) {}), "a stopped runner takes no goroutines")
	r.Stop() // idempotent
}

func TestStopBeforeStartAndConcurrentStops(t *testing.T) {
	var r Runner
	r.Stop()
	release := make(chan struct{})
	require.NoError(t, r.Start(context.Background(), func(ctx context.Context) {
		<-ctx.Done()
		<-release
	}))
	var wg sync.WaitGroup
	var returned atomic.Int32
	for range 3 {
		wg.Add(1)
		go func() { defer wg.Done(); r.Stop(); returned.Add(1) }()
	}
	require.Never(t, func() bool { return returned.Load() > 0 }, 50*time.Millisecond, 5*time.Millisecond)
	close(release)
	wg.Wait()
	require.EqualValues(t, 3, returned.Load())
	// restartable after a full stop
	require.NoError(t, r.Start(context.Background(), nil))
	r.Stop()
}

func TestParentCancelEndsGoroutines(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	var r Runner
	done := make(chan struct{})
	require.NoError(t, r.Start(ctx, func(ctx context.Context) { <-ctx.Done(); close(done) }))
	cancel()
	<-done
	r.Stop()
}

func TestEveryRunsAtOnceAndStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	calls := make(chan struct{}, 10)
	done := make(chan struct{})
	go func() {
		defer close(done)
		Every(ctx, time.Hour, nil, "scan", func(context.Context) error { calls <- struct{}{}; return errors.New("x") })
	}()
	<-calls // the first call does not wait for the interval
	cancel()
	<-done
}
