package longpoll

import (
	"context"
	"fmt"
	"sync"
	"time"

	"privateassistant/queue"
	"privateassistant/schema"
)

// Follower follows one run across batches (the stream service's SSE): unlike a Poll, it
// stays registered with the hub between batches, so an event the reader hands over goes
// out as it came — no unregistering, no registering again, no snapshot read per batch:
// delivery is a relay. It reads a snapshot only at the start, after a hole (the reader
// asked for a reread), and when a wait times out (the heartbeat: a settled run whose
// terminal event it missed is found there). Close releases it. Not safe for concurrent
// use: one goroutine (the stream's handler) calls Next.
type Follower struct {
	p       *Poller
	st      *schema.Store
	run     Run
	next    int64  // every sequence up to here was given
	status  string // the run's status as last known
	w       *waiter
	release func()
	once    sync.Once
}

// Follow starts following run after `after`. It counts against the hub's per-user cap
// until Close.
func (p *Poller) Follow(st *schema.Store, run Run, after int64) (*Follower, error) {
	release, err := p.Hub.acquire(run.Owner)
	if err != nil {
		return nil, err
	}
	return &Follower{p: p, st: st, run: run, next: after, release: release}, nil
}

// Close unregisters the follower. Idempotent.
func (f *Follower) Close() {
	f.once.Do(func() {
		if f.w != nil {
			f.w.take()
			f.w = nil
		}
		f.release()
	})
}

// Next returns the events after the last batch, waiting up to wait for the first one (0:
// only what is there). The first call and any after a hole read a snapshot (registered
// first: no lost wake-up); a wait that times out reads one too, still registered.
func (f *Follower) Next(ctx context.Context, wait time.Duration) (Batch, error) {
	if f.w != nil {
		b, res, err := f.relay(ctx, wait)
		switch res {
		case relayed:
			return b, err
		case timedOut:
			b, err := f.p.read(ctx, f.st, f.run, f.next)
			if err == nil {
				f.advance(b)
			}
			return b, err
		}
	}
	return f.snapshot(ctx, wait)
}

// snapshot registers at the cursor (again) and reads the ordinary way; when there is
// nothing yet it waits, still registered.
func (f *Follower) snapshot(ctx context.Context, wait time.Duration) (Batch, error) {
	if f.w != nil {
		f.w.take()
		f.w = nil
	}
	if wait > 0 {
		w, err := f.p.Hub.watch(f.run.ID, f.next)
		if err != nil {
			return Batch{Next: f.next, Events: []queue.Event{}}, fmt.Errorf("%w: %v", ErrRedis, err)
		}
		f.w = w
	}
	b, err := f.p.read(ctx, f.st, f.run, f.next)
	if err != nil {
		return b, err
	}
	f.advance(b)
	if b.Len() > 0 || b.Terminal || f.w == nil {
		return b, nil
	}
	b, res, err := f.relay(ctx, wait)
	if res == reread {
		return f.snapshot(ctx, 0) // a hole at once: read what is there, wait next time
	}
	return b, err
}

// advance moves the cursor past b. Events the reader handed over meanwhile that b already
// holds are dropped from the waiter's buffer, so nothing goes out twice.
func (f *Follower) advance(b Batch) {
	f.next = b.Next
	if b.Status != "" {
		f.status = b.Status
	}
	if f.w == nil {
		return
	}
	s := f.w.sh
	s.mu.Lock()
	defer s.mu.Unlock()
	i := 0
	for i < len(f.w.evs) && f.w.evs[i].seq <= f.next {
		i++
	}
	f.w.evs = f.w.evs[i:]
	if f.w.high < f.next {
		f.w.high = f.next
	}
}

type relayResult int

const (
	relayed  relayResult = iota // a batch (maybe empty: the context ended or wait was 0), or a failure
	reread                      // a hole: read a snapshot, registered again
	timedOut                    // nothing within wait: read a snapshot, still registered
)

// relay waits for what the reader hands over.
func (f *Follower) relay(ctx context.Context, wait time.Duration) (Batch, relayResult, error) {
	empty := Batch{Next: f.next, Events: []queue.Event{}}
	var timer *time.Timer
	for {
		evs, hole, err := f.w.drain()
		if err != nil {
			f.w.take()
			f.w = nil
			return empty, relayed, fmt.Errorf("%w: %v", ErrRedis, err)
		}
		if hole {
			return empty, reread, nil
		}
		if len(evs) > 0 && evs[0].seq == f.next+1 {
			if f.p.Coalesce > 0 && len(evs) < int(f.p.maxBatch()) {
				// Still registered: the reader keeps adding what arrives in the window.
				t := time.NewTimer(f.p.Coalesce)
				select {
				case <-t.C:
				case <-ctx.Done():
				}
				t.Stop()
				more, hole, _ := f.w.drain()
				evs = append(evs, more...)
				if hole {
					f.w.unread(evs)
					return empty, reread, nil
				}
			}
			b, ok := f.p.pushed(Batch{Next: f.next, Status: f.status}, evs)
			if !ok {
				return empty, reread, nil
			}
			if n := b.Len(); n < len(evs) { // over MaxBatch: the rest waits for the next call
				f.w.unread(evs[n:])
			}
			f.next, f.status = b.Next, b.Status
			return b, relayed, nil
		}
		if len(evs) > 0 {
			return empty, reread, nil // not contiguous with the cursor: read the ordinary way
		}
		if wait <= 0 {
			return empty, relayed, nil
		}
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-f.w.ready:
		case <-timer.C:
			return empty, timedOut, nil
		case <-ctx.Done():
			return empty, relayed, nil
		}
	}
}

// drain returns what w was given and keeps it registered.
func (w *waiter) drain() (evs []entry, reread bool, err error) {
	s := w.sh
	s.mu.Lock()
	defer s.mu.Unlock()
	evs, reread, err = w.evs, w.reread, w.err
	w.evs = nil
	return evs, reread, err
}

// unread puts back what a batch could not hold, ahead of anything given since.
func (w *waiter) unread(evs []entry) {
	s := w.sh
	s.mu.Lock()
	defer s.mu.Unlock()
	w.evs = append(append([]entry(nil), evs...), w.evs...)
	if len(w.evs) > 0 {
		signal(w.ready)
	}
}
