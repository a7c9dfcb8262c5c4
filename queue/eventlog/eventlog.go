package eventlog

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/schema"
)

// ErrFenced: another attempt owns the run now; this writer must stop writing.
var ErrFenced = errors.New("eventlog: fenced out by a newer attempt")

// AttemptKey holds the token of the attempt allowed to write a run's events: the fence.
func AttemptKey(runID string) string { return queue.AttemptKey(runID) }

// NewToken returns a fresh random attempt token.
func NewToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// fenceTTL bounds how long a fence outlives a writer that never released it.
const fenceTTL = 30 * 24 * time.Hour

// appendScript: KEYS fence, stream, hot state[, mark]. Returns -1 when fenced, -2 when
// the stream already holds this sequence or a later one (a retry of an append that
// landed), 1 when appended. With a fourth key it also sets the event's Mark (ARGV 8, its
// expiry in ms ARGV 9) in the same step, only when the event is appended.
var appendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local ok = redis.pcall('XADD', KEYS[2], ARGV[2], 'e', ARGV[3])
if type(ok) == 'table' and ok.err then return -2 end
redis.call('HSET', KEYS[3], 'lastSeq', ARGV[4], 'status', ARGV[5], 'terminal', ARGV[6], 'heartbeatAt', ARGV[7])
if #KEYS >= 4 then redis.call('SET', KEYS[4], ARGV[8], 'PX', ARGV[9]) end
return 1
`)

// Mark is a key of the run (same hash slot: "pa:run:{<id>}:…") written together with an
// event, in the same fenced script as its append: it lands exactly when the event does,
// never before it and never without it. The executor marks an event with the native
// stream position it completes (agent/executor/seq.go), which used to be a second fenced
// round trip after the append.
type Mark struct {
	Key   string
	Value string
	TTL   time.Duration
}

// pending is an event waiting for its Redis append, with its mark.
type pending struct {
	ev   queue.Event
	mark *Mark
}

// beatScript: KEYS fence, hot state. Moves the hot heartbeat only for the fence holder.
var beatScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
redis.call('HSET', KEYS[2], 'heartbeatAt', ARGV[2])
return 1
`)

// Log is one attempt's event sink. Its methods are safe to call from several goroutines
// (writers are serialized and every drop checks the sequence it removes), but the
// executor gives it exactly one writer: the attempt's loop.
type Log struct {
	rdb   redis.UniversalClient
	store *schema.Store
	run   string
	owner string
	token string

	// wmu serializes writers (Emit, Flush, Beat) for the whole of their I/O: two flushes
	// never send the same head twice.
	wmu sync.Mutex

	mu       sync.Mutex // guards the fields below; never held across I/O
	next     int64
	status   schema.RunStatus
	redisQ   []pending     // in order; a failed append blocks later ones
	storeQ   []queue.Event // in order; only events the stream accepted are written
	appended int64         // the highest sequence the stream holds from this run
	stored   int64         // events written to Appwrite (for metrics)
}

// Open claims the fence for token and finds the next sequence: one after the highest the
// stream, the hot state, the record or Appwrite's events know. Every write an older
// holder attempts after this is refused (ErrFenced).
func Open(ctx context.Context, rdb redis.UniversalClient, st *schema.Store, run *schema.Run, token string) (*Log, error) {
	if err := rdb.Set(ctx, AttemptKey(run.ID), token, fenceTTL).Err(); err != nil {
		return nil, fmt.Errorf("eventlog: claim: %w", err)
	}
	l := &Log{rdb: rdb, store: st, run: run.ID, owner: run.OwnerID, token: token, status: run.Status}
	var last int64
	if run.LastSequence != nil {
		last = *run.LastSequence
	}
	if s, ok, err := queue.GetRunState(ctx, rdb, run.ID); err == nil && ok {
		last = max(last, s.LastSequence)
	}
	if msgs, err := rdb.XRevRangeN(ctx, queue.EventsKey(run.ID), "+", "-", 1).Result(); err == nil && len(msgs) == 1 {
		var n int64
		fmt.Sscanf(msgs[0].ID, "%d-", &n)
		last = max(last, n)
	}
	// Appwrite may hold events Redis lost.
	if page, err := schema.For[schema.Event](st, schema.CollEvents).List(ctx, schema.ListQuery{Owner: run.OwnerID,
		Filters: []string{query.Equal("runId", run.ID)}, Order: []string{query.OrderDesc("sequence")}, Limit: 1}); err == nil && len(page.Items) == 1 {
		last = max(last, page.Items[0].Sequence)
	}
	l.next, l.appended = last+1, last
	if err := l.backfill(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// backfill queues for Appwrite every stream entry Appwrite does not have: an earlier
// attempt that died (SIGKILL) may have appended events to Redis whose durable copy was
// still pending.
func (l *Log) backfill(ctx context.Context) error {
	msgs, err := l.rdb.XRange(ctx, queue.EventsKey(l.run), "-", "+").Result()
	if err != nil || len(msgs) == 0 {
		return nil // nothing in Redis to copy (or Redis is down: the stream is not ours to read now)
	}
	stored, err := schema.For[schema.Event](l.store, schema.CollEvents).All(ctx, schema.ListQuery{Owner: l.owner,
		Filters: []string{query.Equal("runId", l.run), query.Select([]interface{}{"sequence", "ownerId"})}, Limit: 100})
	if err != nil {
		return fmt.Errorf("eventlog: backfill: %w", err)
	}
	have := make(map[int64]bool, len(stored))
	for _, e := range stored {
		have[e.Sequence] = true
	}
	evs, err := decode(msgs)
	if err != nil {
		return err
	}
	for _, ev := range evs {
		if !have[ev.Sequence] {
			l.storeQ = append(l.storeQ, ev)
		}
	}
	return nil
}

func decode(msgs []redis.XMessage) ([]queue.Event, error) {
	out := make([]queue.Event, 0, len(msgs))
	for _, m := range msgs {
		raw, _ := m.Values["e"].(string)
		var ev queue.Event
		if err := json.Unmarshal([]byte(raw), &ev); err != nil {
			return nil, fmt.Errorf("eventlog: decode %s: %w", m.ID, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

// Run returns the run id.
func (l *Log) Run() string { return l.run }

// Last returns the highest sequence emitted so far.
func (l *Log) Last() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.next - 1
}

// Stored returns how many events reached Appwrite.
func (l *Log) Stored() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.stored
}

// SetStatus records the status the hot state reports with the next append.
func (l *Log) SetStatus(status schema.RunStatus) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.status = status
}

// Pending reports how many events are not yet in Redis and Appwrite.
func (l *Log) Pending() (redisN, storeN int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.redisQ), len(l.storeQ)
}

// Check returns ErrFenced when the fence no longer holds this log's token (another
// attempt claimed the run), nil while it does, or the Redis error.
func (l *Log) Check(ctx context.Context) error {
	v, err := l.rdb.Get(ctx, AttemptKey(l.run)).Result()
	if errors.Is(err, redis.Nil) || (err == nil && v != l.token) {
		return ErrFenced
	}
	if err != nil {
		return fmt.Errorf("eventlog: fence: %w", err)
	}
	return nil
}

// Beat moves the hot state's heartbeat, fenced like an append.
func (l *Log) Beat(ctx context.Context) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	n, err := beatScript.Run(ctx, l.rdb, []string{AttemptKey(l.run), queue.StateKey(l.run)}, l.token, time.Now().UTC().Format(time.RFC3339Nano)).Int()
	if err != nil {
		return fmt.Errorf("eventlog: beat: %w", err)
	}
	if n == -1 {
		return ErrFenced
	}
	return nil
}

// Emit numbers an event and appends it to Redis now. durableNow also writes it to
// Appwrite now; otherwise it waits for the next Flush (text deltas are batched).
// ErrFenced means this attempt lost the run; any other error leaves the event pending.
func (l *Log) Emit(ctx context.Context, data queue.EventData, durableNow bool) (queue.Event, error) {
	return l.EmitMarked(ctx, data, durableNow, nil)
}

// EmitMarked is Emit with a Mark written atomically with the event's append (nil: none).
// The mark waits with the event when the append fails, and lands with it on a later flush.
func (l *Log) EmitMarked(ctx context.Context, data queue.EventData, durableNow bool, mark *Mark) (queue.Event, error) {
	raw, err := json.Marshal(data)
	if err != nil {
		return queue.Event{}, err
	}
	if mark != nil && !strings.HasPrefix(mark.Key, queue.RunKeyPrefix+l.run+"}:") {
		return queue.Event{}, fmt.Errorf("eventlog: mark %q is not a key of run %s", mark.Key, l.run)
	}
	l.wmu.Lock()
	defer l.wmu.Unlock()
	ev := l.enqueue(data.EventType(), raw, mark)
	if err := l.flushRedis(ctx); err != nil {
		return ev, err
	}
	if durableNow {
		_ = l.flushStore(ctx)
	}
	return ev, nil
}

func (l *Log) enqueue(typ string, raw json.RawMessage, mark *Mark) queue.Event {
	l.mu.Lock()
	defer l.mu.Unlock()
	ev := queue.Event{Sequence: l.next, Type: typ, Data: raw, At: time.Now().UTC()}
	l.next++
	l.redisQ = append(l.redisQ, pending{ev, mark})
	l.storeQ = append(l.storeQ, ev)
	return ev
}

// Flush retries everything pending once. It returns the first error (nil when clean).
func (l *Log) Flush(ctx context.Context) error {
	l.wmu.Lock()
	defer l.wmu.Unlock()
	rerr := l.flushRedis(ctx)
	if errors.Is(rerr, ErrFenced) {
		return rerr
	}
	serr := l.flushStore(ctx)
	if rerr != nil {
		return rerr
	}
	return serr
}

// redisHead returns the first event waiting for its Redis append, if any.
func (l *Log) redisHead() (pending, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.redisQ) == 0 {
		return pending{}, false
	}
	return l.redisQ[0], true
}

// dropRedis removes the head of the Redis queue only if it is still the event with
// sequence seq (see drop).
func (l *Log) dropRedis(seq int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.redisQ) == 0 || l.redisQ[0].ev.Sequence != seq {
		return false
	}
	l.redisQ = l.redisQ[1:]
	return true
}

// head returns the first event of q, if any.
func (l *Log) head(q *[]queue.Event) (queue.Event, bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(*q) == 0 {
		return queue.Event{}, false
	}
	return (*q)[0], true
}

// drop removes the head of q only if it is still the event with sequence seq: a drop
// never removes an entry it did not send.
func (l *Log) drop(q *[]queue.Event, seq int64) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(*q) == 0 || (*q)[0].Sequence != seq {
		return false
	}
	*q = (*q)[1:]
	return true
}

// flushRedis appends pending events in order. Callers hold wmu.
func (l *Log) flushRedis(ctx context.Context) error {
	for {
		p, ok := l.redisHead()
		if !ok {
			return nil
		}
		ev := p.ev
		l.mu.Lock()
		status := l.status
		l.mu.Unlock()
		b, _ := json.Marshal(ev)
		keys := []string{AttemptKey(l.run), queue.EventsKey(l.run), queue.StateKey(l.run)}
		args := []any{l.token, fmt.Sprintf("%d-0", ev.Sequence), b, ev.Sequence, string(status), fmt.Sprint(status.Terminal()),
			time.Now().UTC().Format(time.RFC3339Nano)}
		if m := p.mark; m != nil {
			keys = append(keys, m.Key)
			args = append(args, m.Value, max(m.TTL.Milliseconds(), 1))
		}
		n, err := appendScript.Run(ctx, l.rdb, keys, args...).Int()
		if err != nil {
			return fmt.Errorf("eventlog: redis: %w", err)
		}
		if n == -1 {
			return ErrFenced
		}
		// 1 appended, -2 already there (a retry of an append that landed, with its mark):
		// both done.
		if l.dropRedis(ev.Sequence) {
			l.mu.Lock()
			l.appended = max(l.appended, ev.Sequence)
			l.mu.Unlock()
		}
	}
}

// flushStore writes pending events to Appwrite in order, but only those the stream has
// accepted: Appwrite's copy of a run's events is always a prefix-closed subset of what
// the fence holder appended, never an event a fenced writer numbered. Callers hold wmu.
func (l *Log) flushStore(ctx context.Context) error {
	events := schema.For[schema.Event](l.store, schema.CollEvents)
	for {
		ev, ok := l.head(&l.storeQ)
		if !ok {
			return nil
		}
		l.mu.Lock()
		accepted := ev.Sequence <= l.appended
		l.mu.Unlock()
		if !accepted {
			return nil // waits for its Redis append
		}
		rec := &schema.Event{OwnerID: l.owner, RunID: l.run, Sequence: ev.Sequence, Type: ev.Type}
		if len(ev.Data) > 0 {
			// Whole, whatever its size: data beyond the field goes to a file the record
			// names (schema/overflow.go), and reads through schema fill it back in.
			d := string(ev.Data)
			rec.Data = &d
		}
		_, err := events.Create(ctx, schema.EventDocID(l.run, ev.Sequence), l.owner, rec)
		if err != nil && !errors.Is(err, schema.ErrConflict) {
			return fmt.Errorf("eventlog: appwrite: %w", err)
		}
		if l.drop(&l.storeQ, ev.Sequence) {
			l.mu.Lock()
			l.stored++
			l.mu.Unlock()
		}
	}
}

// Release lets the fence expire in a day if this attempt still holds it (a clean end).
func (l *Log) Release(ctx context.Context) {
	_ = l.rdb.Eval(ctx, `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], 86400000) end return 0`,
		[]string{AttemptKey(l.run)}, l.token).Err()
}
