package gpu

import (
	"context"
	"fmt"
)

// Pool is the agent's managed devices, as the executor sees them.
type Pool map[string]*Manager

// Manages reports whether device is managed here.
func (p Pool) Manages(device string) bool { return p[device] != nil }

// Acquire waits for a grant on device with model loaded.
func (p Pool) Acquire(ctx context.Context, device, model string, onWait func(pos int, reason string)) (func(), <-chan struct{}, error) {
	m := p[device]
	if m == nil {
		return nil, nil, fmt.Errorf("gpu: device %q is not managed by this agent", device)
	}
	g, err := m.Acquire(ctx, model, onWait)
	if err != nil {
		return nil, nil, err
	}
	return g.Release, g.Done(), nil
}

// UpstreamKey is the credential of the device's backend (for the gateway to inject).
func (m *Manager) UpstreamKey() string { return m.dev.Backend.Key() }
