package gpu

import (
	"context"
	"fmt"
)

// AcquireRunYield is AcquireRun that also returns the grant's Yield: it closes when the
// grant's model is preemptible and another job needs the device; the executor then
// pauses the run at its next turn boundary and acquires again (executor.YieldingAcquirer).
func (p Pool) AcquireRunYield(ctx context.Context, device, run, model string, onWait func(pos int, reason string)) (release func(), revoked, yield <-chan struct{}, err error) {
	m := p[device]
	if m == nil {
		return nil, nil, nil, fmt.Errorf("gpu: device %q is not managed by this agent", device)
	}
	g, err := m.AcquireFor(ctx, run, model, onWait)
	if err != nil {
		return nil, nil, nil, err
	}
	return g.Release, g.Done(), g.Yield(), nil
}
