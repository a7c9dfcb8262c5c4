package backoff

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestGrowsCapsJittersAndResets(t *testing.T) {
	b := Backoff{Min: 10 * time.Millisecond, Max: 80 * time.Millisecond, Jitter: 0.5}
	want := []time.Duration{10, 20, 40, 80, 80, 80}
	for i, w := range want {
		d := b.Next()
		w *= time.Millisecond
		require.LessOrEqual(t, d, w, "attempt %d", i)
		require.GreaterOrEqual(t, d, w/2, "attempt %d: jitter takes at most half", i)
	}
	require.Equal(t, 6, b.Attempts())
	b.Reset()
	require.LessOrEqual(t, b.Next(), 10*time.Millisecond)
}

func TestJitterSpreadsDelays(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 50 {
		b := Backoff{Min: time.Second}
		seen[b.Next()] = true
	}
	require.Greater(t, len(seen), 10, "delays must not all be equal")
}

func TestWaitHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	b := Backoff{Min: time.Hour}
	require.ErrorIs(t, b.Wait(ctx), context.Canceled)
	require.NoError(t, Sleep(context.Background(), time.Millisecond))
}

func TestDelayIsTheNthDelay(t *testing.T) {
	b := Backoff{Min: 2 * time.Second, Max: time.Minute, Jitter: 0.1}
	want := []time.Duration{2, 4, 8, 16, 32, 60, 60}
	for i, w := range want {
		d := b.Delay(int64(i + 1))
		w *= time.Second
		require.LessOrEqual(t, d, w, "n=%d", i+1)
		require.GreaterOrEqual(t, d, w-w/10, "n=%d", i+1)
	}
	require.Zero(t, b.Attempts(), "Delay leaves b as it was")
	require.LessOrEqual(t, b.Delay(0), 2*time.Second, "n below 1 is the first delay")
}
