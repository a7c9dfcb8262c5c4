package gpu

import (
	"context"
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
		if !m.post(ctx, effect{kind: EffectLeased, ctl: l.Generation()}) {
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
