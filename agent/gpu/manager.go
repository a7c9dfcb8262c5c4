package gpu

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"time"
)

// Device is one GPU as the agent's host configuration describes it.
type Device struct {
	Name         string
	Backend      Backend
	Telemetry    Telemetry // nil: memory cannot be verified (the swap trusts the backend)
	Slots        int       // concurrent grants for the loaded model (1: exclusive)
	DrainTimeout time.Duration
	MemoryWait   time.Duration // bound on memory verification after an unload (default 5 s)
	PollEvery    time.Duration // telemetry polling while verifying (default 250 ms)
	Budget       func(model string) int64
	// Immich, when set, is paused before a model loads on this device and resumed after
	// it is unloaded (Immich ML shares the GPU).
	Immich Pauser
	// Lease, when set, is the device's control lease shared with every agent configured
	// on it: without it the manager loads nothing (phase fenced) and retries.
	Lease *ControlLease
	Log   *slog.Logger
}

// Pauser pauses and resumes another GPU tenant (Immich's ML queues).
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// Grant is a run's lease on the device for one model. Done closes when the grant is
// cancelled (a swap's drain bound passed, the backend crashed, or control was lost).
type Grant struct {
	ID         string
	Device     string
	Model      string
	Generation int64
	Endpoint   string
	done       chan struct{}
	m          *Manager
	once       sync.Once
}

// Done closes when the grant is no longer valid.
func (g *Grant) Done() <-chan struct{} { return g.done }

// Release ends the grant. Idempotent.
func (g *Grant) Release() {
	g.once.Do(func() {
		select {
		case g.m.releases <- g.ID:
		case <-g.m.stopped:
		}
	})
}

// ErrLoadFailed: the model could not be made ready.
var ErrLoadFailed = errors.New("gpu: load failed")

type waiter struct {
	Waiter
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

type effect struct {
	kind     string // loaded, loadFailed, unloaded
	model    string
	endpoint string
	err      error
	unknown  bool
	took     time.Duration // the backend's own load or unload time
	verify   time.Duration // memory verification after an unload
	ready    time.Duration // readiness checks after a load
}

// Timings of the last swap: what the backend itself took and what the manager added.
type Timings struct {
	Unload, Verify, Load, Ready time.Duration
	// Total runs from the decision to unload until the new model is ready.
	Total time.Duration
}

// Status is a snapshot of the device.
type Status struct {
	Device     string
	Phase      string
	Loaded     string
	Active     int
	Waiting    int
	Generation int64
	Reading    Reading
	Reason     string
	LastSwap   Timings
}

// Manager owns one device: a single goroutine holds its state.
type Manager struct {
	dev Device

	acquires chan *waiter
	cancels  chan string
	releases chan string
	effects  chan effect
	snaps    chan chan Status
	covers   chan coverReq
	stopped  chan struct{}
	done     chan struct{}
	stopOnce sync.Once

	// owner-goroutine state
	phase      string
	loaded     string
	endpoint   string
	gen        int64
	grants     map[string]*Grant
	waiting    []*waiter
	drainStart time.Time
	reason     string
	seq        int
	before     Reading
	paused     bool
	swapStart  time.Time
	cur        Timings
	lastSwap   Timings
}

type coverReq struct {
	model string
	reply chan coverRes
}

type coverRes struct {
	endpoint string
	gen      int64
	ok       bool
}

// NewManager builds a manager; Start runs it.
func NewManager(d Device) *Manager {
	if d.Slots < 1 {
		d.Slots = 1
	}
	if d.MemoryWait == 0 {
		d.MemoryWait = 5 * time.Second
	}
	if d.PollEvery == 0 {
		d.PollEvery = 250 * time.Millisecond
	}
	if d.DrainTimeout == 0 {
		d.DrainTimeout = 30 * time.Second
	}
	if d.Log == nil {
		d.Log = slog.Default()
	}
	return &Manager{dev: d, acquires: make(chan *waiter), cancels: make(chan string), releases: make(chan string),
		effects: make(chan effect, 4), snaps: make(chan chan Status), covers: make(chan coverReq),
		stopped: make(chan struct{}), done: make(chan struct{}), phase: PhaseIdle, grants: map[string]*Grant{}}
}

// Start runs the owner goroutine until Stop.
func (m *Manager) Start(ctx context.Context) error {
	if m.dev.Lease != nil {
		m.phase, m.reason = PhaseFenced, "another agent controls this device"
		go m.holdLease(ctx)
	}
	go m.loop(ctx)
	return nil
}

// holdLease acquires the control lease, reports it, and re-acquires after a loss.
func (m *Manager) holdLease(ctx context.Context) {
	l := m.dev.Lease
	retry := l.TTL / 2
	if retry <= 0 {
		retry = time.Second
	}
	send := func(e effect) bool {
		select {
		case m.effects <- e:
			return true
		case <-m.stopped:
			return false
		case <-ctx.Done():
			return false
		}
	}
	for {
		if err := l.Acquire(ctx); err != nil {
			select {
			case <-time.After(retry):
				continue
			case <-m.stopped:
				return
			case <-ctx.Done():
				return
			}
		}
		if !send(effect{kind: "leased"}) {
			l.Release(context.WithoutCancel(ctx))
			return
		}
		select {
		case <-l.Done():
			m.dev.Log.Warn("control lease lost", "device", m.dev.Name)
			if !send(effect{kind: "fenced"}) {
				return
			}
		case <-m.stopped:
			l.Release(context.WithoutCancel(ctx))
			return
		case <-ctx.Done():
			l.Release(context.WithoutCancel(ctx))
			return
		}
	}
}

// Stop ends the owner goroutine (waiting effects are abandoned; loaded models stay).
func (m *Manager) Stop() {
	m.stopOnce.Do(func() { close(m.stopped) })
	<-m.done
}

// Acquire waits for a grant on model. onWait sees the queue position and the reason while
// the caller waits (shown to users as waiting_for_resource).
func (m *Manager) Acquire(ctx context.Context, model string, onWait func(pos int, reason string)) (*Grant, error) {
	w := &waiter{Waiter: Waiter{Model: model}, reply: make(chan result, 1), onWait: onWait}
	select {
	case m.acquires <- w:
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-m.stopped:
		return nil, errors.New("gpu: manager stopped")
	}
	select {
	case r := <-w.reply:
		return r.g, r.err
	case <-ctx.Done():
		select {
		case m.cancels <- w.ID:
		case <-m.stopped:
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
	}
}

// Covering returns the endpoint and generation serving model right now, if a live grant
// covers it (the gateway serves nothing else: no silent swap).
func (m *Manager) Covering(model string) (endpoint string, gen int64, ok bool) {
	r := coverReq{model: model, reply: make(chan coverRes, 1)}
	select {
	case m.covers <- r:
	case <-m.stopped:
		return "", 0, false
	}
	res := <-r.reply
	return res.endpoint, res.gen, res.ok
}

// Valid reports whether a generation still names the loaded model (fencing for requests
// that carry one).
func (m *Manager) Valid(model string, gen int64) bool {
	_, g, ok := m.Covering(model)
	return ok && g == gen
}

// Snapshot returns the device's status.
func (m *Manager) Snapshot() Status {
	c := make(chan Status, 1)
	select {
	case m.snaps <- c:
		return <-c
	case <-m.stopped:
		return Status{Device: m.dev.Name, Phase: PhaseUnknown}
	}
}

func (m *Manager) loop(ctx context.Context) {
	defer close(m.done)
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			m.failAll(ctx.Err())
			return
		case <-m.stopped:
			m.failAll(errors.New("gpu: manager stopped"))
			return
		case w := <-m.acquires:
			m.seq++
			w.ID = "w" + strconv.Itoa(m.seq)
			m.waiting = append(m.waiting, w)
		case id := <-m.cancels:
			for i, w := range m.waiting {
				if w.ID == id {
					m.waiting = append(m.waiting[:i], m.waiting[i+1:]...)
					break
				}
			}
		case id := <-m.releases:
			delete(m.grants, id)
		case e := <-m.effects:
			m.apply(e)
		case c := <-m.snaps:
			c <- m.status()
		case r := <-m.covers:
			ok := m.phase == PhaseReady || m.phase == PhaseDraining
			ok = ok && r.model == m.loaded && len(m.grants) > 0
			r.reply <- coverRes{endpoint: m.endpoint, gen: m.gen, ok: ok}
		case <-tick.C:
			m.checkCrash()
		}
		m.step(ctx)
	}
}

func (m *Manager) status() Status {
	s := Status{Device: m.dev.Name, Phase: m.phase, Loaded: m.loaded, Active: len(m.grants), Waiting: len(m.waiting), Generation: m.gen, Reason: m.reason, LastSwap: m.lastSwap}
	if m.dev.Telemetry != nil {
		if r, err := m.dev.Telemetry.Read(); err == nil {
			s.Reading = r
		}
	}
	return s
}

func (m *Manager) failAll(err error) {
	for _, w := range m.waiting {
		w.reply <- result{err: err}
	}
	m.waiting = nil
}

// checkCrash notices a backend that died under a loaded model: its grants are cancelled
// (the runs see a clear error) and the model reloads on next need.
func (m *Manager) checkCrash() {
	if m.phase != PhaseReady && m.phase != PhaseDraining {
		return
	}
	if m.dev.Backend.Alive(m.loaded) {
		return
	}
	m.dev.Log.Warn("backend crashed", "device", m.dev.Name, "model", m.loaded)
	m.cancelGrants()
	m.phase, m.loaded, m.endpoint, m.reason = PhaseIdle, "", "", "the model server crashed; it reloads on next use"
}

func (m *Manager) cancelGrants() {
	for id, g := range m.grants {
		close(g.done)
		delete(m.grants, id)
	}
	m.gen++ // outstanding generations are now stale
}

func (m *Manager) state() State {
	s := State{Phase: m.phase, Loaded: m.loaded, Active: len(m.grants), Slots: m.dev.Slots}
	for _, w := range m.waiting {
		s.Waiting = append(s.Waiting, w.Waiter)
	}
	s.DrainExpired = m.phase == PhaseDraining && time.Since(m.drainStart) > m.dev.DrainTimeout
	return s
}

// step applies decisions until the policy says wait.
func (m *Manager) step(ctx context.Context) {
	for i := 0; i < 16; i++ {
		d := Decide(m.state())
		switch d.Kind {
		case ActGrant:
			for _, id := range d.Grant {
				for j, w := range m.waiting {
					if w.ID != id {
						continue
					}
					g := &Grant{ID: id, Device: m.dev.Name, Model: m.loaded, Generation: m.gen, Endpoint: m.endpoint, done: make(chan struct{}), m: m}
					m.grants[id] = g
					w.reply <- result{g: g}
					m.waiting = append(m.waiting[:j], m.waiting[j+1:]...)
					break
				}
			}
			continue
		case ActLoad:
			m.phase, m.loaded, m.reason = PhaseLoading, d.Model, d.Reason
			go m.load(ctx, d.Model)
		case ActDrain:
			m.phase, m.drainStart, m.reason = PhaseDraining, time.Now(), d.Reason
			continue
		case ActCancelDrain:
			m.cancelGrants()
			continue
		case ActUnload:
			m.phase, m.reason = PhaseUnloading, d.Reason
			m.swapStart, m.cur = time.Now(), Timings{}
			m.gen++
			go m.unload(ctx, m.loaded)
		case ActWait:
			if d.Reason != "" {
				m.reason = d.Reason
			}
		}
		break
	}
	for i, w := range m.waiting {
		if w.onWait != nil && (w.lastP != i+1 || w.lastR != m.reason) {
			w.lastP, w.lastR = i+1, m.reason
			w.notes++
			go w.notify(w.notes, i+1, m.reason)
		}
	}
}

func (m *Manager) budget(model string) int64 {
	if m.dev.Budget == nil {
		return 0
	}
	return m.dev.Budget(model)
}

// load runs off the owner goroutine: pause other tenants, start, then readiness.
func (m *Manager) load(ctx context.Context, model string) {
	fail := func(err error) {
		select {
		case m.effects <- effect{kind: "loadFailed", model: model, err: err}:
		case <-m.stopped:
		}
	}
	if m.dev.Immich != nil && !m.paused {
		if err := m.dev.Immich.Pause(ctx); err != nil {
			fail(fmt.Errorf("%w: Immich could not be paused, so the GPU is not taken from it: %v", ErrLoadFailed, err))
			return
		}
		m.paused = true // owned by this load: the owner goroutine waits for its effect
	}
	t0 := time.Now()
	ep, err := m.dev.Backend.Load(ctx, model)
	took := time.Since(t0)
	var ready time.Duration
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		t1 := time.Now()
		err = Ready(rctx, ep, model, m.dev.Backend.Key(), m.budget(model))
		ready = time.Since(t1)
		cancel()
		if err != nil {
			_ = m.dev.Backend.Unload(context.WithoutCancel(ctx), model)
		}
	}
	if err != nil {
		fail(fmt.Errorf("%w: %s: %v", ErrLoadFailed, model, err))
		return
	}
	select {
	case m.effects <- effect{kind: "loaded", model: model, endpoint: ep, took: took, ready: ready}:
	case <-m.stopped:
	}
}

// unload runs off the owner goroutine: unload, then verify the memory came back.
func (m *Manager) unload(ctx context.Context, model string) {
	var before Reading
	if m.dev.Telemetry != nil {
		before, _ = m.dev.Telemetry.Read()
	}
	t0 := time.Now()
	err := m.dev.Backend.Unload(ctx, model)
	e := effect{kind: "unloaded", model: model, err: err, took: time.Since(t0)}
	if err == nil && m.dev.Telemetry != nil && !before.At.IsZero() {
		t1 := time.Now()
		e.unknown = !m.waitMemory(ctx, before, m.dev.Backend.Footprint(model))
		e.verify = time.Since(t1)
	}
	select {
	case m.effects <- e:
	case <-m.stopped:
	}
}

func (m *Manager) waitMemory(ctx context.Context, before Reading, footprint int64) bool {
	deadline := time.Now().Add(m.dev.MemoryWait)
	for {
		// A stale reading proves nothing: only a fresh one can show the memory back.
		if r, err := m.dev.Telemetry.Read(); err == nil && !r.Stale(time.Now(), 5*time.Second) && MemoryBack(before, r, footprint) {
			return true
		}
		if time.Now().After(deadline) {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-time.After(m.dev.PollEvery):
		}
	}
}

func (m *Manager) apply(e effect) {
	switch e.kind {
	case "leased":
		if m.phase == PhaseFenced {
			m.phase, m.reason = PhaseIdle, ""
		}
	case "fenced":
		// Another agent may load now: stop serving and free what we hold.
		m.cancelGrants()
		if m.loaded != "" && (m.phase == PhaseReady || m.phase == PhaseDraining) {
			model := m.loaded
			go func() { _ = m.dev.Backend.Unload(context.Background(), model) }()
		}
		m.phase, m.loaded, m.endpoint, m.reason = PhaseFenced, "", "", "another agent controls this device"
	case "loaded", "loadFailed", "unloaded":
		if m.phase == PhaseFenced {
			// Control was lost while this ran: a model we loaded is not ours to serve.
			if e.kind == "loaded" {
				go func() { _ = m.dev.Backend.Unload(context.Background(), e.model) }()
			}
			if e.kind == "loadFailed" {
				m.failModel(e.model, e.err)
			}
			return
		}
	}
	switch e.kind {
	case "loaded":
		m.phase, m.loaded, m.endpoint, m.reason = PhaseReady, e.model, e.endpoint, ""
		m.gen++
		if !m.swapStart.IsZero() {
			m.cur.Load, m.cur.Ready, m.cur.Total = e.took, e.ready, time.Since(m.swapStart)
			m.lastSwap, m.swapStart = m.cur, time.Time{}
		}
	case "loadFailed":
		m.dev.Log.Warn("load failed", "device", m.dev.Name, "model", e.model, "err", e.err)
		m.swapStart = time.Time{}
		m.phase, m.loaded, m.endpoint, m.reason = PhaseFailed, "", "", e.err.Error()
		m.failModel(e.model, e.err)
		m.resumeTenant()
	case "unloaded":
		m.loaded, m.endpoint = "", ""
		m.cur.Unload, m.cur.Verify = e.took, e.verify
		switch {
		case e.err != nil:
			m.phase, m.reason = PhaseUnknown, "the unload failed: "+e.err.Error()
		case e.unknown:
			m.phase, m.reason = PhaseUnknown, "the memory did not come back after the unload"
		default:
			m.phase, m.reason = PhaseIdle, ""
			m.resumeTenant()
		}
	}
}

// failModel answers the waiters for model with err; others may still be served.
func (m *Manager) failModel(model string, err error) {
	kept := m.waiting[:0]
	for _, w := range m.waiting {
		if w.Model == model {
			w.reply <- result{err: err}
		} else {
			kept = append(kept, w)
		}
	}
	m.waiting = kept
}

func (m *Manager) resumeTenant() {
	if m.dev.Immich != nil && m.paused && len(m.waiting) == 0 {
		m.paused = false
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			if err := m.dev.Immich.Resume(ctx); err != nil {
				m.dev.Log.Warn("Immich resume failed; it is retried at the next start", "err", err)
			}
		}()
	}
}

// Confirm marks an unknown device as free again (an operator checked, or a fresh
// telemetry reading shows memory back).
func (m *Manager) Confirm() {
	select {
	case m.effects <- effect{kind: "unloaded"}:
	case <-m.stopped:
	}
}
