package longpoll

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue"
)

func feedSeqs(t *testing.T, b FeedBatch) []int64 {
	t.Helper()
	var out []int64
	for _, raw := range b.Events {
		var ev FeedEvent
		require.NoError(t, json.Unmarshal(raw, &ev))
		out = append(out, ev.Sequence)
	}
	return out
}

func TestFeedReadsAfterTheCursorAndWakesOnAPublish(t *testing.T) {
	f := setup(t, nil)
	ctx := context.Background()
	b, err := f.hub.WaitFeed(ctx, "u1", -1, 0)
	require.NoError(t, err)
	require.Equal(t, int64(0), b.Next, "a new feed starts at 0")
	for i := 0; i < 3; i++ {
		n, err := PublishFeed(ctx, f.rdb, "u1", "conversation.created", map[string]string{"id": "c"})
		require.NoError(t, err)
		require.Equal(t, int64(i+1), n)
	}
	_, err = PublishFeed(ctx, f.rdb, "u2", "conversation.created", map[string]string{"id": "other"})
	require.NoError(t, err)
	b, err = f.hub.WaitFeed(ctx, "u1", 1, time.Second)
	require.NoError(t, err)
	require.Equal(t, []int64{2, 3}, feedSeqs(t, b), "contiguous after the cursor, only this user's")
	require.Equal(t, int64(3), b.Next)

	// Nothing new: the poll waits, and a publish wakes it at once.
	type result struct {
		b   FeedBatch
		err error
	}
	done := make(chan result, 1)
	start := time.Now()
	go func() {
		b, err := f.hub.WaitFeed(ctx, "u1", 3, 20*time.Second)
		done <- result{b, err}
	}()
	require.Eventually(t, func() bool { // registered with the hub
		s := f.hub.shardFor(queue.FeedKey("u1"))
		s.mu.Lock()
		defer s.mu.Unlock()
		wt := s.watches[queue.FeedKey("u1")]
		return wt != nil && len(wt.waiters) == 1
	}, 5*time.Second, 5*time.Millisecond)
	_, err = PublishFeed(ctx, f.rdb, "u1", "conversation.deleted", map[string]string{"id": "c"})
	require.NoError(t, err)
	select {
	case r := <-done:
		require.NoError(t, r.err)
		require.Equal(t, []int64{4}, feedSeqs(t, r.b))
		require.Less(t, time.Since(start), 10*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("the waiting poll was not woken by the publish")
	}
}

func TestFeedHoleOrLostCounterAsksForAReset(t *testing.T) {
	f := setup(t, nil)
	ctx := context.Background()
	for i := 0; i < 5; i++ {
		_, err := PublishFeed(ctx, f.rdb, "u1", "x", nil)
		require.NoError(t, err)
	}
	// Trimmed under the client.
	require.NoError(t, f.rdb.XTrimMinID(ctx, queue.FeedKey("u1"), "4-0").Err())
	b, err := f.hub.WaitFeed(ctx, "u1", 1, time.Second)
	require.NoError(t, err)
	require.True(t, b.Reset)
	require.Equal(t, int64(5), b.Next)
	require.Empty(t, b.Events)
	// Redis lost the feed: the client's cursor is beyond the counter.
	require.NoError(t, f.rdb.Del(ctx, queue.FeedKey("u1"), queue.FeedSeqKey("u1")).Err())
	b, err = f.hub.WaitFeed(ctx, "u1", 5, time.Second)
	require.NoError(t, err)
	require.True(t, b.Reset)
	require.Equal(t, int64(0), b.Next)
	// Up to date: no reset, nothing.
	b, err = f.hub.WaitFeed(ctx, "u1", 0, 0)
	require.NoError(t, err)
	require.False(t, b.Reset)
	require.Empty(t, b.Events)
}
