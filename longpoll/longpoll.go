package longpoll

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/schema"
)

// Batch is one long-poll response.
type Batch struct {
	Events   []queue.Event `json:"events"`
	Next     int64         `json:"next"` // pass as ?after= next time
	Status   string        `json:"status"`
	Terminal bool          `json:"terminal"` // the run is over and every event was delivered

	// raw, when set, holds the events as the stream stores them (the JSON of each
	// queue.Event) instead of Events: the reader's entries are answered without being
	// decoded and encoded again. Len and All read either form.
	raw []json.RawMessage
}

// Len is the number of events in the batch.
func (b Batch) Len() int {
	if b.raw != nil {
		return len(b.raw)
	}
	return len(b.Events)
}

// All returns the batch's events, decoding them when the batch holds them as stored.
func (b Batch) All() ([]queue.Event, error) {
	if b.raw == nil {
		return b.Events, nil
	}
	out := make([]queue.Event, len(b.raw))
	for i, r := range b.raw {
		if err := json.Unmarshal(r, &out[i]); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// Each calls f with every event's sequence and its JSON exactly as the events array of
// MarshalJSON holds it (the stream service sends each as one SSE message). A batch is
// contiguous: the stored form's sequences are those up to Next.
func (b Batch) Each(f func(seq int64, ev json.RawMessage) error) error {
	if b.raw != nil {
		first := b.Next - int64(len(b.raw)) + 1
		for i, r := range b.raw {
			if err := f(first+int64(i), r); err != nil {
				return err
			}
		}
		return nil
	}
	for _, e := range b.Events {
		j, err := json.Marshal(e)
		if err != nil {
			return err
		}
		if err := f(e.Sequence, j); err != nil {
			return err
		}
	}
	return nil
}

// MarshalJSON writes the batch, its stored events byte for byte.
func (b Batch) MarshalJSON() ([]byte, error) {
	type plain Batch
	if b.raw == nil {
		return json.Marshal(plain(b))
	}
	status, err := json.Marshal(b.Status)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteString(`{"events":[`)
	for i, r := range b.raw {
		if i > 0 {
			buf.WriteByte(',')
		}
		buf.Write(r)
	}
	buf.WriteString(`],"next":`)
	buf.WriteString(strconv.FormatInt(b.Next, 10))
	buf.WriteString(`,"status":`)
	buf.Write(status)
	buf.WriteString(`,"terminal":`)
	buf.WriteString(strconv.FormatBool(b.Terminal))
	buf.WriteByte('}')
	return buf.Bytes(), nil
}

// Poller reads events. The zero value is not usable: set Hub (or RDB and Hub).
type Poller struct {
	Hub      *Hub
	RDB      redis.UniversalClient // snapshots; nil: the hub's followers' client
	Coalesce time.Duration         // window after the first new event, so a burst is one response
	MaxBatch int64                 // events per response (default 500)

	testHookWait func() // runs when the snapshot had nothing and the poll is about to wait
	testHookRead func() // runs on every snapshot read
}

// ErrRedis wraps a Redis failure (the handler answers 503).
var ErrRedis = errors.New("event stream unavailable")

// Run is what the poller needs to know about the (already owner-checked) run.
type Run struct {
	ID, Owner string
}

// Poll returns events with sequence > after, waiting up to wait for new ones. A user
// over the hub's follow cap gets a rate_limited fault at once.
func (p *Poller) Poll(ctx context.Context, st *schema.Store, run Run, after int64, wait time.Duration) (Batch, error) {
	b := Batch{Next: after, Events: []queue.Event{}}
	release, err := p.Hub.acquire(run.Owner)
	if err != nil {
		return b, err
	}
	defer release()
	var w *waiter
	if wait > 0 {
		// Register before the snapshot: whatever is appended from here on reaches the
		// waiter (the package doc's "No lost wake-up").
		if w, err = p.Hub.watch(run.ID, after); err != nil {
			return b, fmt.Errorf("%w: %v", ErrRedis, err)
		}
		defer w.take()
	}
	b, err = p.read(ctx, st, run, after)
	if err != nil || len(b.Events) > 0 || b.Terminal || w == nil {
		return b, err
	}
	if p.testHookWait != nil {
		p.testHookWait()
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
	if p.Coalesce > 0 {
		// Still registered: the reader keeps adding what arrives in the window.
		t := time.NewTimer(p.Coalesce)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	evs, reread, err := w.take()
	if err != nil {
		return b, fmt.Errorf("%w: %v", ErrRedis, err)
	}
	if !reread && len(evs) > 0 {
		if pb, ok := p.pushed(b, evs); ok {
			return pb, nil
		}
	}
	return p.read(context.WithoutCancel(ctx), st, run, after)
}

// pushed is the batch made of what the reader handed over, contiguous from prev.Next,
// passed on as stored. The status is the last one the events declare, else the
// snapshot's; only entries that can be run.* events are decoded for it. false: an entry
// did not decode (the caller reads the ordinary way).
func (p *Poller) pushed(prev Batch, evs []entry) (Batch, bool) {
	if n := p.maxBatch(); int64(len(evs)) > n {
		evs = evs[:n]
	}
	b := Batch{Next: evs[len(evs)-1].seq, Status: prev.Status, raw: make([]json.RawMessage, len(evs))}
	for i, e := range evs {
		b.raw[i] = e.raw
		// encoding/json writes `"type":"run.…"` for every run.* event; a match inside the
		// data only costs a decode.
		if !bytes.Contains(e.raw, runTypePrefix) {
			continue
		}
		var ev queue.Event
		if err := json.Unmarshal(e.raw, &ev); err != nil || ev.Sequence != e.seq {
			return Batch{}, false
		}
		if ev.Type == queue.EventRunStatus || queue.IsTerminalEvent(ev.Type) {
			var d struct {
				Status string `json:"status"`
			}
			if json.Unmarshal(ev.Data, &d) == nil && d.Status != "" {
				b.Status = d.Status
			} else if queue.IsTerminalEvent(ev.Type) {
				b.Status = strings.TrimPrefix(ev.Type, "run.")
			}
		}
		if i == len(evs)-1 {
			b.Terminal = queue.IsTerminalEvent(ev.Type)
		}
	}
	return b, true
}

var runTypePrefix = []byte(`"type":"run.`)

func (p *Poller) client() (redis.UniversalClient, error) {
	if p.RDB != nil {
		return p.RDB, nil
	}
	if c := p.Hub.Client(); c != nil {
		return c, nil
	}
	return nil, ErrStopped
}

func (p *Poller) maxBatch() int64 {
	if p.MaxBatch <= 0 {
		return 500
	}
	return p.MaxBatch
}

func (p *Poller) read(ctx context.Context, st *schema.Store, run Run, after int64) (Batch, error) {
	if p.testHookRead != nil {
		p.testHookRead()
	}
	max := p.maxBatch()
	b := Batch{Next: after, Events: []queue.Event{}}
	rdb, err := p.client()
	if err != nil {
		return b, fmt.Errorf("%w: %v", ErrRedis, err)
	}
	snap, err := queue.ReadSnapshot(ctx, rdb, run.ID, after, max)
	if err != nil {
		return b, fmt.Errorf("%w: %v", ErrRedis, err)
	}
	evs, first, state, haveState := snap.Events, snap.First, snap.State, snap.HaveState
	var rec *schema.Run
	if !haveState {
		// Redis does not know this run (not started yet, or its keys expired or were
		// lost): the record of truth says where it stands.
		rec, err = schema.For[schema.Run](st, schema.CollRuns).GetOwned(ctx, run.Owner, run.ID)
		if err != nil {
			return b, err
		}
		state.Status = string(rec.Status)
		state.Terminal = schema.IsTerminal(rec.Status)
		if rec.LastSequence != nil {
			state.LastSequence = *rec.LastSequence
		}
	}
	contiguous := len(evs) > 0 && evs[0].Sequence == after+1
	// The stream cannot serve the cursor when it starts after it, when it has a hole right
	// after it, or when it is empty though the run has events: read Appwrite.
	missing := !contiguous && (len(evs) > 0 || first > after+1 || state.LastSequence > after)
	if missing {
		durable, err := schema.For[schema.Event](st, schema.CollEvents).List(ctx, schema.ListQuery{
			Owner:   run.Owner,
			Filters: []string{query.Equal("runId", run.ID), query.GreaterThan("sequence", after)},
			Order:   []string{query.OrderAsc("sequence")}, Limit: int(max)})
		if err != nil {
			return b, err
		}
		from := make([]queue.Event, 0, len(durable.Items))
		for _, e := range durable.Items {
			ev := queue.Event{Sequence: e.Sequence, Type: e.Type}
			if e.Data != nil && *e.Data != "" {
				ev.Data = []byte(*e.Data)
			}
			if t, err := time.Parse(time.RFC3339Nano, e.CreatedAt); err == nil {
				ev.At = t
			}
			from = append(from, ev)
		}
		// Durable events first, then whatever the stream has beyond them.
		for _, e := range evs {
			if len(from) == 0 || e.Sequence > from[len(from)-1].Sequence {
				from = append(from, e)
			}
		}
		evs = from
	}
	// Deliver only a contiguous run starting right after the cursor.
	next := after
	out := make([]queue.Event, 0, len(evs))
	for _, e := range evs {
		if e.Sequence != next+1 {
			break
		}
		out = append(out, e)
		next = e.Sequence
		if int64(len(out)) >= max {
			break
		}
	}
	b.Events, b.Next, b.Status = out, next, state.Status
	lastIsTerminal := len(out) > 0 && queue.IsTerminalEvent(out[len(out)-1].Type)
	b.Terminal = lastIsTerminal || (state.Terminal && next >= state.LastSequence)
	return b, nil
}
