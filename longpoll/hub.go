package longpoll

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"hash/fnv"
	"io"
	"log/slog"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/fault"
	"privateassistant/internal/backoff"
	"privateassistant/internal/startstop"
	"privateassistant/queue"
)

// Defaults of a Hub.
const (
	DefaultMaxPerUser = 16
	DefaultReaders    = 64
	DefaultFollowPool = 16
	DefaultBlock      = 10 * time.Second
	DefaultLinger     = 5 * time.Second
	wakeTTL           = time.Hour
)

// The hub's connection buffers (go-redis's default is 32 KiB each way): a reader writes
// one XREAD and reads what it returns; a follower's snapshot is one pipelined read.
const (
	readerBuffer = 8 << 10
	followBuffer = 8 << 10
)

// ErrStopped: the hub was stopped; the poll answers ErrRedis.
var ErrStopped = errors.New("longpoll: hub stopped")

// Hub is the process's one reader of run event streams (see the package doc). Configure
// the fields, then Start; Stop ends it. A Hub runs once.
type Hub struct {
	// Base is the Redis the streams live in. The hub makes its own clients from it (the
	// followers' pool and one connection per reader) and closes them on Stop; Base itself
	// is only read.
	Base *redis.Options
	// Readers is the number of reader connections, each with its own XREAD over its share
	// of the streams (default 64). Redis pays for a read by the number of streams in it
	// (about 5 µs each, measured on Redis 7.0), and a read is re-issued whenever one of
	// its streams grows: sharding keeps that cost per append to streams/Readers. With
	// 1,000 followers, 16 readers cost Redis 294–762 µs per re-issued read (~62 streams)
	// and doubled its PING p50 under `make load`; 64 readers cost 70–86 µs (~16 streams)
	// and left PING p50 at 0.16–0.25 ms. A reader with nothing to watch sends nothing.
	Readers int
	// FollowPool is the pool size of the followers' client (default 16).
	FollowPool int
	// MaxPerUser caps one user's follows in flight in this process (default 16).
	MaxPerUser int
	// Block bounds one XREAD BLOCK; the read is re-issued when it ends (default 10 s).
	Block time.Duration
	// Linger keeps a stream in the read set after its last follower left (default 5 s).
	Linger time.Duration
	// Count caps the entries one read returns per stream (default 500).
	Count int64
	Log   *slog.Logger

	runner  startstop.Runner
	rdb     *redis.Client // followers' snapshots and the wake appends
	shards  []*shard
	mu      sync.Mutex
	follows map[string]int // owner → follows in flight
	stopped bool

	// testHookRead, when set, runs on the reader goroutine after a read returns and
	// before its entries are handed out.
	testHookRead func()
}

// shard is one reader: its connection, the streams it watches, and its waker.
type shard struct {
	h       *Hub
	conn    *redis.Client // PoolSize 1: the blocking read alone
	wakeKey string
	idle    chan struct{} // cap 1: a reader with nothing to read waits here
	kick    chan struct{} // cap 1: asks the waker to interrupt the read in flight

	mu      sync.Mutex
	watches map[string]*watch // by stream key
	reading bool              // a read with a fixed set is in flight (or about to be sent)
	kicked  bool              // a wake-up for that read is on its way
	stopped bool
}

// watch is one stream in a reader's set.
type watch struct {
	pos       int64 // read entries after this sequence
	sent      int64 // the position the read in flight started from
	waiters   map[*waiter]struct{}
	idleSince time.Time // when its last waiter left
}

// entry is one stream entry as the reader hands it over: its sequence (the entry id) and
// the stored JSON of its queue.Event, not decoded — decoding it (cold, 10–15 µs) was most
// of what the hand-over added to the delivery latency.
type entry struct {
	seq int64
	raw json.RawMessage
}

// waiter is one waiting follower. Its fields are guarded by its shard's mutex.
type waiter struct {
	key    string
	sh     *shard
	high   int64   // the highest sequence the follower has (its cursor, then what it was given)
	evs    []entry // given by the reader, contiguous from the cursor
	reread bool    // read again the ordinary way
	err    error
	ready  chan struct{} // cap 1; nil when notify is set
	// notify, when set, is called instead of signalling ready: on the reader's goroutine
	// (or Stop's), after the hand-over, holding no lock of the hub's. It must not block.
	notify func()
}

// wake tells w something changed: its notify is queued in *calls (run once the shard's
// lock is released), else its channel is signalled. Callers hold s.mu.
func (w *waiter) wake(calls *[]func()) {
	if w.notify != nil {
		*calls = append(*calls, w.notify)
		return
	}
	signal(w.ready)
}

// runAll runs the notifies wake queued.
func runAll(calls []func()) {
	for _, f := range calls {
		f()
	}
}

func (h *Hub) log() *slog.Logger {
	if h.Log != nil {
		return h.Log
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// Client is the followers' Redis client (nil before Start).
func (h *Hub) Client() *redis.Client {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.rdb
}

// Start builds the hub's clients and starts its readers. It does not touch the network:
// a reader sends nothing until a follower registers.
func (h *Hub) Start(ctx context.Context) error {
	if h.Base == nil {
		return errors.New("longpoll: Hub.Base is required")
	}
	h.mu.Lock()
	if h.rdb != nil {
		h.mu.Unlock()
		return startstop.ErrStarted
	}
	n := cmpDefault(h.Readers, DefaultReaders)
	fo := connOptions(h.Base)
	fo.PoolSize = cmpDefault(h.FollowPool, DefaultFollowPool)
	fo.MinIdleConns, fo.MaxIdleConns, fo.MaxActiveConns = 0, fo.PoolSize, fo.PoolSize
	fo.PipelinePoolSize = -1 // pipelines share the pool: PoolSize is the whole bound
	// go-redis gives every connection a 32 KiB read and a 32 KiB write buffer: 6 MiB for
	// the readers and the followers' pool, whatever the followers. A buffer's size only
	// sets how many bytes one system call moves (a longer reply is read in more calls).
	fo.ReadBufferSize, fo.WriteBufferSize = followBuffer, followBuffer
	h.rdb = redis.NewClient(&fo)
	h.follows = map[string]int{}
	h.shards = make([]*shard, n)
	for i := range h.shards {
		ro := connOptions(h.Base)
		ro.PoolSize, ro.MinIdleConns, ro.MaxIdleConns, ro.MaxActiveConns = 1, 0, 1, 1
		ro.MaxRetries = -1 // the reader's loop retries, with back-off
		ro.PipelinePoolSize = -1
		ro.ReadBufferSize, ro.WriteBufferSize = readerBuffer, readerBuffer
		h.shards[i] = &shard{h: h, conn: redis.NewClient(&ro), wakeKey: queue.LongPollWakeKey(randomID()),
			idle: make(chan struct{}, 1), kick: make(chan struct{}, 1), watches: map[string]*watch{}}
	}
	shards := h.shards
	h.mu.Unlock()
	if err := h.runner.Start(ctx, nil); err != nil {
		return err
	}
	for _, s := range shards {
		h.runner.Go(s.read)
		h.runner.Go(s.waker)
		// Closing the connection is what ends a blocked XREAD at once (go-redis does not
		// watch the context while it reads).
		h.runner.Go(func(ctx context.Context) { <-ctx.Done(); _ = s.conn.Close() })
	}
	return nil
}

// Stop ends the readers, closes the hub's clients and wakes every waiting follower with
// ErrStopped. Idempotent.
func (h *Hub) Stop() {
	h.mu.Lock()
	if h.stopped || h.rdb == nil {
		h.stopped = true
		h.mu.Unlock()
		return
	}
	h.stopped = true
	shards := h.shards
	h.mu.Unlock()
	for _, s := range shards {
		s.mu.Lock()
		s.stopped = true
		s.mu.Unlock()
	}
	h.runner.Stop()
	for _, s := range shards {
		s.failAll(ErrStopped, true)
	}
	_ = h.rdb.Close()
}

// acquire counts one follow of owner, refusing beyond MaxPerUser.
func (h *Hub) acquire(owner string) (release func(), err error) {
	limit := cmpDefault(h.MaxPerUser, DefaultMaxPerUser)
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.follows[owner] >= limit {
		return nil, fault.Errorf(fault.RateLimited, "too_many_follows",
			"too many live event requests at once (at most %d); close a tab or try again shortly", limit).Retry(2 * time.Second)
	}
	h.follows[owner]++
	var once sync.Once
	return func() {
		once.Do(func() {
			h.mu.Lock()
			if h.follows[owner]--; h.follows[owner] <= 0 {
				delete(h.follows, owner)
			}
			h.mu.Unlock()
		})
	}, nil
}

// Follows reports the follows in flight (all users).
func (h *Hub) Follows() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, c := range h.follows {
		n += c
	}
	return n
}

func (h *Hub) shardFor(run string) *shard {
	if len(h.shards) == 1 {
		return h.shards[0]
	}
	f := fnv.New32a()
	_, _ = f.Write([]byte(run))
	return h.shards[f.Sum32()%uint32(len(h.shards))]
}

// watch registers a follower of run holding every sequence up to after.
func (h *Hub) watch(run string, after int64) (*waiter, error) {
	return h.watchKey(queue.EventsKey(run), run, after, nil)
}

// watchKey registers a follower of any stream written like a run's (entry id = sequence,
// field "e" = JSON), sharded by shardBy: the per-user change feed (feed.go) uses it too.
// With notify the reader calls it instead of signalling the waiter's channel.
func (h *Hub) watchKey(key, shardBy string, after int64, notify func()) (*waiter, error) {
	h.mu.Lock()
	stopped, started := h.stopped, h.rdb != nil
	h.mu.Unlock()
	if stopped || !started {
		return nil, ErrStopped
	}
	s := h.shardFor(shardBy)
	w := &waiter{key: key, sh: s, high: after, notify: notify}
	if notify == nil {
		w.ready = make(chan struct{}, 1)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, ErrStopped
	}
	wt := s.watches[w.key]
	changed := false
	switch {
	case wt == nil:
		wt = &watch{pos: after, sent: -1, waiters: map[*waiter]struct{}{}}
		s.watches[w.key] = wt
		changed = true
	case after < wt.pos:
		wt.pos = after
		changed = true
	}
	wt.waiters[w] = struct{}{}
	if changed {
		s.changed()
	}
	return w, nil
}

// changed tells the reader its set changed. Callers hold s.mu.
func (s *shard) changed() {
	if !s.reading {
		select { // the reader takes the new set with its next read
		case s.idle <- struct{}{}:
		default:
		}
		return
	}
	if !s.kicked {
		s.kicked = true
		select {
		case s.kick <- struct{}{}:
		default:
		}
	}
}

// take unregisters w and returns what it was given.
func (w *waiter) take() (evs []entry, reread bool, err error) {
	s := w.sh
	s.mu.Lock()
	defer s.mu.Unlock()
	if wt := s.watches[w.key]; wt != nil {
		if _, ok := wt.waiters[w]; ok {
			delete(wt.waiters, w)
			if len(wt.waiters) == 0 {
				wt.idleSince = time.Now()
			}
		}
	}
	evs, reread, err = w.evs, w.reread, w.err
	w.evs = nil
	return evs, reread, err
}

// args builds the next read's streams and ids and marks the read in flight; nil when
// nothing is watched. Streams without followers for longer than Linger leave the set.
func (s *shard) args(wakeID string) []string {
	linger := cmpDefault(s.h.Linger, DefaultLinger)
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for k, wt := range s.watches {
		if len(wt.waiters) == 0 && now.Sub(wt.idleSince) > linger {
			delete(s.watches, k)
		}
	}
	if len(s.watches) == 0 || s.stopped {
		s.reading = false
		return nil
	}
	keys := make([]string, 0, 2*len(s.watches)+2)
	ids := make([]string, 0, len(s.watches)+1)
	for k, wt := range s.watches {
		keys = append(keys, k)
		ids = append(ids, strconv.FormatInt(wt.pos, 10)+"-0")
		wt.sent = wt.pos
	}
	keys = append(keys, s.wakeKey)
	ids = append(ids, wakeID)
	s.reading, s.kicked = true, false
	return append(keys, ids...)
}

// read is the reader's loop: one XREAD BLOCK over the set, hand out, repeat.
func (s *shard) read(ctx context.Context) {
	wakeID := "0-0"
	bo := backoff.Backoff{Min: 50 * time.Millisecond, Max: 2 * time.Second}
	block := cmpDefault(s.h.Block, DefaultBlock)
	count := s.h.Count
	if count <= 0 {
		count = 500
	}
	var lastErr string
	for {
		streams := s.args(wakeID)
		if streams == nil {
			select {
			case <-ctx.Done():
				return
			case <-s.idle:
				continue
			}
		}
		res, err := s.conn.XRead(ctx, &redis.XReadArgs{Streams: streams, Count: count, Block: block}).Result()
		s.mu.Lock()
		s.reading = false
		s.mu.Unlock()
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, redis.Nil) {
			bo.Reset()
			continue
		}
		if err != nil {
			if msg := err.Error(); msg != lastErr {
				s.h.log().Warn("event reader failed", "component", "longpoll", "err", err)
				lastErr = msg
			}
			s.failAll(err, false)
			_ = bo.Wait(ctx)
			continue
		}
		bo.Reset()
		lastErr = ""
		if s.h.testHookRead != nil {
			s.h.testHookRead()
		}
		woke := false
		for _, st := range res {
			if st.Stream == s.wakeKey {
				if n := len(st.Messages); n > 0 {
					wakeID = st.Messages[n-1].ID
				}
				continue
			}
			woke = s.dispatch(st.Stream, st.Messages) || woke
		}
		if woke {
			// Let the woken followers answer before this goroutine builds and sends the next
			// read: the runtime queues a woken goroutine behind the one that woke it.
			runtime.Gosched()
		}
	}
}

// dispatch hands a stream's new entries to its waiters, then calls the notifies of those
// that have one (a stream service's run stream writes to its client there); it reports
// whether it woke a waiter's goroutine.
func (s *shard) dispatch(key string, msgs []redis.XMessage) (woke bool) {
	if len(msgs) == 0 {
		return false
	}
	evs, ok := entries(msgs)
	var calls []func()
	defer func() { runAll(calls) }() // after the unlock below
	s.mu.Lock()
	defer s.mu.Unlock()
	wt := s.watches[key]
	if wt == nil {
		return false
	}
	last := entrySeq(msgs[len(msgs)-1].ID)
	for w := range wt.waiters {
		if w.reread || w.err != nil {
			continue
		}
		if !ok {
			w.reread, woke = true, woke || w.notify == nil
			w.wake(&calls)
			continue
		}
		i := 0
		for i < len(evs) && evs[i].seq <= w.high {
			i++
		}
		switch {
		case i == len(evs):
			// nothing new for it
		case evs[i].seq == w.high+1 && contiguous(evs[i:]):
			w.evs = append(w.evs, evs[i:]...)
			w.high = evs[len(evs)-1].seq
			woke = woke || w.notify == nil
			w.wake(&calls)
		case w.high < wt.sent:
			// It registered below the position this read started from, after the read was
			// sent: the next read starts at its cursor.
		default:
			// A hole after its cursor (the stream was trimmed under it): read the ordinary way.
			w.reread, woke = true, woke || w.notify == nil
			w.wake(&calls)
		}
	}
	if wt.pos == wt.sent && last > wt.pos {
		wt.pos = last
	}
	return woke
}

// failAll wakes every waiter with err; with drop the set is cleared too.
func (s *shard) failAll(err error, drop bool) {
	var calls []func()
	defer func() { runAll(calls) }() // after the unlock below
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, wt := range s.watches {
		for w := range wt.waiters {
			if w.err == nil {
				w.err = err
				w.wake(&calls)
			}
		}
	}
	if drop {
		clear(s.watches)
	}
}

// waker interrupts the read in flight by appending to the reader's wake stream.
func (s *shard) waker(ctx context.Context) {
	var lastErr string
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.kick:
		}
		pipe := s.h.rdb.Pipeline()
		pipe.XAdd(ctx, &redis.XAddArgs{Stream: s.wakeKey, MaxLen: 1, Values: []any{"w", "1"}})
		pipe.Expire(ctx, s.wakeKey, wakeTTL)
		if _, err := pipe.Exec(ctx); err != nil && ctx.Err() == nil {
			// The read ends by itself within Block and is re-issued with the new set.
			if msg := err.Error(); msg != lastErr {
				s.h.log().Warn("event reader wake-up failed", "component", "longpoll", "err", err)
				lastErr = msg
			}
		} else {
			lastErr = ""
		}
	}
}

// connOptions copies how to reach and authenticate to Redis from base, and nothing of
// its client's own machinery (push-notification processors, caches, hooks): base may be
// the options of a live client, whose handlers a second client must not share.
func connOptions(base *redis.Options) redis.Options {
	return redis.Options{
		Network: base.Network, Addr: base.Addr, Dialer: base.Dialer, OnConnect: base.OnConnect,
		Protocol: base.Protocol, Username: base.Username, Password: base.Password,
		CredentialsProvider: base.CredentialsProvider, CredentialsProviderContext: base.CredentialsProviderContext,
		StreamingCredentialsProvider: base.StreamingCredentialsProvider, DB: base.DB, TLSConfig: base.TLSConfig,
		DialTimeout: base.DialTimeout, ReadTimeout: base.ReadTimeout, WriteTimeout: base.WriteTimeout,
		ClientName: base.ClientName,
	}
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}

// entries turns stream messages into entries; false when one is not an event (no "e"
// field, not JSON, or an id that is no sequence).
func entries(msgs []redis.XMessage) ([]entry, bool) {
	out := make([]entry, 0, len(msgs))
	for _, m := range msgs {
		raw, ok := m.Values["e"].(string)
		seq := entrySeq(m.ID)
		if !ok || seq < 1 || !json.Valid([]byte(raw)) {
			return nil, false
		}
		out = append(out, entry{seq: seq, raw: json.RawMessage(raw)})
	}
	return out, true
}

func contiguous(evs []entry) bool {
	for i := 1; i < len(evs); i++ {
		if evs[i].seq != evs[i-1].seq+1 {
			return false
		}
	}
	return true
}

func entrySeq(id string) int64 {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return n
}

func randomID() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func cmpDefault[T int | int64 | time.Duration](v, def T) T {
	if v <= 0 {
		return def
	}
	return v
}
