package gpu

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"
)

// Errors a caller of Serve or Renew classifies.
var (
	// ErrNotLeased: no live grant covers the request (or the named run holds none).
	ErrNotLeased = errors.New("gpu: no live grant covers the request")
	// ErrStaleGeneration: the request's generation is not the one its grant holds now (the
	// grant was revoked or expired, or the model was swapped or reloaded since).
	ErrStaleGeneration = errors.New("gpu: stale lease generation")
	// ErrGrantEnded: the grant was released, revoked or expired.
	ErrGrantEnded = errors.New("gpu: grant ended")
	// ErrLoadFailed: the model could not be made ready.
	ErrLoadFailed = errors.New("gpu: load failed")
)

// Grant is a run's lease on the device for one model, at one device generation. Done
// closes when the grant is taken back (a swap's drain bound passed, the backend crashed,
// control of the device was lost, or it expired without renewal); Reason says why.
type Grant struct {
	ID         string
	Run        string // the run holding it ("" when the caller named none)
	Device     string
	Model      string
	Generation int64
	Endpoint   string

	done   chan struct{}
	m      *Manager
	once   sync.Once
	yield  chan struct{} // closed (once, by the owner) when the holder is asked to yield
	yieldN bool          // owner-goroutine only: yield is closed
	reason string        // written by the owner before done closes

	// Owner-goroutine only: when the grant expires, and whether anything renews it (a
	// run's lease the holder loop checks, or the holder's own Renew calls).
	expire    time.Time
	renewable bool
	granted   time.Time
	exclusive bool // holds the whole device (a qualification)
}

// Done closes when the grant is no longer valid.
func (g *Grant) Done() <-chan struct{} { return g.done }

// Yield closes when the manager asks the holder to pause at its next turn boundary and
// release the grant: its model is preemptible and a swap to another model is due. The
// grant stays valid until released (nothing is cut); a holder that ignores it is waited
// for, as for a model that is not preemptible.
func (g *Grant) Yield() <-chan struct{} { return g.yield }

// askYield closes Yield once (owner goroutine).
func (g *Grant) askYield() {
	if !g.yieldN {
		g.yieldN = true
		close(g.yield)
	}
}

// Reason says why the grant was taken back (valid once Done is closed; "" after Release).
func (g *Grant) Reason() string {
	select {
	case <-g.done:
		return g.reason
	default:
		return ""
	}
}

// Release ends the grant. Idempotent.
func (g *Grant) Release() {
	g.once.Do(func() {
		select {
		case g.m.releases <- g.ID:
		case <-g.m.quit:
		}
	})
}

// Renew is the holder's heartbeat: it extends the grant by the device's GrantTTL, and
// from the first call on the grant expires unless renewed again in time. It returns
// ErrGrantEnded once the grant was released, revoked or expired.
func (g *Grant) Renew() error {
	r := renewReq{id: g.ID, reply: make(chan error, 1)}
	select {
	case g.m.renews <- r:
	case <-g.m.quit:
		return ErrStopped
	}
	return <-r.reply
}

type renewReq struct {
	id    string
	reply chan error
}

type waiter struct {
	Waiter
	run    string
	reply  chan result
	onWait func(pos int, reason string)
	lastP  int
	lastR  string
	notes  int // notifications issued (owner goroutine)

	noteMu    sync.Mutex // serializes deliveries; an older one arriving late is dropped
	delivered int
}

// notify delivers a waiting notification off the owner goroutine, in order.
func (w *waiter) notify(n, pos int, reason string) {
	w.noteMu.Lock()
	defer w.noteMu.Unlock()
	if n <= w.delivered {
		return
	}
	w.delivered = n
	w.onWait(pos, reason)
}

type result struct {
	g   *Grant
	err error
}

// Acquire waits for a grant on model held by no named run (tests, tools). Runs use
// AcquireFor so that the gateway can fence their requests.
func (m *Manager) Acquire(ctx context.Context, model string, onWait func(pos int, reason string)) (*Grant, error) {
	return m.AcquireFor(ctx, "", model, onWait)
}

// AcquireFor waits for a grant on model for run. onWait sees the queue position and the
// reason while the caller waits (shown to users as waiting_for_resource).
func (m *Manager) AcquireFor(ctx context.Context, run, model string, onWait func(pos int, reason string)) (*Grant, error) {
	return m.wait(ctx, &waiter{Waiter: Waiter{Model: model}, run: run, reply: make(chan result, 1), onWait: onWait})
}

// wait queues w on the owner goroutine and waits for its grant; cancelled, it leaves the
// queue (and releases a grant that raced the cancellation).
func (m *Manager) wait(ctx context.Context, w *waiter) (*Grant, error) {
	// The id is set here, before the owner sees w: a cancellation names it without
	// reading what the owner goroutine writes (it was a data race, and a cancel that read
	// the id unset left a phantom waiter that was later granted the device forever).
	w.ID = "w" + strconv.FormatInt(m.ids.Add(1), 10)
	select {
	case m.acquires <- w:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-m.quit:
		return nil, ErrStopped
	}
	select {
	case r := <-w.reply:
		return r.g, r.err
	case <-ctx.Done():
		select {
		case m.cancels <- w.ID:
		case <-m.quit:
		}
		// A grant may have raced the cancellation.
		select {
		case r := <-w.reply:
			if r.g != nil {
				r.g.Release()
			}
		default:
		}
		return nil, ctx.Err()
	case <-m.quit:
		return nil, ErrStopped
	}
}

// Serving is what one request may use: the endpoint and the generation it is served
// under, and a channel that closes when the grant it rides on is taken back (nil for a
// request that names no run).
type Serving struct {
	Endpoint   string
	Generation int64
	Done       <-chan struct{}
}

type admitReq struct {
	run, model string
	gen        int64
	reply      chan admitRes
}

type admitRes struct {
	s   Serving
	err error
}

// Serve is the fence the gateway applies to every request, answered by the owner
// goroutine without I/O. A request that names a run is served only under that run's live
// grant on model, at the device's current generation; one that names no run only while
// some live grant covers model. gen > 0 is the generation the caller says it holds: it
// must be the one it would be served under. Errors: ErrNotLeased, ErrStaleGeneration.
func (m *Manager) Serve(run, model string, gen int64) (Serving, error) {
	q := admitReq{run: run, model: model, gen: gen, reply: make(chan admitRes, 1)}
	select {
	case m.admits <- q:
	case <-m.quit:
		return Serving{}, fmt.Errorf("%w: the GPU manager stopped", ErrNotLeased)
	}
	r := <-q.reply
	return r.s, r.err
}

// admit is Serve's owner half.
func (m *Manager) admit(q admitReq) admitRes {
	stale := func(held int64) admitRes {
		return admitRes{err: fmt.Errorf("%w: generation %d is not current (the device is at %d)", ErrStaleGeneration, held, m.gen)}
	}
	if q.run != "" {
		g := m.byRun[q.run]
		if g == nil || g.Model != q.model {
			if old, ok := m.revoked[q.run]; ok {
				return stale(old)
			}
			return admitRes{err: fmt.Errorf("%w: run %s holds no grant for %s", ErrNotLeased, q.run, q.model)}
		}
		if g.Generation != m.gen || !m.phase.Serving() || (q.gen > 0 && q.gen != g.Generation) {
			return stale(max(q.gen, g.Generation))
		}
		return admitRes{s: Serving{Endpoint: m.endpoint, Generation: g.Generation, Done: g.done}}
	}
	if !m.phase.Serving() || q.model != m.loaded || len(m.grants) == 0 {
		if q.gen > 0 {
			return stale(q.gen)
		}
		return admitRes{err: fmt.Errorf("%w: no grant covers %s", ErrNotLeased, q.model)}
	}
	if q.gen > 0 && q.gen != m.gen {
		return stale(q.gen)
	}
	return admitRes{s: Serving{Endpoint: m.endpoint, Generation: m.gen}}
}

// grant hands waiter id a grant on the loaded model (owner goroutine).
func (m *Manager) grant(id string) {
	for j, w := range m.waiting {
		if w.ID != id {
			continue
		}
		g := &Grant{ID: id, Run: w.run, Device: m.dev.Name, Model: m.loaded, Generation: m.gen, Endpoint: m.endpoint,
			done: make(chan struct{}), yield: make(chan struct{}), m: m, expire: time.Now().Add(m.dev.GrantTTL), granted: time.Now(),
			renewable: w.run != "" && m.dev.HolderAlive != nil, exclusive: w.Exclusive}
		m.grants[id] = g
		if w.run != "" {
			m.byRun[w.run] = g
			delete(m.revoked, w.run)
		}
		w.reply <- result{g: g}
		m.waiting = append(m.waiting[:j], m.waiting[j+1:]...)
		return
	}
}

// release ends a grant its holder gave back.
func (m *Manager) release(id string) {
	g := m.grants[id]
	if g == nil {
		return
	}
	delete(m.grants, id)
	if g.Run != "" && m.byRun[g.Run] == g {
		delete(m.byRun, g.Run)
		delete(m.runStatus, g.Run)
	}
	if len(m.grants) == 0 {
		m.idleSince = time.Now()
	}
}

// revoke takes one grant back: its Done closes and its run's requests go stale.
func (m *Manager) revoke(g *Grant, why string) {
	m.release(g.ID)
	g.reason = why
	close(g.done)
	if g.Run != "" {
		if len(m.revoked) > 1024 {
			clear(m.revoked) // bounded memory: an old run's requests then read "not leased"
		}
		m.revoked[g.Run] = g.Generation
	}
}

// revokeAll takes every grant back and bumps the generation: outstanding generations
// are now stale.
func (m *Manager) revokeAll(why string) {
	for _, g := range m.grants {
		m.revoke(g, why)
	}
	m.gen++
}

// renew extends one grant (its holder's heartbeat).
func (m *Manager) renew(id string, now time.Time) error {
	g := m.grants[id]
	if g == nil {
		return ErrGrantEnded
	}
	g.expire, g.renewable = now.Add(m.dev.GrantTTL), true
	return nil
}

// renewRuns extends the grants of runs the holder loop saw alive.
func (m *Manager) renewRuns(runs []string, status map[string]string, now time.Time) {
	for _, r := range runs {
		if g := m.byRun[r]; g != nil {
			g.expire = now.Add(m.dev.GrantTTL)
			if st, ok := status[r]; ok {
				m.runStatus[r] = st
			}
		}
	}
}

// expire takes back grants whose holder stopped renewing them. A grant nothing renews
// (no run lease to check, no Renew call yet) lasts until released or revoked.
func (m *Manager) expire(now time.Time) {
	for _, g := range m.grants {
		if g.renewable && now.After(g.expire) {
			m.dev.Log.Warn("grant expired without renewal", "device", m.dev.Name, "model", g.Model, "run", g.Run)
			m.revoke(g, "the grant expired: its holder stopped renewing it")
		}
	}
}

// holders lists the runs holding grants (for the holder loop).
func (m *Manager) holders() []string {
	out := make([]string, 0, len(m.byRun))
	for r := range m.byRun {
		out = append(out, r)
	}
	return out
}

// notifyWaiters tells each waiter its position and reason when they changed; delivery
// runs on a tracked goroutine (onWait may do I/O).
// The position is the waiter's place in Order (the order Decide starts them in), and the
// reason says how far the swap-minimizing order may still pass it (BoundNote).
func (m *Manager) notifyWaiters() {
	if len(m.waiting) == 0 {
		return
	}
	s := m.state(time.Now())
	order := Order(s)
	at := make(map[string]int, len(order))
	for i, w := range order {
		at[w.ID] = i + 1
	}
	for _, w := range m.waiting {
		p := at[w.ID]
		r := m.reason + BoundNote(s, order, p)
		if w.onWait != nil && (w.lastP != p || w.lastR != r) {
			w.lastP, w.lastR = p, r
			w.notes++
			n, pos, reason := w.notes, p, r
			m.r.Go(func(context.Context) { w.notify(n, pos, reason) })
		}
	}
}
