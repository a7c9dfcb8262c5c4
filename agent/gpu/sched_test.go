package gpu

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/immich"
	"privateassistant/agent/immich/immichtest"
)

// reasons records what a waiter was told, in order.
type reasons struct {
	mu  sync.Mutex
	all []string
	pos []int
}

func (r *reasons) onWait(pos int, reason string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.all, r.pos = append(r.all, reason), append(r.pos, pos)
}

func (r *reasons) has(sub string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, s := range r.all {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// TestSwapWaitsForRunningWork (issue 14, item 1): a long job holds model A on an
// exclusive device; a job for model B queues. Nothing is cut: B waits, told which run
// holds the device, with which model and for how long (and, item 3, that the holder is
// waiting for its owner's approval), until A completes normally; then B swaps in and
// runs. Before the fix the drain bound (30 s by default) revoked A's grant.
func TestSwapWaitsForRunningWork(t *testing.T) {
	b := processBackend(t, 0)
	var approval atomic.Bool
	m := startManager(t, Device{Backend: b, Telemetry: newFakeSysfs(t, b), Slots: 1, GrantTTL: 300 * time.Millisecond,
		HolderAlive: func(context.Context, string) (bool, error) { return true, nil },
		HolderStatus: func(context.Context, string) (string, error) {
			if approval.Load() {
				return "waiting_for_approval", nil
			}
			return "running", nil
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	const runA = "6a1f0c2e9b7d4e11aa"
	ga, err := m.AcquireFor(ctx, runA, "small", nil)
	require.NoError(t, err)

	var told reasons
	gotB := make(chan *Grant, 1)
	go func() {
		g, err := m.AcquireFor(ctx, "run-b", "large", told.onWait)
		if err != nil {
			t.Errorf("acquire B: %v", err)
		}
		gotB <- g
	}()
	require.Eventually(t, func() bool {
		return told.has("the device is held by run 6a1f0c2e (small, running for under a minute); large loads when it finishes")
	}, 30*time.Second, 10*time.Millisecond)
	approval.Store(true)
	require.Eventually(t, func() bool { return told.has("which is waiting for its owner's approval") }, 30*time.Second, 10*time.Millisecond)
	s := m.Snapshot()
	require.Equal(t, PhaseDraining, s.Phase)
	require.Contains(t, s.Reason, "run 6a1f0c2e")
	require.NotContains(t, s.Reason, runA, "only the short id is shown")

	// A keeps running, served by its own model, well past what the old drain bound
	// allowed at this scale.
	require.Never(t, func() bool {
		select {
		case <-ga.Done():
			return true
		case <-gotB:
			return true
		default:
			return false
		}
	}, time.Second, 20*time.Millisecond, "B was served, or A cut, while A still ran")
	got, err := complete(ctx, ga.Endpoint, "small")
	require.NoError(t, err)
	require.Equal(t, "small", got)

	ga.Release() // A completes normally
	gb := <-gotB
	require.NotNil(t, gb)
	require.Equal(t, "", ga.Reason(), "A's grant was never revoked")
	got, err = complete(ctx, gb.Endpoint, "large")
	require.NoError(t, err)
	require.Equal(t, "large", got)
	told.mu.Lock()
	require.Equal(t, 1, told.pos[0], "B was first in line")
	told.mu.Unlock()
	gb.Release()
}

// TestSameModelGoesFirstWithinTheBound: with an aging bound, a later request for the
// loaded model is served before an older request for another model; once that one has
// waited the bound, nothing more goes ahead of it.
func TestSameModelGoesFirstWithinTheBound(t *testing.T) {
	b := processBackend(t, 0)
	m := startManager(t, Device{Backend: b, Telemetry: newFakeSysfs(t, b), Slots: 1, MaxExtraWait: 1500 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	g1, err := m.Acquire(ctx, "small", nil)
	require.NoError(t, err)
	order := make(chan string, 3)
	acquire := func(model string) {
		g, err := m.Acquire(ctx, model, nil)
		if err != nil {
			t.Errorf("%s: %v", model, err)
			order <- "error"
			return
		}
		order <- model
		g.Release()
	}
	go acquire("large")
	require.Eventually(t, func() bool { return m.Snapshot().Waiting == 1 }, 5*time.Second, 5*time.Millisecond)
	go acquire("small")
	require.Eventually(t, func() bool { return m.Snapshot().Waiting == 2 }, 5*time.Second, 5*time.Millisecond)
	g1.Release()
	require.Equal(t, "small", <-order, "the loaded model's request went ahead (no swap)")
	require.Equal(t, "large", <-order)

	// Past the bound: a later small request waits behind the older large one.
	g2, err := m.Acquire(ctx, "large", nil)
	require.NoError(t, err)
	go acquire("small")
	require.Eventually(t, func() bool { return m.Snapshot().Waiting == 1 }, 5*time.Second, 5*time.Millisecond)
	time.Sleep(1600 * time.Millisecond) // let the small request age past the bound (not a proof of anything)
	go acquire("large")
	require.Eventually(t, func() bool { return m.Snapshot().Waiting == 2 }, 5*time.Second, 5*time.Millisecond)
	g2.Release()
	require.Equal(t, "small", <-order, "the overdue request was not overtaken")
	require.Equal(t, "large", <-order)
}

// TestIdleUnloadResumesImmich (item 4): a model nothing uses for its idle time is
// unloaded and Immich's queues (the double) resume; the next request loads it again and
// pauses them.
func TestIdleUnloadResumesImmich(t *testing.T) {
	b := processBackend(t, 0)
	im := immichtest.Start(t, "admin-key", false)
	m := startManager(t, Device{Backend: b, Telemetry: newFakeSysfs(t, b),
		Immich: &immich.Client{URL: im.URL, APIKey: "admin-key", Agent: "t"},
		IdleUnload: func(model string) time.Duration {
			return map[string]time.Duration{"small": 400 * time.Millisecond}[model]
		}})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	g, err := m.Acquire(ctx, "small", nil)
	require.NoError(t, err)
	require.True(t, im.Paused("smartSearch"), "Immich pauses while a model is loaded")
	require.Never(t, func() bool { return m.Snapshot().Phase != PhaseReady }, 600*time.Millisecond, 20*time.Millisecond,
		"a model in use is never unloaded for idleness")
	g.Release()
	require.Eventually(t, func() bool { s := m.Snapshot(); return s.Phase == PhaseIdle && s.Loaded == "" }, 30*time.Second, 10*time.Millisecond)
	require.Empty(t, b.Running())
	require.Eventually(t, func() bool { return !im.Paused("smartSearch") && !im.Paused("faceDetection") && !im.Paused("ocr") },
		30*time.Second, 10*time.Millisecond, "Immich's queues resume after the idle unload")

	// A model without an idle time stays loaded.
	g, err = m.Acquire(ctx, "large", nil)
	require.NoError(t, err)
	require.True(t, im.Paused("smartSearch"))
	g.Release()
	require.Never(t, func() bool { return m.Snapshot().Phase != PhaseReady }, time.Second, 20*time.Millisecond)
}

// TestUnknownRecoversByItself (item 3): after an unload whose memory did not come back
// the device is unknown and says why; fresh readings keep coming, and once enough of
// them in a row show the memory back it recovers by itself and the waiter loads.
func TestUnknownRecoversByItself(t *testing.T) {
	b := processBackend(t, 0)
	sys := newFakeSysfs(t, b)
	m := startManager(t, Device{Name: "rx7900", Backend: b, Telemetry: sys, MemoryWait: 300 * time.Millisecond,
		TelemetryEvery: 30 * time.Millisecond, RecoverReadings: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	g, err := m.Acquire(ctx, "small", nil)
	require.NoError(t, err)
	g.Release()
	sys.Hold()
	got := make(chan error, 1)
	go func() {
		g, err := m.Acquire(ctx, "large", nil)
		if err == nil {
			g.Release()
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return m.Snapshot().Phase == PhaseUnknown }, 30*time.Second, 10*time.Millisecond,
		"%+v", m.Snapshot())
	r := m.Snapshot().Reason
	require.Contains(t, r, "the memory did not come back after unloading small")
	require.Contains(t, r, "recovers by itself after 3 readings in a row with at least")
	require.Contains(t, r, "pa admin gpu confirm rx7900")
	require.Never(t, func() bool { return len(got) > 0 || m.Snapshot().Phase != PhaseUnknown }, 300*time.Millisecond, 10*time.Millisecond,
		"held memory keeps the device unknown")
	sys.Held.Store(false) // the memory comes back (the leak was freed)
	require.NoError(t, <-got)
	require.Equal(t, []string{"large"}, b.Running())
}

// TestOperatorConfirmsUnknown (item 3): an operator's confirmation (the admin API's
// record, polled through ConfirmRequested) frees an unknown device; one made before the
// device became unknown does not.
func TestOperatorConfirmsUnknown(t *testing.T) {
	b := processBackend(t, 0)
	sys := newFakeSysfs(t, b)
	var confirmed atomic.Pointer[time.Time]
	old := time.Now().Add(-time.Hour)
	confirmed.Store(&old)
	m := startManager(t, Device{Backend: b, Telemetry: sys, MemoryWait: 200 * time.Millisecond, TelemetryEvery: 20 * time.Millisecond,
		ConfirmRequested: func(context.Context) (time.Time, error) { return *confirmed.Load(), nil }})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	g, err := m.Acquire(ctx, "small", nil)
	require.NoError(t, err)
	g.Release()
	sys.Hold() // stays held: only the operator can free it
	got := make(chan error, 1)
	go func() {
		g, err := m.Acquire(ctx, "large", nil)
		if err == nil {
			g.Release()
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return m.Snapshot().Phase == PhaseUnknown }, 30*time.Second, 10*time.Millisecond)
	require.Never(t, func() bool { return m.Snapshot().Phase != PhaseUnknown }, 200*time.Millisecond, 10*time.Millisecond,
		"a confirmation older than the unknown state does not apply")
	now := time.Now()
	confirmed.Store(&now)
	require.NoError(t, <-got)
}
