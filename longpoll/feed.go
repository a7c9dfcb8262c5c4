package longpoll

// A user's change feed: what changed among their conversations (created, renamed, deleted,
// a message admitted with its run), so every open tab and device shows it within a second.
//
// The feed is a Redis stream written like a run's events (entry id "<sequence>-0", field
// "e" = the JSON of a FeedEvent), one per user (queue.FeedKey), with its own counter
// (queue.FeedSeqKey); one script numbers and appends an entry in one step, so the stream
// is contiguous. Waiting goes through the hub exactly like a run's follower (registered
// before the snapshot: no lost wake-up), and counts against the same per-user cap. The
// feed only notifies: the records stay in Appwrite, and a client that finds a hole (the
// stream is trimmed to FeedKeep entries and expires after FeedTTL idle, or Redis lost it)
// is told to reset — read its lists again and continue from the current position.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
)

const (
	// FeedKeep is about how many entries a user's feed keeps (XADD MAXLEN ~).
	FeedKeep = 500
	// FeedTTL is how long an idle feed is kept.
	FeedTTL = 7 * 24 * time.Hour
)

// FeedEvent is one change.
type FeedEvent struct {
	Sequence int64           `json:"sequence"`
	Type     string          `json:"type"`
	Data     json.RawMessage `json:"data"`
	At       time.Time       `json:"at"`
}

// FeedBatch is one feed poll's answer: the entries after the cursor, contiguous, as stored.
type FeedBatch struct {
	Events []json.RawMessage `json:"events"`
	Next   int64             `json:"next"` // pass as ?after= next time
	// Reset: the feed no longer holds what follows the cursor; read the lists again and
	// continue from Next.
	Reset bool `json:"reset"`
}

// publishScript: KEYS feed, seq; ARGV event JSON with sequence 0 placeholder "%SEQ%",
// keep, ttl ms. Numbers and appends in one step.
var publishScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[2])
local e = string.gsub(ARGV[1], '"sequence":0', '"sequence":' .. n, 1)
redis.call('XADD', KEYS[1], 'MAXLEN', '~', ARGV[2], n .. '-0', 'e', e)
redis.call('PEXPIRE', KEYS[1], ARGV[3])
redis.call('PEXPIRE', KEYS[2], ARGV[3])
return n
`)

// PublishFeed appends one change to owner's feed and returns its sequence.
func PublishFeed(ctx context.Context, rdb redis.Scripter, owner, typ string, data any) (int64, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return 0, err
	}
	ev, err := json.Marshal(FeedEvent{Sequence: 0, Type: typ, Data: raw, At: time.Now().UTC()})
	if err != nil {
		return 0, err
	}
	return publishScript.Run(ctx, rdb, []string{queue.FeedKey(owner), queue.FeedSeqKey(owner)},
		string(ev), FeedKeep, FeedTTL.Milliseconds()).Int64()
}

// WaitFeed answers owner's feed entries after `after`, waiting up to wait for the first
// one. A negative after answers only the current position (where a new client starts).
func (h *Hub) WaitFeed(ctx context.Context, owner string, after int64, wait time.Duration) (FeedBatch, error) {
	b := FeedBatch{Events: []json.RawMessage{}, Next: after}
	release, err := h.acquire(owner)
	if err != nil {
		return b, err
	}
	defer release()
	rdb := h.Client()
	if rdb == nil {
		return b, fmt.Errorf("%w: %v", ErrRedis, ErrStopped)
	}
	key := queue.FeedKey(owner)
	if after < 0 {
		cur, err := feedSeq(ctx, rdb, owner)
		return FeedBatch{Events: b.Events, Next: cur}, err
	}
	var w *waiter
	if wait > 0 {
		if w, err = h.watchKey(key, key, after, nil); err != nil {
			return b, fmt.Errorf("%w: %v", ErrRedis, err)
		}
		defer w.take()
	}
	b, err = readFeed(ctx, rdb, owner, after)
	if err != nil || len(b.Events) > 0 || b.Reset || w == nil {
		return b, err
	}
	timer := time.NewTimer(wait)
	defer timer.Stop()
	select {
	case <-w.ready:
	case <-timer.C:
		return b, nil
	case <-ctx.Done():
		return b, nil
	}
	evs, reread, err := w.take()
	if err != nil {
		return b, fmt.Errorf("%w: %v", ErrRedis, err)
	}
	if reread || len(evs) == 0 || evs[0].seq != after+1 {
		return readFeed(context.WithoutCancel(ctx), rdb, owner, after)
	}
	out := FeedBatch{Events: make([]json.RawMessage, len(evs)), Next: evs[len(evs)-1].seq}
	for i, e := range evs {
		out.Events[i] = e.raw
	}
	return out, nil
}

func feedSeq(ctx context.Context, rdb redis.Cmdable, owner string) (int64, error) {
	cur, err := rdb.Get(ctx, queue.FeedSeqKey(owner)).Int64()
	if errors.Is(err, redis.Nil) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %v", ErrRedis, err)
	}
	return cur, nil
}

// readFeed reads the entries after `after` (at most 200) and the counter in one round trip.
func readFeed(ctx context.Context, rdb redis.Cmdable, owner string, after int64) (FeedBatch, error) {
	b := FeedBatch{Events: []json.RawMessage{}, Next: after}
	pipe := rdb.Pipeline()
	rng := pipe.XRangeN(ctx, queue.FeedKey(owner), strconv.FormatInt(after+1, 10)+"-0", "+", 200)
	seq := pipe.Get(ctx, queue.FeedSeqKey(owner))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return b, fmt.Errorf("%w: %v", ErrRedis, err)
	}
	cur, _ := seq.Int64()
	msgs := rng.Val()
	evs, ok := entries(msgs)
	switch {
	case len(msgs) == 0 && cur == after:
		return b, nil // nothing new
	case len(msgs) == 0 || !ok || evs[0].seq != after+1 || !contiguous(evs):
		// A hole after the cursor, or a cursor beyond the counter (the feed expired or
		// Redis lost it): start over from the current position.
		return FeedBatch{Events: b.Events, Next: cur, Reset: true}, nil
	}
	b.Next = evs[len(evs)-1].seq
	for _, e := range evs {
		b.Events = append(b.Events, e.raw)
	}
	return b, nil
}
