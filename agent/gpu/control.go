package gpu

import (
	"context"
	"fmt"
	"time"

	"privateassistant/internal/backoff"
)

// holdLease acquires the control lease, reports it, and re-acquires after a loss.
func (m *Manager) holdLease(ctx context.Context) {
	l := m.dev.Lease
	retry := l.TTL / 2
	if retry <= 0 {
		retry = time.Second
	}
	b := backoff.Backoff{Min: retry / 4, Max: retry}
	release := func() {
		rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
		defer cancel()
		l.Release(rctx)
	}
	for {
		if err := l.Acquire(ctx); err != nil {
			if b.Wait(ctx) != nil {
				return
			}
			continue
		}
		b.Reset()
		// In control now: what the backend still holds from before goes first.
		why := m.clearResident(ctx)
		if !m.post(ctx, effect{kind: EffectLeased, ctl: l.Generation(), why: why}) {
			release()
			return
		}
		select {
		case <-l.Done():
			m.dev.Log.Warn("control lease lost", "device", m.dev.Name)
			release() // stops the renewals; deletes the key only if it is still ours
			if !m.post(ctx, effect{kind: EffectFenced}) {
				return
			}
		case <-ctx.Done():
			release()
			return
		}
	}
}

// residentUnloadBound bounds clearResident: the listing and every unload.
const residentUnloadBound = 2 * time.Minute

// clearResident unloads the device's models the backend still holds from before this
// manager took control: Ollama and a llama-server router are not the agent's children and
// keep what an earlier agent (or the previous control-lease holder) loaded. It returns why
// the device cannot be trusted empty ("" when it can): an unload that failed leaves the
// device unknown until its memory is confirmed. A backend that cannot say what it holds (it
// is down: nothing loads on it either) is logged and taken as empty.
func (m *Manager) clearResident(ctx context.Context) string {
	rb, ok := m.dev.Backend.(Resident)
	if !ok {
		return ""
	}
	ctx, cancel := context.WithTimeout(ctx, residentUnloadBound)
	defer cancel()
	models, err := rb.Resident(ctx)
	if err != nil {
		m.dev.Log.Warn("could not ask the backend which models it holds; taking it as empty", "device", m.dev.Name, "err", err)
		return ""
	}
	for _, model := range models {
		m.dev.Log.Info("unloading a model left loaded before this agent took control", "device", m.dev.Name, "model", model)
		if err := m.dev.Backend.Unload(ctx, model); err != nil {
			return fmt.Sprintf("%s was still loaded from before this agent took control of the device, and unloading it failed (%v)", model, err)
		}
	}
	return ""
}
