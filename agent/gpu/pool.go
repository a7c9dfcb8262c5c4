package gpu

import (
	"context"
	"fmt"
	"time"
)

// Pool is the agent's managed devices, as the executor sees them.
type Pool map[string]*Manager

// Manages reports whether device is managed here.
func (p Pool) Manages(device string) bool { return p[device] != nil }

// Acquire waits for a grant on device with model loaded, held by no named run: it lasts
// until released or revoked, and the gateway cannot tell its requests from another
// run's. Runs use AcquireRun.
func (p Pool) Acquire(ctx context.Context, device, model string, onWait func(pos int, reason string)) (func(), <-chan struct{}, error) {
	return p.AcquireRun(ctx, device, "", model, onWait)
}

// AcquireRun waits for a grant on device with model loaded, held by run: the gateway
// serves requests naming the run only under this grant at its generation, and (with the
// device's HolderAlive set) the grant expires once the run's lease stops being renewed.
// revoked closes when the grant is taken back.
func (p Pool) AcquireRun(ctx context.Context, device, run, model string, onWait func(pos int, reason string)) (release func(), revoked <-chan struct{}, err error) {
	m := p[device]
	if m == nil {
		return nil, nil, fmt.Errorf("gpu: device %q is not managed by this agent", device)
	}
	g, err := m.AcquireFor(ctx, run, model, onWait)
	if err != nil {
		return nil, nil, err
	}
	return g.Release, g.Done(), nil
}

// UpstreamKey is the credential of the device's backend (for the gateway to inject).
func (m *Manager) UpstreamKey() string { return m.dev.Backend.Key() }

// Loaded returns the model device's manager has loaded (or is loading) and how long its
// last swap took ("" and 0 when nothing is loaded or the device is not managed here): the
// executor tells a run that re-acquires the device what swap it may cost.
func (p Pool) Loaded(device string) (model string, lastSwap time.Duration) {
	m := p[device]
	if m == nil {
		return "", 0
	}
	s := m.Snapshot()
	if s.Phase != PhaseReady && s.Phase != PhaseDraining && s.Phase != PhaseLoading {
		return "", s.LastSwap.Total
	}
	return s.Loaded, s.LastSwap.Total
}
