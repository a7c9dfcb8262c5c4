package queue_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/queue/redistest"
)

// TestStreamAliveAgesOut: the stream service's heartbeat counts while fresher than
// AliveStale; none, or only an old one (a killed instance never removes its beat), is an
// error saying so; beats older than an hour are forgotten by the next beat.
func TestStreamAliveAgesOut(t *testing.T) {
	t.Parallel()
	r := redistest.Start(t)
	rdb := r.Client()
	defer rdb.Close()
	ctx := context.Background()
	now := time.Now()
	_, err := queue.StreamAlive(ctx, rdb, now)
	require.ErrorContains(t, err, "no stream service has sent a heartbeat")

	require.NoError(t, queue.Beat(ctx, rdb, queue.StreamAliveKey(), "killed", now.Add(-20*time.Second)))
	age, err := queue.StreamAlive(ctx, rdb, now)
	require.ErrorContains(t, err, "no heartbeat from any stream service for 20s")
	require.InDelta(t, 20*time.Second, age, float64(time.Millisecond))

	require.NoError(t, queue.Beat(ctx, rdb, queue.StreamAliveKey(), "live", now.Add(-time.Second)))
	age, err = queue.StreamAlive(ctx, rdb, now)
	require.NoError(t, err)
	require.InDelta(t, time.Second, age, float64(time.Millisecond))

	require.NoError(t, queue.Beat(ctx, rdb, queue.StreamAliveKey(), "live", now.Add(2*time.Hour)))
	require.Equal(t, []string{"live"}, rdb.ZRange(ctx, queue.StreamAliveKey(), 0, -1).Val(), "the killed instance's beat is forgotten after an hour")
}
