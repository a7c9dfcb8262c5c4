package eventlog_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/queue/eventlog"
)

// A mark lands in the append's own script: with its event, never without it, never for a
// fenced writer, and, when the append has to wait (Redis refused it), with the event's
// later flush.
func TestMarkLandsWithItsEvent(t *testing.T) {
	s := setup(t)
	ctx := context.Background()
	run := s.newRun(t)
	key := "pa:run:{" + run.ID + "}:nativeseq"
	l, err := eventlog.Open(ctx, s.rdb, s.store, run, "tok")
	require.NoError(t, err)

	_, err = l.EmitMarked(ctx, queue.MessageDeltaData{Text: "a"}, false, &eventlog.Mark{Key: key, Value: "native 3", TTL: time.Hour})
	require.NoError(t, err)
	require.Equal(t, "native 3", s.rdb.Get(ctx, key).Val())
	ttl := s.rdb.PTTL(ctx, key).Val()
	require.True(t, ttl > 59*time.Minute && ttl <= time.Hour, ttl)

	// Refused by Redis (a done context): neither the event nor its mark is written...
	dead, cancel := context.WithCancel(ctx)
	cancel()
	_, err = l.EmitMarked(dead, queue.MessageDeltaData{Text: "b"}, false, &eventlog.Mark{Key: key, Value: "native 5", TTL: time.Hour})
	require.Error(t, err)
	require.Equal(t, "native 3", s.rdb.Get(ctx, key).Val())
	// ...until the event lands, and the mark with it.
	require.NoError(t, l.Flush(ctx))
	require.Equal(t, "native 5", s.rdb.Get(ctx, key).Val())
	s.requireLog(t, run, 2)

	// A writer that lost the fence writes no event and no mark.
	_, err = eventlog.Open(ctx, s.rdb, s.store, run, "tok2")
	require.NoError(t, err)
	_, err = l.EmitMarked(ctx, queue.MessageDeltaData{Text: "c"}, false, &eventlog.Mark{Key: key, Value: "native 9", TTL: time.Hour})
	require.ErrorIs(t, err, eventlog.ErrFenced)
	require.Equal(t, "native 5", s.rdb.Get(ctx, key).Val())

	// A mark must be a key of the log's own run (its hash slot).
	_, err = l.EmitMarked(ctx, queue.MessageDeltaData{Text: "d"}, false, &eventlog.Mark{Key: "pa:run:{other}:nativeseq", Value: "x", TTL: time.Hour})
	require.Error(t, err)
	require.ErrorIs(t, s.rdb.Get(ctx, "pa:run:{other}:nativeseq").Err(), redis.Nil)
}
