package longpoll

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// TestFollowerRelaysAcrossBatchesWithoutAnotherRead: a Follower reads one snapshot, then
// stays registered: each later event comes from the reader as it was handed over, in
// order and exactly once, with no snapshot read (no XRANGE/HGETALL round trip) and no
// new registration between batches; the terminal event ends it with its status.
// next is the stream service's loop in small: Next, else wait on Ready up to wait, then
// Reread once.
func next(t *testing.T, fl *Follower, wait time.Duration) Batch {
	t.Helper()
	ctx := context.Background()
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		b, err := fl.Next(ctx)
		require.NoError(t, err)
		if b.Len() > 0 || b.Terminal {
			return b
		}
		select {
		case <-fl.Ready():
		case <-timer.C:
			b, err := fl.Reread(ctx)
			require.NoError(t, err)
			return b
		}
	}
}

func TestFollowerRelaysAcrossBatchesWithoutAnotherRead(t *testing.T) {
	f := setup(t, nil)
	f.running(t, "r1", 2)
	reads := 0
	f.p.testHookRead = func() { reads++ }
	fl, err := f.p.Follow(nil, Run{ID: "r1", Owner: "u"}, 0)
	require.NoError(t, err)
	defer fl.Close()
	b := next(t, fl, 10*time.Second)
	require.Equal(t, []int64{1, 2}, seqs(t, b))
	require.Equal(t, 1, reads)
	require.Equal(t, 1, f.hub.waiting("r1"), "registered from the first batch on")
	f.awaitReading(t, "r1")
	for seq := int64(3); seq <= 20; seq++ {
		typ, status := queue.EventMessageDelta, ""
		if seq == 20 {
			typ, status = queue.EventRunCompleted, "completed"
		}
		f.appendEv(t, "r1", seq, typ, status)
		b := next(t, fl, 10*time.Second)
		require.Equal(t, []int64{seq}, seqs(t, b))
		require.Equal(t, 1, f.hub.waiting("r1"), "still registered")
		if seq == 20 {
			require.True(t, b.Terminal)
			require.Equal(t, "completed", b.Status)
		}
	}
	require.Equal(t, 1, reads, "no snapshot read after the first")
	fl.Close()
	fl.Close()
	require.Zero(t, f.hub.waiting("r1"))
	require.Zero(t, f.hub.Follows())
}

// TestFollowerAfterAHoleOrASilenceReadsAgain: a hole (the stream trimmed under the
// follower) makes it read the ordinary way and go on from there, nothing lost or doubled;
// a wait that times out answers empty after one read, still registered, and the next
// event still comes through.
func TestFollowerAfterAHoleOrASilenceReadsAgain(t *testing.T) {
	f := setup(t, nil)
	f.running(t, "r", 3)
	reads := 0
	f.p.testHookRead = func() { reads++ }
	fl, err := f.p.Follow(nil, Run{ID: "r", Owner: "u"}, 3)
	require.NoError(t, err)
	defer fl.Close()
	ctx := context.Background()
	for i := 1; i <= 2; i++ {
		b := next(t, fl, 200*time.Millisecond)
		require.Zero(t, b.Len(), "nothing within the wait")
		require.Equal(t, i+1, reads, "the first read, then one after each silence")
		require.Equal(t, 1, f.hub.waiting("r"), "still registered")
	}

	// The stream is trimmed under the follower: 4 is only in the durable copy.
	se := schematest.New(t)
	for _, seq := range []int64{4, 5, 6} {
		_, err := schema.For[schema.Event](se.Store, schema.CollEvents).Create(ctx, schema.EventDocID("r", seq), "u",
			&schema.Event{OwnerID: "u", RunID: "r", Sequence: seq, Type: queue.EventMessageDelta})
		require.NoError(t, err)
	}
	fl.st = se.Store
	f.awaitReading(t, "r")
	_, err = f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, s := range []int64{4, 5, 6} {
			b, _ := json.Marshal(queue.Event{Sequence: s, Type: queue.EventMessageDelta})
			p.XAdd(ctx, &redis.XAddArgs{Stream: queue.EventsKey("r"), ID: fmt.Sprintf("%d-0", s), Values: []any{"e", b}})
		}
		p.XTrimMinID(ctx, queue.EventsKey("r"), "5-0")
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, queue.SetRunState(ctx, f.rdb, "r", queue.RunState{Status: "running", HeartbeatAt: time.Now(), LastSequence: 6}))
	got := []int64{}
	for len(got) < 3 {
		got = append(got, seqs(t, next(t, fl, time.Second))...)
	}
	require.Equal(t, []int64{4, 5, 6}, got, "in order, exactly once")
	require.Greater(t, reads, 2, "the hole was read the ordinary way")
	f.awaitReading(t, "r")
	f.appendEv(t, "r", 7, queue.EventMessageDelta, "")
	require.Equal(t, []int64{7}, seqs(t, next(t, fl, time.Second)), "then live again")
}

// TestANotifiedFollowerTakesWhatTheReaderHandsOver: with Notify the reader calls back
// (no Ready channel) after each hand-over; TryNext takes it without a read, in order and
// exactly once, asks for a snapshot (ok false) only at the start and after a hole, and a
// batch over MaxBatch calls back again for the rest.
func TestANotifiedFollowerTakesWhatTheReaderHandsOver(t *testing.T) {
	f := setup(t, nil)
	f.running(t, "rn", 1)
	f.p.MaxBatch = 2
	reads := 0
	f.p.testHookRead = func() { reads++ }
	fl, err := f.p.Follow(nil, Run{ID: "rn", Owner: "u"}, 0)
	require.NoError(t, err)
	defer fl.Close()
	called := make(chan struct{}, 16)
	fl.Notify(func() { called <- struct{}{} })
	_, ok, err := fl.TryNext()
	require.NoError(t, err)
	require.False(t, ok, "the first batch is a snapshot")
	b, err := fl.Next(context.Background())
	require.NoError(t, err)
	require.Equal(t, []int64{1}, seqs(t, b))
	require.Nil(t, fl.Ready(), "a notified follower has no channel")
	require.Equal(t, 1, reads)

	f.awaitReading(t, "rn")
	ctx := context.Background()
	_, err = f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error { // one read hands over all three
		for _, seq := range []int64{2, 3, 4} {
			b, _ := json.Marshal(queue.Event{Sequence: seq, Type: queue.EventMessageDelta})
			p.XAdd(ctx, &redis.XAddArgs{Stream: queue.EventsKey("rn"), ID: fmt.Sprintf("%d-0", seq), Values: []any{"e", b}})
		}
		return nil
	})
	require.NoError(t, err)
	for b.Next < 2 { // a call back may come with nothing new (the snapshot had it)
		select {
		case <-called:
		case <-time.After(10 * time.Second):
			t.Fatal("no call back")
		}
		b, ok, err = fl.TryNext()
		require.NoError(t, err)
		require.True(t, ok)
	}
	require.Equal(t, []int64{2, 3}, seqs(t, b), "MaxBatch")
	require.NotEmpty(t, called, "called back again for the rest")
	for len(called) > 0 {
		<-called
	}
	b, ok, err = fl.TryNext()
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, []int64{4}, seqs(t, b), "in order, exactly once")
	b, ok, err = fl.TryNext()
	require.NoError(t, err)
	require.True(t, ok)
	require.Zero(t, b.Len())
	require.Equal(t, 1, reads, "no read after the first")
}
