// Package eventlog is a run's event sink for its executor: it numbers events (1, 2, 3 …
// no gaps), appends each to the run's Redis stream at once (what long-polls read), and
// persists each to Appwrite's events collection.
//
// Fencing: every append runs a script that first checks the run's attempt key holds this
// executor's token, so a ghost handler from an earlier attempt cannot write. Durability:
// an event that Redis or Appwrite refused stays pending and is retried (Flush); the
// deterministic document id and stream entry id make a retry a no-op if the first try
// actually landed, so nothing is lost and nothing doubles while either store is down.
package eventlog

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/schema"
)

// ErrFenced: another attempt owns the run now; this executor must stop writing.
var ErrFenced = errors.New("eventlog: fenced out by a newer attempt")

// AttemptKey holds the token of the attempt allowed to write a run's events.
func AttemptKey(runID string) string { return "pa:run:{" + runID + "}:attempt" }

var appendScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return -1 end
local ok = redis.pcall('XADD', KEYS[2], ARGV[2], 'e', ARGV[3])
if type(ok) == 'table' and ok.err then return -2 end
redis.call('HSET', KEYS[3], 'lastSeq', ARGV[4], 'status', ARGV[5], 'terminal', ARGV[6], 'heartbeatAt', ARGV[7])
return 1
`)

// Log is one attempt's event sink.
type Log struct {
	RDB   redis.UniversalClient
	Store *schema.Store
	Run   string
	Owner string
	Token string

	mu       sync.Mutex
	next     int64
	status   string
	terminal bool
	redisQ   []queue.Event // appended in order; a failed one blocks later ones
	storeQ   []queue.Event
	stored   int64 // events written to Appwrite (for metrics)
}

// Open claims the attempt (sets the fence to token) and finds the next sequence: one
// after the highest the stream, the hot state or the record knows.
func Open(ctx context.Context, rdb redis.UniversalClient, st *schema.Store, run *schema.Run, token string) (*Log, error) {
	if err := rdb.Set(ctx, AttemptKey(run.ID), token, 30*24*time.Hour).Err(); err != nil {
		return nil, fmt.Errorf("eventlog: claim: %w", err)
	}
	l := &Log{RDB: rdb, Store: st, Run: run.ID, Owner: run.OwnerID, Token: token, status: run.Status}
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
	l.next = last + 1
	if err := l.backfill(ctx); err != nil {
		return nil, err
	}
	return l, nil
}

// backfill queues for Appwrite every stream entry Appwrite does not have: an earlier
// attempt that died (SIGKILL) may have appended events to Redis whose durable copy was
// still pending.
func (l *Log) backfill(ctx context.Context) error {
	msgs, err := l.RDB.XRange(ctx, queue.EventsKey(l.Run), "-", "+").Result()
	if err != nil || len(msgs) == 0 {
		return nil // nothing in Redis to copy (or Redis is down: the stream is not ours to read now)
	}
	stored, err := schema.For[schema.Event](l.Store, schema.CollEvents).All(ctx, schema.ListQuery{Owner: l.Owner,
		Filters: []string{query.Equal("runId", l.Run), query.Select([]interface{}{"sequence", "ownerId"})}, Limit: 100})
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
func (l *Log) SetStatus(status string, terminal bool) {
	l.mu.Lock()
	l.status, l.terminal = status, terminal
	l.mu.Unlock()
}

// Emit numbers an event and appends it to Redis now. durableNow also writes it to
// Appwrite now; otherwise it waits for the next Flush (text deltas are batched).
// ErrFenced means this attempt lost the run; any other error leaves the event pending.
func (l *Log) Emit(ctx context.Context, typ string, data any, durableNow bool) (queue.Event, error) {
	var raw json.RawMessage
	if data != nil {
		b, err := json.Marshal(data)
		if err != nil {
			return queue.Event{}, err
		}
		raw = b
	}
	l.mu.Lock()
	ev := queue.Event{Sequence: l.next, Type: typ, Data: raw, At: time.Now().UTC()}
	l.next++
	l.redisQ = append(l.redisQ, ev)
	l.storeQ = append(l.storeQ, ev)
	l.mu.Unlock()
	if err := l.flushRedis(ctx); err != nil {
		return ev, err
	}
	if durableNow {
		_ = l.flushStore(ctx)
	}
	return ev, nil
}

// Pending reports how many events are not yet in Redis and Appwrite.
func (l *Log) Pending() (redisN, storeN int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.redisQ), len(l.storeQ)
}

// Flush retries everything pending once. It returns the first error (nil when clean).
func (l *Log) Flush(ctx context.Context) error {
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

func (l *Log) flushRedis(ctx context.Context) error {
	for {
		l.mu.Lock()
		if len(l.redisQ) == 0 {
			l.mu.Unlock()
			return nil
		}
		ev := l.redisQ[0]
		status, term := l.status, l.terminal
		l.mu.Unlock()
		b, _ := json.Marshal(ev)
		n, err := appendScript.Run(ctx, l.RDB, []string{AttemptKey(l.Run), queue.EventsKey(l.Run), queue.StateKey(l.Run)},
			l.Token, fmt.Sprintf("%d-0", ev.Sequence), b, ev.Sequence, status, fmt.Sprint(term), time.Now().UTC().Format(time.RFC3339Nano)).Int()
		if err != nil {
			return fmt.Errorf("eventlog: redis: %w", err)
		}
		if n == -1 {
			return ErrFenced
		}
		// 1 appended, -2 already there (a retry of an append that landed): both done.
		l.mu.Lock()
		l.redisQ = l.redisQ[1:]
		l.mu.Unlock()
	}
}

func (l *Log) flushStore(ctx context.Context) error {
	events := schema.For[schema.Event](l.Store, schema.CollEvents)
	for {
		l.mu.Lock()
		if len(l.storeQ) == 0 {
			l.mu.Unlock()
			return nil
		}
		ev := l.storeQ[0]
		l.mu.Unlock()
		rec := &schema.Event{OwnerID: l.Owner, RunID: l.Run, Sequence: ev.Sequence, Type: ev.Type}
		if len(ev.Data) > 0 {
			d := string(ev.Data)
			if len(d) > schema.SizeEventData {
				// Oversized payloads keep their type and sequence; the stream has the whole.
				d = `{"truncated":true}`
			}
			rec.Data = &d
		}
		_, err := events.Create(ctx, schema.EventDocID(l.Run, ev.Sequence), l.Owner, rec)
		if err != nil && !errors.Is(err, schema.ErrConflict) {
			return fmt.Errorf("eventlog: appwrite: %w", err)
		}
		l.mu.Lock()
		l.storeQ = l.storeQ[1:]
		l.stored++
		l.mu.Unlock()
	}
}

// Release drops the fence if this attempt still holds it (a clean end).
func (l *Log) Release(ctx context.Context) {
	_ = l.RDB.Eval(ctx, `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], 86400000) end return 0`,
		[]string{AttemptKey(l.Run)}, l.Token).Err()
}
