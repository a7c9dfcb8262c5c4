package gpu

import (
	"context"
	"time"

	"privateassistant/internal/startstop"
)

// The watch loops do the manager's slow reads off the owner goroutine and post what they
// learn as effects; the owner only decides. A hung backend or telemetry command delays
// its own loop, never Acquire, Release or the gateway's per-request check.

// watchHealth asks the backend whether the loaded model still runs. Only a definite "no"
// counts as a crash; an error (timeout, unreachable) decides nothing.
func (m *Manager) watchHealth(ctx context.Context) {
	startstop.Every(ctx, m.dev.HealthEvery, m.dev.Log, "gpu health check", func(ctx context.Context) error {
		t := m.watch.Load()
		if t == nil {
			return nil
		}
		hctx, cancel := context.WithTimeout(ctx, m.dev.HealthTimeout)
		alive, err := m.dev.Backend.Alive(hctx, t.model)
		cancel()
		if err != nil || alive {
			return err
		}
		m.post(ctx, effect{kind: EffectCrashed, model: t.model, gen: t.gen})
		return nil
	})
}

// watchTelemetry reads the device for status reports.
func (m *Manager) watchTelemetry(ctx context.Context) {
	startstop.Every(ctx, m.dev.TelemetryEvery, m.dev.Log, "gpu telemetry", func(ctx context.Context) error {
		r, err := m.dev.Telemetry.Read(ctx)
		if err != nil {
			return err
		}
		m.post(ctx, effect{kind: EffectReading, reading: r})
		return nil
	})
}

// watchHolders renews the grants of runs whose run lease lives (the executor's heartbeat
// renews that lease): a run that stops beating loses its grant within GrantTTL.
func (m *Manager) watchHolders(ctx context.Context) {
	startstop.Every(ctx, m.dev.GrantTTL/3, m.dev.Log, "gpu grant holders", func(ctx context.Context) error {
		c := make(chan []string, 1)
		select {
		case m.holdersQ <- c:
		case <-ctx.Done():
			return nil
		}
		runs := <-c
		var alive []string
		status := map[string]string{}
		var firstErr error
		for _, r := range runs {
			hctx, cancel := context.WithTimeout(ctx, m.dev.GrantTTL/3)
			ok, err := m.dev.HolderAlive(hctx, r)
			if ok && m.dev.HolderStatus != nil {
				if st, serr := m.dev.HolderStatus(hctx, r); serr == nil {
					status[r] = st
				}
			}
			cancel()
			if err != nil && firstErr == nil {
				firstErr = err
			}
			if ok {
				alive = append(alive, r)
			}
		}
		if len(alive) > 0 {
			m.post(ctx, effect{kind: EffectHolders, runs: alive, status: status})
		}
		return firstErr
	})
}

// watchConfirm polls for an operator's confirmation that the device is free (the admin
// API records it; the daemon wires ConfirmRequested to that record). Each confirmation
// is posted once; the owner applies it only to a device that became unknown before it.
func (m *Manager) watchConfirm(ctx context.Context) {
	var last time.Time
	startstop.Every(ctx, m.dev.TelemetryEvery, m.dev.Log, "gpu confirm", func(ctx context.Context) error {
		at, err := m.dev.ConfirmRequested(ctx)
		if err != nil || at.IsZero() || !at.After(last) {
			return err
		}
		last = at
		m.post(ctx, effect{kind: EffectConfirmed, at: at})
		return nil
	})
}
