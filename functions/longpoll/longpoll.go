// Package longpoll serves a run's events after a cursor, waiting for the next ones.
//
// Events live in the run's Redis stream (entry id = sequence), appended by the executor
// the moment they happen, and durably in Appwrite's events collection. A poll reads the
// stream after the cursor; if the stream no longer holds that range (trimmed, expired,
// or Redis lost it) it reads Appwrite instead. With nothing new and the run still going,
// it blocks on XREAD up to the wait, then coalesces a short window so a burst of deltas
// arrives as one response. The client always receives a contiguous run of sequences
// starting right after its cursor.
package longpoll

import (
	"context"
	"errors"
	"fmt"
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
}

// Poller reads events.
type Poller struct {
	RDB      redis.UniversalClient
	Coalesce time.Duration // window after the first new event, so a burst is one response
	MaxBatch int64         // events per response (default 500)
}

// ErrRedis wraps a Redis failure (the handler answers 503).
var ErrRedis = errors.New("event stream unavailable")

// Run is what the poller needs to know about the (already owner-checked) run.
type Run struct {
	ID, Owner string
}

// Poll returns events with sequence > after, waiting up to wait for new ones.
func (p *Poller) Poll(ctx context.Context, st *schema.Store, run Run, after int64, wait time.Duration) (Batch, error) {
	b, _, err := p.read(ctx, st, run, after)
	if err != nil {
		return b, err
	}
	if len(b.Events) == 0 && !b.Terminal && wait > 0 {
		evs, err := queue.WaitEvents(ctx, p.RDB, run.ID, after, wait)
		if err != nil && ctx.Err() == nil {
			return b, fmt.Errorf("%w: %v", ErrRedis, err)
		}
		if len(evs) > 0 {
			if p.Coalesce > 0 {
				select {
				case <-time.After(p.Coalesce):
				case <-ctx.Done():
				}
			}
			rctx := context.WithoutCancel(ctx)
			b, _, err = p.read(rctx, st, run, after)
			if err != nil {
				return b, err
			}
		}
	}
	return b, nil
}

func (p *Poller) read(ctx context.Context, st *schema.Store, run Run, after int64) (Batch, queue.RunState, error) {
	max := p.MaxBatch
	if max <= 0 {
		max = 500
	}
	b := Batch{Next: after, Events: []queue.Event{}}
	snap, err := queue.ReadSnapshot(ctx, p.RDB, run.ID, after, max)
	if err != nil {
		return b, queue.RunState{}, fmt.Errorf("%w: %v", ErrRedis, err)
	}
	evs, first, state, haveState := snap.Events, snap.First, snap.State, snap.HaveState
	var rec *schema.Run
	if !haveState {
		// Redis does not know this run (not started yet, or its keys expired or were
		// lost): the record of truth says where it stands.
		rec, err = schema.For[schema.Run](st, schema.CollRuns).GetOwned(ctx, run.Owner, run.ID)
		if err != nil {
			return b, state, err
		}
		state.Status = rec.Status
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
			return b, state, err
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
	return b, state, nil
}
