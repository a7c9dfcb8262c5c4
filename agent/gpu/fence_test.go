package gpu

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue/redistest"
)

// leasedManager starts a manager holding the device's control lease (TTL long enough
// that no renewal runs during the test: only the checks before acting can notice).
func leasedManager(t *testing.T) (*Manager, *testBackend, *ControlLease) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	b := newTestBackend(t)
	l := &ControlLease{RDB: rdb, Device: "xtx", Owner: "agent-a", TTL: time.Minute}
	m := startManager(t, Device{Name: "xtx", Backend: b, Lease: l})
	require.Eventually(t, func() bool { return m.Snapshot().Phase == PhaseIdle }, 5*time.Second, 5*time.Millisecond)
	return m, b, l
}

// takeOver makes another agent the device's controller behind this agent's back.
func takeOver(t *testing.T, l *ControlLease) {
	require.NoError(t, l.RDB.Set(context.Background(), controlKey(l.Device), "agent-b|999", time.Minute).Err())
}

// TestStaleLoadRefused: a load whose control-lease generation went stale is refused
// before the backend is touched; the device turns fenced and the waiter keeps waiting.
func TestStaleLoadRefused(t *testing.T) {
	m, b, l := leasedManager(t)
	takeOver(t, l)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var reason atomicString
	errc := make(chan error, 1)
	go func() {
		_, err := m.Acquire(ctx, "m", func(_ int, r string) { reason.Store(r) })
		errc <- err
	}()
	require.Eventually(t, func() bool { return m.Snapshot().Phase == PhaseFenced }, 5*time.Second, 5*time.Millisecond)
	require.Eventually(t, func() bool { return reason.Load() == "another agent controls this device" }, 5*time.Second, 5*time.Millisecond)
	loads, _ := b.calls()
	require.Empty(t, loads, "a stale load must not reach the backend")
	cancel()
	require.ErrorIs(t, <-errc, context.Canceled)
}

// TestStaleUnloadRefused: a swap's unload whose control-lease generation went stale is
// refused before the backend is touched (the model may now be the new holder's).
func TestStaleUnloadRefused(t *testing.T) {
	m, b, l := leasedManager(t)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	g, err := m.Acquire(ctx, "a", nil)
	require.NoError(t, err)
	g.Release()
	takeOver(t, l)
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	errc := make(chan error, 1)
	go func() {
		_, err := m.Acquire(wctx, "b", nil) // needs a swap: unload a, load b
		errc <- err
	}()
	require.Eventually(t, func() bool { return m.Snapshot().Phase == PhaseFenced }, 5*time.Second, 5*time.Millisecond)
	loads, unloads := b.calls()
	require.Equal(t, []string{"a"}, loads)
	require.Empty(t, unloads, "a stale unload must not reach the backend")
	wcancel()
	require.ErrorIs(t, <-errc, context.Canceled)
}
