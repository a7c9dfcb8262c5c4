package gpu

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// The swap's slow effects. Each runs on a goroutine tracked by the manager's runner (Stop
// waits for it), gets everything it needs as arguments, and reports one effect; none
// reads or writes the owner's state.

// checkControl verifies with Redis, right before a load or unload acts, that ctl is still
// the live control-lease generation. Without a configured lease there is nothing to check.
func (m *Manager) checkControl(ctx context.Context, ctl int64) error {
	if m.dev.Lease == nil {
		return nil
	}
	cctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	return m.dev.Lease.Check(cctx, ctl)
}

// load pauses the other tenant, loads the model and checks readiness.
func (m *Manager) load(ctx context.Context, model string, ctl int64, paused bool) {
	fail := func(err error) {
		m.post(ctx, effect{kind: EffectLoadFailed, model: model, ctl: ctl, err: err, paused: paused})
	}
	stale := func(err error) {
		m.post(ctx, effect{kind: EffectStale, model: model, ctl: ctl, err: err, paused: paused})
	}
	if err := m.checkControl(ctx, ctl); err != nil {
		stale(err)
		return
	}
	if m.dev.Immich != nil && !paused {
		if err := m.dev.Immich.Pause(ctx); err != nil {
			fail(fmt.Errorf("%w: Immich could not be paused, so the GPU is not taken from it: %v", ErrLoadFailed, err))
			return
		}
		paused = true // reported with the effect; the owner records it
	}
	if err := m.checkControl(ctx, ctl); err != nil {
		stale(err)
		return
	}
	t0 := time.Now()
	ep, err := m.dev.Backend.Load(ctx, model)
	took := time.Since(t0)
	var ready time.Duration
	if err == nil {
		rctx, cancel := context.WithTimeout(ctx, 60*time.Second)
		t1 := time.Now()
		err = readyFor(rctx, m.dev.Backend, ep, model, m.budget(model)) // the served context as the backend reports it (qualify_context.go)
		ready = time.Since(t1)
		cancel()
		if err != nil {
			m.cleanup(ctx, model, ctl)
		}
	}
	if err != nil {
		fail(fmt.Errorf("%w: %s: %v", ErrLoadFailed, model, err))
		return
	}
	m.post(ctx, effect{kind: EffectLoaded, model: model, ctl: ctl, endpoint: ep, took: took, ready: ready, paused: paused})
}

// cleanup unloads a model that failed readiness (under the same fence as any unload).
func (m *Manager) cleanup(ctx context.Context, model string, ctl int64) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.dev.UnloadTimeout)
	defer cancel()
	if err := m.checkControl(uctx, ctl); err != nil {
		m.dev.Log.Warn("a model that failed readiness was not unloaded: control of the device went stale", "device", m.dev.Name, "model", model, "err", err)
		return
	}
	_ = m.dev.Backend.Unload(uctx, model)
}

// unload unloads the model and verifies the memory came back. It runs to UnloadTimeout
// even while the manager stops (a half-done unload helps nobody).
//
// base is the telemetry loop's latest reading taken while the model was loaded (zero:
// none). When no reading can be taken right before the unload, the memory cannot be
// verified back: the device becomes unknown (it used to skip the check and load the next
// model on faith), and base is what fresh readings must improve on for it to recover by
// itself; without base only an operator's confirmation frees it.
func (m *Manager) unload(ctx context.Context, model string, ctl int64, base Reading) {
	uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.dev.UnloadTimeout)
	defer cancel()
	if err := m.checkControl(uctx, ctl); err != nil {
		m.post(ctx, effect{kind: EffectStale, model: model, ctl: ctl, err: err})
		return
	}
	var before Reading
	var readErr error
	if m.dev.Telemetry != nil {
		before, readErr = m.readBefore(uctx)
	}
	t0 := time.Now()
	err := m.dev.Backend.Unload(uctx, model)
	e := effect{kind: EffectUnloaded, model: model, ctl: ctl, err: err, took: time.Since(t0), before: before, foot: m.dev.Backend.Footprint(model)}
	switch {
	case err != nil || m.dev.Telemetry == nil:
	case readErr != nil:
		e.unknown, e.before = true, base
		e.why = fmt.Sprintf("no telemetry reading could be taken before unloading %s (%v), so its memory was not verified back", model, readErr)
	default:
		t1 := time.Now()
		e.unknown = !m.waitMemory(uctx, before, e.foot)
		e.verify = time.Since(t1)
	}
	m.post(ctx, e)
}

// readBefore takes the reading an unload is verified against: a few tries PollEvery
// apart (a read racing a rewrite of the telemetry source fails once), then the error.
func (m *Manager) readBefore(ctx context.Context) (Reading, error) {
	var err error
	for try := 0; try < 3; try++ {
		if try > 0 {
			select {
			case <-ctx.Done():
				return Reading{}, ctx.Err()
			case <-time.After(m.dev.PollEvery):
			}
		}
		var r Reading
		if r, err = m.dev.Telemetry.Read(ctx); err == nil && r.MemTotal > 0 && !r.Stale(time.Now(), 5*time.Second) {
			return r, nil
		}
		if err == nil {
			err = errors.New("the reading was stale or reported no memory")
		}
	}
	return Reading{}, err
}

func (m *Manager) waitMemory(ctx context.Context, before Reading, footprint int64) bool {
	deadline := time.Now().Add(m.dev.MemoryWait)
	for {
		// A stale reading proves nothing: only a fresh one can show the memory back.
		if r, err := m.dev.Telemetry.Read(ctx); err == nil && !r.Stale(time.Now(), 5*time.Second) && MemoryBack(before, r, footprint) {
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

func (m *Manager) budget(model string) int64 {
	if m.dev.Budget == nil {
		return 0
	}
	return m.dev.Budget(model)
}

// processOwner is a backend whose models run as this agent's own child processes: no
// other agent can use them, so stopping them after control was lost takes nothing from
// the new holder.
type processOwner interface {
	stopAll(ctx context.Context)
}

// releaseOwn stops this agent's own model processes after control was lost (owner
// goroutine decides; a tracked goroutine acts, bounded by UnloadTimeout).
func (m *Manager) releaseOwn() {
	po, ok := m.dev.Backend.(processOwner)
	if !ok {
		return
	}
	m.r.Go(func(ctx context.Context) {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), m.dev.UnloadTimeout)
		defer cancel()
		po.stopAll(uctx)
	})
}

// resumeTenant resumes Immich once the device is free and nobody waits (owner goroutine
// decides and records; a tracked goroutine calls Immich, bounded).
func (m *Manager) resumeTenant() {
	if m.dev.Immich == nil || !m.paused || len(m.waiting) > 0 {
		return
	}
	m.paused = false
	m.r.Go(func(ctx context.Context) {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
		defer cancel()
		if err := m.dev.Immich.Resume(rctx); err != nil {
			m.dev.Log.Warn("Immich resume failed; it is retried at the next start", "err", err)
		}
	})
}
