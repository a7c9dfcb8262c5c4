package longpoll

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/fault"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
)

type fixture struct {
	r       *redistest.Server
	rdb     *redis.Client
	hub     *Hub
	p       *Poller
	waiting chan struct{} // one per poll that found nothing and waits
}

// setup starts a Redis and a hub (mutate tunes it before Start).
func setup(t *testing.T, mutate func(*Hub)) *fixture {
	t.Helper()
	r := redistest.Start(t)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr, ClientName: "test"})
	t.Cleanup(func() { _ = rdb.Close() })
	h := &Hub{Base: &redis.Options{Addr: r.Addr}, Block: 30 * time.Second}
	if mutate != nil {
		mutate(h)
	}
	require.NoError(t, h.Start(context.Background()))
	t.Cleanup(h.Stop)
	f := &fixture{r: r, rdb: rdb, hub: h, waiting: make(chan struct{}, 1000)}
	f.p = &Poller{Hub: h, testHookWait: func() { f.waiting <- struct{}{} }}
	return f
}

func (f *fixture) running(t *testing.T, run string, events int) {
	t.Helper()
	ctx := context.Background()
	for i := 1; i <= events; i++ {
		f.appendEv(t, run, int64(i), queue.EventMessageDelta, "")
	}
	require.NoError(t, queue.SetRunState(ctx, f.rdb, run, queue.RunState{Status: "running", HeartbeatAt: time.Now(), LastSequence: int64(events)}))
}

func (f *fixture) appendEv(t *testing.T, run string, seq int64, typ, status string) {
	t.Helper()
	var data json.RawMessage
	if status != "" {
		data, _ = json.Marshal(map[string]string{"status": status})
	}
	require.NoError(t, queue.AppendEvent(context.Background(), f.rdb, run, queue.Event{Sequence: seq, Type: typ, Data: data, At: time.Now()}))
}

type result struct {
	b   Batch
	err error
	at  time.Time
}

// poll runs a poll in the background.
func (f *fixture) poll(owner, run string, after int64, wait time.Duration) <-chan result {
	out := make(chan result, 1)
	go func() {
		b, err := f.p.Poll(context.Background(), nil, Run{ID: run, Owner: owner}, after, wait)
		out <- result{b, err, time.Now()}
	}()
	return out
}

// waiting reports how many followers the hub's readers hold for run.
func (h *Hub) waiting(run string) int {
	s := h.shardFor(run)
	s.mu.Lock()
	defer s.mu.Unlock()
	if wt := s.watches[queue.EventsKey(run)]; wt != nil {
		return len(wt.waiters)
	}
	return 0
}

// awaitPolls waits until n polls found nothing and wait.
func (f *fixture) awaitPolls(t *testing.T, n int) {
	t.Helper()
	for range n {
		select {
		case <-f.waiting:
		case <-time.After(5 * time.Second):
			t.Fatal("no poll waits")
		}
	}
}

// awaitReading waits until the reader of run has its read in flight with run in it.
func (f *fixture) awaitReading(t *testing.T, run string) {
	t.Helper()
	s := f.hub.shardFor(run)
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		wt := s.watches[queue.EventsKey(run)]
		return s.reading && wt != nil && wt.sent == wt.pos
	}, 5*time.Second, time.Millisecond)
}

func seqs(t *testing.T, b Batch) []int64 {
	t.Helper()
	evs, err := b.All()
	require.NoError(t, err)
	require.Len(t, evs, b.Len())
	out := make([]int64, 0, len(evs))
	for _, e := range evs {
		out = append(out, e.Sequence)
	}
	return out
}

func TestWaitingFollowerGetsWhatIsAppendedInOrderWithoutAnotherRead(t *testing.T) {
	f := setup(t, nil)
	f.p.Coalesce = 200 * time.Millisecond
	f.running(t, "r1", 3)
	res := f.poll("u", "r1", 3, 10*time.Second)
	f.awaitPolls(t, 1)
	f.awaitReading(t, "r1")
	f.appendEv(t, "r1", 4, queue.EventMessageDelta, "")
	f.appendEv(t, "r1", 5, queue.EventRunStatus, "waiting_for_approval")
	r := <-res
	require.NoError(t, r.err)
	require.Equal(t, []int64{4, 5}, seqs(t, r.b), "the coalesce window gathers the burst, in order")
	require.EqualValues(t, 5, r.b.Next)
	require.Equal(t, "waiting_for_approval", r.b.Status, "the status the events declare")
	require.False(t, r.b.Terminal)
	require.Zero(t, f.hub.waiting("r1"), "the follower left the set")

	// The terminal event ends it.
	res = f.poll("u", "r1", 5, 10*time.Second)
	f.awaitPolls(t, 1)
	f.awaitReading(t, "r1")
	f.appendEv(t, "r1", 6, queue.EventRunCompleted, "completed")
	r = <-res
	require.NoError(t, r.err)
	require.Equal(t, []int64{6}, seqs(t, r.b))
	require.True(t, r.b.Terminal)
	require.Equal(t, "completed", r.b.Status)
}

func TestFollowersWithDifferentCursorsEachGetWhatFollowsTheirOwn(t *testing.T) {
	f := setup(t, nil)
	f.running(t, "r", 4)
	a := f.poll("u", "r", 4, 10*time.Second)
	f.awaitPolls(t, 1)
	f.awaitReading(t, "r")
	// A second follower behind the first: its snapshot answers at once, and lowers the
	// reader's position for a moment.
	r := <-f.poll("u", "r", 2, 10*time.Second)
	require.NoError(t, r.err)
	require.Equal(t, []int64{3, 4}, seqs(t, r.b))
	b := f.poll("v", "r", 4, 10*time.Second)
	f.awaitPolls(t, 1)
	f.awaitReading(t, "r")
	f.appendEv(t, "r", 5, queue.EventMessageDelta, "")
	for _, c := range []<-chan result{a, b} {
		r := <-c
		require.NoError(t, r.err)
		require.Equal(t, []int64{5}, seqs(t, r.b))
	}
}

// An event appended after the follower's snapshot and before it waits is not lost: the
// reader reads from the follower's cursor, not from "now".
func TestNoLostWakeUpBetweenSnapshotAndWait(t *testing.T) {
	f := setup(t, nil)
	f.running(t, "r", 1)
	f.p.testHookWait = func() { f.appendEv(t, "r", 2, queue.EventMessageDelta, "") } // nothing in the snapshot, not yet waiting
	start := time.Now()
	r := <-f.poll("u", "r", 1, 20*time.Second)
	require.NoError(t, r.err)
	require.Equal(t, []int64{2}, seqs(t, r.b))
	require.Less(t, time.Since(start), 5*time.Second, "woken by the append, not by the end of the wait")
}

// A follower of a new stream interrupts the read in flight (Block is 30 s here): it is
// woken by its event, not after the read expires.
func TestNewStreamInterruptsTheReadInFlight(t *testing.T) {
	f := setup(t, func(h *Hub) { h.Readers = 1 }) // a and b in one read
	f.running(t, "a", 1)
	f.running(t, "b", 1)
	ra := f.poll("u", "a", 1, 20*time.Second)
	f.awaitPolls(t, 1)
	f.awaitReading(t, "a")
	start := time.Now()
	rb := f.poll("u", "b", 1, 20*time.Second)
	f.awaitPolls(t, 1)
	f.awaitReading(t, "b")
	f.appendEv(t, "b", 2, queue.EventMessageDelta, "")
	r := <-rb
	require.NoError(t, r.err)
	require.Equal(t, []int64{2}, seqs(t, r.b))
	require.Less(t, r.at.Sub(start), 5*time.Second)
	f.appendEv(t, "a", 2, queue.EventMessageDelta, "")
	require.Equal(t, []int64{2}, seqs(t, (<-ra).b))
}

// A follower that registers while the reader is between reads (handing out what it just
// read) is in the next read, and an event appended meanwhile reaches it.
func TestRegistrationBetweenReadsIsNotLost(t *testing.T) {
	paused, resume := make(chan struct{}), make(chan struct{})
	var once sync.Once
	f := setup(t, func(h *Hub) {
		h.Readers = 1 // a and b in one read
		h.testHookRead = func() { once.Do(func() { close(paused); <-resume }) }
	})
	f.running(t, "a", 1)
	f.running(t, "b", 1)
	ra := f.poll("u", "a", 1, 20*time.Second)
	f.awaitPolls(t, 1)
	f.awaitReading(t, "a")
	f.appendEv(t, "a", 2, queue.EventMessageDelta, "")
	<-paused // the read returned; the reader has not handed out yet
	rb := f.poll("u", "b", 1, 20*time.Second)
	f.awaitPolls(t, 1)
	f.appendEv(t, "b", 2, queue.EventMessageDelta, "")
	close(resume)
	require.Equal(t, []int64{2}, seqs(t, (<-ra).b))
	r := <-rb
	require.NoError(t, r.err)
	require.Equal(t, []int64{2}, seqs(t, r.b))
}

// Many followers on many runs share the readers' connections: the connections Redis sees
// do not grow with the followers, and each follower gets its own run's event.
func TestManyFollowersFewConnections(t *testing.T) {
	f := setup(t, func(h *Hub) { h.Readers = 2; h.FollowPool = 4; h.MaxPerUser = 1000 })
	const n = 300
	for i := range n {
		f.running(t, fmt.Sprintf("m%d", i), 1)
	}
	results := make([]<-chan result, n)
	for i := range n {
		results[i] = f.poll("u", fmt.Sprintf("m%d", i), 1, 20*time.Second)
	}
	f.awaitPolls(t, n)
	list, err := f.rdb.ClientList(context.Background()).Result()
	require.NoError(t, err)
	conns := 0
	for _, l := range strings.Split(strings.TrimSpace(list), "\n") {
		if !strings.Contains(l, "name=test ") {
			conns++
		}
	}
	require.LessOrEqual(t, conns, 2+4, list)
	require.LessOrEqual(t, conns, 2+4, "readers + followers' pool, whatever the number of followers")
	for i := range n {
		f.appendEv(t, fmt.Sprintf("m%d", i), 2, queue.EventMessageDelta, "")
	}
	for i := range n {
		r := <-results[i]
		require.NoError(t, r.err)
		require.Equal(t, []int64{2}, seqs(t, r.b), "run m%d", i)
	}
}

func TestPerUserCapAnswersRateLimited(t *testing.T) {
	f := setup(t, func(h *Hub) { h.MaxPerUser = 2 })
	f.running(t, "r", 1)
	a := f.poll("u", "r", 1, 20*time.Second)
	b := f.poll("u", "r", 1, 20*time.Second)
	f.awaitPolls(t, 2)
	_, err := f.p.Poll(context.Background(), nil, Run{ID: "r", Owner: "u"}, 1, time.Second)
	fe := fault.As(err)
	require.NotNil(t, fe, "%v", err)
	require.Equal(t, fault.RateLimited, fe.Kind)
	require.Equal(t, "too_many_follows", fe.Code)
	require.Positive(t, fe.RetryAfter)
	c := f.poll("v", "r", 1, 20*time.Second) // another user is not affected
	f.awaitPolls(t, 1)
	f.appendEv(t, "r", 2, queue.EventMessageDelta, "")
	for _, ch := range []<-chan result{a, b, c} {
		require.NoError(t, (<-ch).err)
	}
	require.Zero(t, f.hub.Follows(), "every follow released")
	r := <-f.poll("u", "r", 1, 0)
	require.NoError(t, r.err, "the user may follow again")
}

// A hole after a waiter's cursor (the stream trimmed under it) makes it read again the
// ordinary way instead of delivering a gap.
func TestHoleMakesTheWaiterReadAgain(t *testing.T) {
	f := setup(t, nil)
	f.running(t, "r", 3)
	w, err := f.hub.watch("r", 3)
	require.NoError(t, err)
	f.awaitReading(t, "r")
	ctx := context.Background()
	_, err = f.rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, s := range []int64{4, 5} {
			b, _ := json.Marshal(queue.Event{Sequence: s, Type: queue.EventMessageDelta})
			p.XAdd(ctx, &redis.XAddArgs{Stream: queue.EventsKey("r"), ID: fmt.Sprintf("%d-0", s), Values: []any{"e", b}})
		}
		p.XTrimMinID(ctx, queue.EventsKey("r"), "5-0")
		return nil
	})
	require.NoError(t, err)
	<-w.ready
	evs, reread, err := w.take()
	require.NoError(t, err)
	require.True(t, reread)
	require.Empty(t, evs)
}

// Stop ends a read blocked for 30 s at once and wakes the followers with ErrRedis.
func TestStopWakesFollowersAndEndsTheBlockedRead(t *testing.T) {
	f := setup(t, nil)
	f.running(t, "r", 1)
	res := f.poll("u", "r", 1, 20*time.Second)
	f.awaitPolls(t, 1)
	f.awaitReading(t, "r")
	start := time.Now()
	f.hub.Stop()
	require.Less(t, time.Since(start), 5*time.Second)
	r := <-res
	require.ErrorIs(t, r.err, ErrRedis)
	_, err := f.p.Poll(context.Background(), nil, Run{ID: "r", Owner: "u"}, 1, time.Second)
	require.ErrorIs(t, err, ErrRedis, "a stopped hub takes no followers")
	f.hub.Stop() // idempotent
}

// When the reader's Redis fails, waiting followers answer ErrRedis (503) instead of
// waiting out their time; the reader recovers when Redis is back.
func TestReaderFailureWakesFollowers(t *testing.T) {
	f := setup(t, func(h *Hub) { h.Block = 200 * time.Millisecond })
	f.running(t, "r", 1)
	res := f.poll("u", "r", 1, 20*time.Second)
	f.awaitPolls(t, 1)
	f.awaitReading(t, "r")
	f.r.Crash()
	r := <-res
	require.ErrorIs(t, r.err, ErrRedis)
	f.r.Restart()
	f.running(t, "r2", 1)
	res = f.poll("u", "r2", 1, 20*time.Second)
	f.awaitPolls(t, 1)
	f.appendEv(t, "r2", 2, queue.EventMessageDelta, "")
	r = <-res
	require.NoError(t, r.err)
	require.Equal(t, []int64{2}, seqs(t, r.b))
}

// A batch answered from the reader's entries is sent as stored: the same JSON as the
// decoded events would give, status and terminal included.
func TestPushedBatchIsTheSameJSONAsADecodedOne(t *testing.T) {
	f := setup(t, nil)
	f.p.Coalesce = 200 * time.Millisecond
	f.running(t, "r", 1)
	res := f.poll("u", "r", 1, 10*time.Second)
	f.awaitPolls(t, 1)
	f.awaitReading(t, "r")
	ctx := context.Background()
	evs := []queue.Event{
		{Sequence: 2, Type: queue.EventMessageDelta, Data: json.RawMessage(`{"text":"say \"type\":\"run.x\" ü"}`), At: time.Now()},
		{Sequence: 3, Type: queue.EventToolStarted, Data: json.RawMessage(`{"tool":"terminal","preview":"ls","type":"run.failed"}`), At: time.Now()},
		{Sequence: 4, Type: queue.EventRunCompleted, Data: json.RawMessage(`{"status":"completed"}`), At: time.Now()},
	}
	for _, e := range evs {
		require.NoError(t, queue.AppendEvent(ctx, f.rdb, "r", e))
	}
	r := <-res
	require.NoError(t, r.err)
	require.NotNil(t, r.b.raw, "answered from the reader's entries")
	got, err := json.Marshal(r.b)
	require.NoError(t, err)
	decoded, err := r.b.All()
	require.NoError(t, err)
	want, err := json.Marshal(Batch{Events: decoded, Next: 4, Status: "completed", Terminal: true})
	require.NoError(t, err)
	require.JSONEq(t, string(want), string(got))
	require.Equal(t, []int64{2, 3, 4}, seqs(t, r.b))
}
