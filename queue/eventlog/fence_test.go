package eventlog_test

import (
	"context"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
)

// A newer attempt's Open fences the older one out of every write: appends, the hot
// heartbeat, and (through Check) anything the older one guards with the fence.
func TestOpenFencesOlderWriter(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	run := s.newRun(t)
	a, err := eventlog.Open(ctx, s.rdb, s.store, run, "a")
	require.NoError(t, err)
	for i := 0; i < 3; i++ {
		_, err := a.Emit(ctx, queue.MessageDeltaData{Text: "a"}, true)
		require.NoError(t, err)
	}
	require.NoError(t, a.Check(ctx))
	require.NoError(t, a.Beat(ctx))

	b, err := eventlog.Open(ctx, s.rdb, s.store, run, "b")
	require.NoError(t, err)
	require.Equal(t, int64(3), b.Last())

	_, err = a.Emit(ctx, queue.MessageDeltaData{Text: "ghost"}, true)
	require.ErrorIs(t, err, eventlog.ErrFenced)
	require.ErrorIs(t, a.Flush(ctx), eventlog.ErrFenced)
	require.ErrorIs(t, a.Beat(ctx), eventlog.ErrFenced)
	require.ErrorIs(t, a.Check(ctx), eventlog.ErrFenced)

	b.SetStatus(schema.RunCompleted)
	_, err = b.Emit(ctx, queue.RunEndData{Type: queue.EventRunCompleted, Status: "completed"}, true)
	require.NoError(t, err)
	evs := s.requireLog(t, run, 4)
	require.Equal(t, queue.EventRunCompleted, evs[3].Type)
	st, ok, err := queue.GetRunState(ctx, s.rdb, run.ID)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, int64(4), st.LastSequence)
	require.True(t, st.Terminal)
}

// An event a writer numbered but Redis never accepted must not reach Appwrite: the old log
// wrote it there when Redis failed, so Appwrite held an event the stream never had, and
// the next attempt numbered past it (a gap in the stream, a phantom in Appwrite).
func TestUnacceptedEventNeverReachesAppwrite(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	run := s.newRun(t)
	own := redis.NewClient(&redis.Options{Addr: s.rdb.Options().Addr})
	a, err := eventlog.Open(ctx, own, s.store, run, "a")
	require.NoError(t, err)
	for i := 0; i < 2; i++ {
		_, err := a.Emit(ctx, queue.MessageDeltaData{Text: "a"}, true)
		require.NoError(t, err)
	}
	require.NoError(t, own.Close()) // this writer loses Redis; Appwrite still answers
	_, err = a.Emit(ctx, queue.MessageDeltaData{Text: "never appended"}, true)
	require.Error(t, err)
	require.Error(t, a.Flush(ctx))
	redisN, storeN := a.Pending()
	require.Equal(t, 1, redisN)
	require.Equal(t, 1, storeN)

	b, err := eventlog.Open(ctx, s.rdb, s.store, run, "b")
	require.NoError(t, err)
	require.Equal(t, int64(2), b.Last())
	for i := 0; i < 2; i++ {
		_, err := b.Emit(ctx, queue.MessageDeltaData{Text: "b"}, true)
		require.NoError(t, err)
	}
	require.NoError(t, b.Flush(ctx))
	s.requireLog(t, run, 4)
}
