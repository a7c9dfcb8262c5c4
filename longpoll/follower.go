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
// delivery is a relay. It reads a snapshot only at the start and after a hole (the reader
// asked for a reread); Reread reads one on demand (after a silence: a settled run whose
// terminal event it missed is found there). Next never waits: the caller waits on Ready
// with its own timer (one per stream, reset, not one per wait), or, with Notify, is
// called back by the reader and takes what it was handed with TryNext (no goroutine
// waits at all). Close releases it. One goroutine at a time uses a Follower.
type Follower struct {
	p       *Poller
	st      *schema.Store
	run     Run
	next    int64  // every sequence up to here was given
	status  string // the run's status as last known
	w       *waiter
	notify  func()
	release func()
	once    sync.Once
}

// Notify makes the reader call fn when it handed something over (or found a hole, or
// failed) instead of signalling Ready: fn runs on the reader's goroutine, holding no
// lock of the hub's, and must not block (it may call TryNext, and Close). Set it before
// the first Next; Ready is nil then.
func (f *Follower) Notify(fn func()) { f.notify = fn }

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

// Ready receives when the reader may have handed over more since the last Next (or found
// a hole, or failed): call Next. It may fire with nothing new (Next answers empty).
func (f *Follower) Ready() <-chan struct{} {
	if f.w == nil {
		return nil
	}
	return f.w.ready
}

// Next returns the events after the last batch, without waiting (empty when there are
// none yet): the first call and any after a hole read a snapshot (registered first: no
// lost wake-up), the others what the reader handed over.
func (f *Follower) Next(ctx context.Context) (Batch, error) {
	if f.w != nil {
		if b, ok, err := f.relay(ctx, true); ok || err != nil {
			return b, err
		}
	}
	return f.snapshot(ctx)
}

// TryNext is Next without any wait or read: what the reader handed over, taken at once
// (without the Coalesce window). ok false: a snapshot is due (the first call, a hole, or
// entries not contiguous with the cursor): call Next, which reads it.
func (f *Follower) TryNext() (b Batch, ok bool, err error) {
	if f.w == nil {
		return Batch{Next: f.next, Events: []queue.Event{}}, false, nil
	}
	return f.relay(context.Background(), false)
}

// Reread reads a snapshot the ordinary way, still registered.
func (f *Follower) Reread(ctx context.Context) (Batch, error) {
	if f.w == nil {
		return f.snapshot(ctx)
	}
	b, err := f.p.read(ctx, f.st, f.run, f.next)
	if err == nil {
		f.advance(b)
	}
	return b, err
}

// snapshot registers at the cursor (again) and reads the ordinary way.
func (f *Follower) snapshot(ctx context.Context) (Batch, error) {
	if f.w != nil {
		f.w.take()
		f.w = nil
	}
	w, err := f.p.Hub.watchKey(queue.EventsKey(f.run.ID), f.run.ID, f.next, f.notify)
	if err != nil {
		return Batch{Next: f.next, Events: []queue.Event{}}, fmt.Errorf("%w: %v", ErrRedis, err)
	}
	f.w = w
	b, err := f.p.read(ctx, f.st, f.run, f.next)
	if err == nil {
		f.advance(b)
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

// relay takes what the reader handed over (with coalesce, after the Coalesce window).
// ok false: read a snapshot instead (a hole, or entries not contiguous with the cursor).
func (f *Follower) relay(ctx context.Context, coalesce bool) (Batch, bool, error) {
	empty := Batch{Next: f.next, Events: []queue.Event{}}
	evs, hole, err := f.w.drain()
	if err != nil {
		f.w.take()
		f.w = nil
		return empty, true, fmt.Errorf("%w: %v", ErrRedis, err)
	}
	if hole || (len(evs) > 0 && evs[0].seq != f.next+1) {
		return empty, false, nil
	}
	if len(evs) == 0 {
		return empty, true, nil
	}
	if coalesce && f.p.Coalesce > 0 && len(evs) < int(f.p.maxBatch()) {
		// Still registered: the reader keeps adding what arrives in the window.
		t := time.NewTimer(f.p.Coalesce)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		more, hole, _ := f.w.drain()
		if hole {
			return empty, false, nil
		}
		evs = append(evs, more...)
	}
	b, ok := f.p.pushed(Batch{Next: f.next, Status: f.status}, evs)
	if !ok {
		return empty, false, nil
	}
	if n := b.Len(); n < len(evs) { // over MaxBatch: the rest waits for the next call
		f.w.unread(evs[n:])
	}
	f.next, f.status = b.Next, b.Status
	return b, true, nil
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

// unread puts back what a batch could not hold, ahead of anything given since, and says
// so as the reader would (a notify runs on the caller's goroutine, after the unlock).
func (w *waiter) unread(evs []entry) {
	var calls []func()
	defer func() { runAll(calls) }()
	s := w.sh
	s.mu.Lock()
	defer s.mu.Unlock()
	w.evs = append(append([]entry(nil), evs...), w.evs...)
	if len(w.evs) > 0 {
		w.wake(&calls)
	}
}
