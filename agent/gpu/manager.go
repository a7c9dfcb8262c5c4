package gpu

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"privateassistant/internal/startstop"
)

// Device is one GPU as the agent's host configuration describes it.
type Device struct {
	Name      string
	Backend   Backend
	Telemetry Telemetry // nil: memory cannot be verified (the swap trusts the backend)
	Slots     int       // concurrent grants for the loaded model (1: exclusive)
	// DrainTimeout, when set, revokes the grants still running a swap's drain bound after
	// the swap became due. Zero (the default): a swap waits for running work to finish.
	DrainTimeout time.Duration
	// MaxExtraWait bounds the swap-minimizing order: requests for the loaded model go
	// ahead of an older request for another model only while that one has waited less
	// than this (0: strict FIFO).
	MaxExtraWait time.Duration
	// IdleUnload, when set, is how long a model may sit loaded with nothing using it
	// before it is unloaded (0: kept loaded); the other tenant (Immich) resumes then.
	IdleUnload func(model string) time.Duration
	// Preemptible, when set, reports whether runs holding model may be asked to yield
	// (Grant.Yield) when a swap to another model is due; otherwise a swap waits for them.
	Preemptible func(model string) bool
	// RecoverReadings: an unknown device becomes idle again by itself after this many
	// consecutive fresh readings show the memory back (default 3).
	RecoverReadings int
	MemoryWait      time.Duration // bound on memory verification after an unload (default 5 s)
	PollEvery       time.Duration // telemetry polling while verifying (default 250 ms)
	Budget          func(model string) int64
	// Immich, when set, is paused before a model loads on this device and resumed after
	// it is unloaded (Immich ML shares the GPU).
	Immich Pauser
	// Lease, when set, is the device's control lease shared with every agent configured
	// on it: without it the manager loads nothing (phase fenced) and retries. Every load
	// and unload checks its generation with Redis right before acting.
	Lease *ControlLease
	Log   *slog.Logger

	// HealthEvery is how often the health loop asks the backend whether the loaded model
	// still runs (default 250 ms); HealthTimeout bounds one ask (default 5 s).
	HealthEvery, HealthTimeout time.Duration
	// TelemetryEvery is how often the telemetry loop reads the device for status
	// (default 2 s).
	TelemetryEvery time.Duration
	// UnloadTimeout bounds an unload, including one that runs while the manager stops
	// (default 60 s).
	UnloadTimeout time.Duration
	// GrantTTL: a grant not renewed for this long expires (default 30 s). A grant is
	// renewed by Grant.Renew, or, when HolderAlive is set, while its run's lease lives.
	GrantTTL time.Duration
	// HolderAlive, when set, reports whether a run still holds its run lease (the
	// executor's heartbeat); the holder loop renews the grants of live runs with it.
	HolderAlive func(ctx context.Context, run string) (bool, error)
	// HolderStatus, when set, reports a grant-holding run's status (the holder loop reads
	// it with HolderAlive): waiting reasons say when the holder waits on its owner.
	HolderStatus func(ctx context.Context, run string) (string, error)
	// ConfirmRequested, when set, returns the time of the latest operator confirmation
	// that the device is free (zero: none); the manager polls it every TelemetryEvery and
	// applies one made after the device became unknown.
	ConfirmRequested func(ctx context.Context) (time.Time, error)
}

func (d *Device) defaults() {
	if d.Slots < 1 {
		d.Slots = 1
	}
	set := func(p *time.Duration, v time.Duration) {
		if *p <= 0 {
			*p = v
		}
	}
	set(&d.MemoryWait, 5*time.Second)
	set(&d.PollEvery, 250*time.Millisecond)
	if d.RecoverReadings < 1 {
		d.RecoverReadings = 3
	}
	set(&d.HealthEvery, 250*time.Millisecond)
	set(&d.HealthTimeout, 5*time.Second)
	set(&d.TelemetryEvery, 2*time.Second)
	set(&d.UnloadTimeout, 60*time.Second)
	set(&d.GrantTTL, 30*time.Second)
	if d.Log == nil {
		d.Log = slog.Default()
	}
}

// Pauser pauses and resumes another GPU tenant (Immich's ML queues).
type Pauser interface {
	Pause(ctx context.Context) error
	Resume(ctx context.Context) error
}

// ErrStopped: the manager was stopped.
var ErrStopped = errors.New("gpu: manager stopped")

// Manager owns one device: a single owner goroutine (loop) holds its state; every other
// goroutine (effects, watch loops, callers) talks to it through channels.
type Manager struct {
	dev Device
	r   startstop.Runner

	acquires chan *waiter
	ids      atomic.Int64 // waiter ids (wait sets them before the owner sees the waiter)
	cancels  chan string
	releases chan string
	renews   chan renewReq
	effects  chan effect
	snaps    chan chan Status
	admits   chan admitReq
	holdersQ chan chan []string
	quit     chan struct{} // closed when the owner goroutine has exited or Stop ran
	changed  chan struct{} // cap 1: what a heartbeat shows changed (Changed)
	shown    string        // what changed was last signalled for (the owner's)
	quitOnce sync.Once

	// watch is what the health loop checks: written by the owner goroutine only.
	watch atomic.Pointer[watchTarget]

	// Owner-goroutine state: read and written only by loop and what it calls.
	phase      Phase
	loaded     string
	endpoint   string
	gen        int64 // device generation: bumped by every load, unload, crash and revocation of all grants
	ctl        int64 // control-lease generation held (0: none, or no lease configured)
	grants     map[string]*Grant
	byRun      map[string]*Grant
	revoked    map[string]int64 // run → generation of its grant that was taken back
	waiting    []*waiter
	drainStart time.Time
	reason     string
	reading    Reading
	paused     bool
	swapStart  time.Time
	cur        Timings
	lastSwap   Timings
	idleSince  time.Time         // when the last grant ended (or the model became ready)
	readyAt    time.Time         // when the loaded model became ready
	runStatus  map[string]string // run → its status, as the holder loop last read it
	unknownAt  time.Time         // when the device became unknown
	recoverMin int64             // free bytes a reading must show to count towards recovery (0: none)
	recoverOK  int               // consecutive fresh readings that showed it
	why        string            // why the device is unknown
}

type watchTarget struct {
	model string
	gen   int64
}

// NewManager builds a manager; Start runs it.
func NewManager(d Device) *Manager {
	d.defaults()
	return &Manager{dev: d, acquires: make(chan *waiter), cancels: make(chan string), releases: make(chan string),
		renews: make(chan renewReq), effects: make(chan effect, 8), snaps: make(chan chan Status), admits: make(chan admitReq),
		holdersQ: make(chan chan []string), quit: make(chan struct{}), changed: make(chan struct{}, 1), phase: PhaseIdle,
		grants: map[string]*Grant{}, byRun: map[string]*Grant{}, revoked: map[string]int64{}, runStatus: map[string]string{}}
}

// Start runs the owner goroutine and its watch loops (health, telemetry, grant holders,
// control lease, operator confirmations) until Stop or the end of ctx. A manager is
// started once.
func (m *Manager) Start(ctx context.Context) error {
	if m.dev.Lease != nil {
		m.phase, m.reason = PhaseFenced, "another agent controls this device"
	} else if why := m.clearResident(ctx); why != "" {
		// Before the owner goroutine runs: nothing else reads the state yet.
		m.becomeUnknown(effect{}, why)
	}
	if err := m.r.Start(ctx, m.loop); err != nil {
		return err
	}
	m.r.Go(m.watchHealth)
	if m.dev.Telemetry != nil {
		m.r.Go(m.watchTelemetry)
	}
	if m.dev.HolderAlive != nil {
		m.r.Go(m.watchHolders)
	}
	if m.dev.Lease != nil {
		m.r.Go(m.holdLease)
	}
	if m.dev.ConfirmRequested != nil {
		m.r.Go(m.watchConfirm)
	}
	return nil
}

// Stop ends the owner goroutine and waits for every goroutine the manager started: the
// watch loops, and effects in flight (a load is cancelled; an unload runs to its bound).
// Loaded models stay loaded. Idempotent.
func (m *Manager) Stop() {
	m.r.Stop()
	m.closeQuit()
}

var _ startstop.Service = (*Manager)(nil)

func (m *Manager) closeQuit() { m.quitOnce.Do(func() { close(m.quit) }) }

// post reports an effect to the owner; false once the manager is stopping.
func (m *Manager) post(ctx context.Context, e effect) bool {
	select {
	case m.effects <- e:
		return true
	case <-ctx.Done():
		return false
	case <-m.quit:
		return false
	}
}

// loop is the owner goroutine. Nothing here blocks on I/O: health, telemetry, holder
// checks and the swap's loads and unloads run elsewhere and post effects.
func (m *Manager) loop(ctx context.Context) {
	defer m.closeQuit()
	tick := time.NewTicker(50 * time.Millisecond) // timers only: the drain bound, grant expiry
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			m.failAll(ErrStopped)
			return
		case w := <-m.acquires:
			w.Since = time.Now()
			m.waiting = append(m.waiting, w)
		case id := <-m.cancels:
			for i, w := range m.waiting {
				if w.ID == id {
					m.waiting = append(m.waiting[:i], m.waiting[i+1:]...)
					break
				}
			}
		case id := <-m.releases:
			m.release(id)
		case r := <-m.renews:
			r.reply <- m.renew(r.id, time.Now())
		case e := <-m.effects:
			m.apply(e)
		case c := <-m.snaps:
			c <- m.status()
		case q := <-m.admits:
			q.reply <- m.admit(q)
		case c := <-m.holdersQ:
			c <- m.holders()
		case now := <-tick.C:
			m.expire(now)
		}
		m.step()
		m.publishWatch()
		m.signalChange()
	}
}

// Changed receives when what a heartbeat shows (phase, loaded model, grants, waiters,
// reason, generation) changed, so the Publisher writes it at once rather than at its next
// interval: the system panel has it within a second.
func (m *Manager) Changed() <-chan struct{} { return m.changed }

func (m *Manager) signalChange() {
	k := string(m.phase) + "|" + m.loaded + "|" + strconv.Itoa(len(m.grants)) + "|" + strconv.Itoa(len(m.waiting)) + "|" + m.reason + "|" + strconv.FormatInt(m.gen, 10)
	if k == m.shown {
		return
	}
	m.shown = k
	select {
	case m.changed <- struct{}{}:
	default:
	}
}

func (m *Manager) failAll(err error) {
	for _, w := range m.waiting {
		w.reply <- result{err: err}
	}
	m.waiting = nil
}

// publishWatch tells the health loop what to check (the owner is its only writer).
func (m *Manager) publishWatch() {
	if !m.phase.Serving() {
		if m.watch.Load() != nil {
			m.watch.Store(nil)
		}
		return
	}
	if w := m.watch.Load(); w == nil || w.model != m.loaded || w.gen != m.gen {
		m.watch.Store(&watchTarget{model: m.loaded, gen: m.gen})
	}
}

func (m *Manager) state(now time.Time) State {
	s := State{Phase: m.phase, Loaded: m.loaded, Active: len(m.grants), Slots: m.dev.Slots, Now: now,
		MaxExtraWait: m.dev.MaxExtraWait, IdleSince: m.idleSince}
	for _, w := range m.waiting {
		s.Waiting = append(s.Waiting, w.Waiter)
	}
	for _, g := range m.grants {
		h := Holder{Run: g.Run, Model: g.Model, Since: g.granted, Status: m.runStatus[g.Run]}
		if g.exclusive {
			s.Exclusive, h.Status = true, StatusQualifying
		}
		s.Holders = append(s.Holders, h)
	}
	sort.Slice(s.Holders, func(i, j int) bool { return s.Holders[i].Since.Before(s.Holders[j].Since) })
	if m.dev.IdleUnload != nil && m.loaded != "" {
		s.IdleUnload = m.dev.IdleUnload(m.loaded)
	}
	s.Preemptible = m.dev.Preemptible != nil && m.loaded != "" && m.dev.Preemptible(m.loaded)
	s.DrainExpired = m.phase == PhaseDraining && m.dev.DrainTimeout > 0 && now.Sub(m.drainStart) > m.dev.DrainTimeout
	return s
}

// step applies decisions until the policy says wait.
func (m *Manager) step() {
	now := time.Now()
	for i := 0; i < 16; i++ {
		d := Decide(m.state(now))
		switch d.Kind {
		case ActGrant:
			if m.phase == PhaseDraining {
				m.phase = PhaseReady // the swap is no longer due (the aging bound allows more)
			}
			for _, id := range d.Grant {
				m.grant(id)
			}
			continue
		case ActLoad:
			m.phase, m.loaded, m.reason = PhaseLoading, d.Model, d.Reason
			model, ctl, paused := d.Model, m.ctl, m.paused
			m.r.Go(func(ctx context.Context) { m.load(ctx, model, ctl, paused) })
		case ActDrain, ActPreempt:
			if m.phase != PhaseDraining {
				m.phase, m.drainStart = PhaseDraining, now
			}
			m.reason = d.Reason
			if d.Kind == ActPreempt {
				for _, g := range m.grants {
					g.askYield()
				}
			}
		case ActCancelDrain:
			m.revokeAll("another model needed the device after the drain bound")
			continue
		case ActUnload:
			m.phase, m.reason = PhaseUnloading, d.Reason
			m.swapStart, m.cur = time.Now(), Timings{}
			m.gen++
			model, ctl, base := m.loaded, m.ctl, Reading{}
			if m.reading.At.After(m.readyAt) && m.reading.MemTotal > 0 {
				base = m.reading // taken while the model was loaded: a baseline if the unload cannot read one
			}
			m.r.Go(func(ctx context.Context) { m.unload(ctx, model, ctl, base) })
		case ActWait:
			if m.phase == PhaseDraining {
				m.phase = PhaseReady // nobody needs the swap any more
			}
			switch {
			case (m.phase == PhaseUnknown || m.phase == PhaseFenced) && m.reason != "":
				// keep the specific reason (why the device is unknown) for status and waiters
			case d.Reason != "" || m.phase == PhaseReady:
				m.reason = d.Reason
			}
		}
		break
	}
	m.notifyWaiters()
}
