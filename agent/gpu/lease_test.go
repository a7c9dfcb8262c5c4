package gpu

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue/redistest"
)

func TestControlLeaseFencing(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ctx := context.Background()
	a := &ControlLease{RDB: rdb, Device: "rx7900", Owner: "agent-a", TTL: 600 * time.Millisecond}
	b := &ControlLease{RDB: rdb, Device: "rx7900", Owner: "agent-b", TTL: 600 * time.Millisecond}
	require.NoError(t, a.Acquire(ctx))
	require.ErrorIs(t, b.Acquire(ctx), ErrDeviceTaken)
	genA := a.Generation()
	require.NoError(t, a.Check(ctx, genA))
	// Renewals keep it past its TTL: checked all along, not once after a sleep.
	require.Never(t, func() bool { return a.Check(ctx, genA) != nil }, time.Second, 50*time.Millisecond, "renewed")
	require.NoError(t, a.Check(ctx, genA), "renewed")
	a.Release(ctx)
	<-a.Done()
	require.NoError(t, b.Acquire(ctx))
	defer b.Release(ctx)
	require.Greater(t, b.Generation(), genA, "every acquisition bumps the generation")
	require.ErrorIs(t, a.Check(ctx, genA), ErrLeaseNotHeld, "the old holder's generation is stale")
	// The same owner re-takes its own lease after a restart (new generation).
	b2 := &ControlLease{RDB: rdb, Device: "rx7900", Owner: "agent-b", TTL: 600 * time.Millisecond}
	require.NoError(t, b2.Acquire(ctx))
	defer b2.Release(ctx)
	require.Greater(t, b2.Generation(), b.Generation())
	select {
	case <-b.Done():
	case <-time.After(2 * time.Second):
		t.Fatal("the superseded holder did not notice")
	}
}

// TestTwoAgentsOneDevice: two managers configured on the same device never both load;
// the one without the lease waits (fenced), takes over when the holder stops, and a
// holder that loses its lease cancels its grants.
func TestTwoAgentsOneDevice(t *testing.T) {
	srv := redistest.Start(t)
	rdb := srv.Client()
	ba, bb := processBackend(t, 0), processBackend(t, 0)
	la := &ControlLease{RDB: rdb, Device: "rx7900", Owner: "agent-a", TTL: 600 * time.Millisecond}
	lb := &ControlLease{RDB: rdb, Device: "rx7900", Owner: "agent-b", TTL: 600 * time.Millisecond}
	ma := NewManager(Device{Name: "rx7900", Backend: ba, Lease: la})
	mb := NewManager(Device{Name: "rx7900", Backend: bb, Lease: lb})
	ctxA, cancelA := context.WithCancel(context.Background())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(t, ma.Start(ctxA))
	require.Eventually(t, func() bool { return ma.Snapshot().Phase == PhaseIdle }, 5*time.Second, 10*time.Millisecond)
	require.NoError(t, mb.Start(ctx))
	defer mb.Stop()

	ga, err := ma.Acquire(ctx, "small", nil)
	require.NoError(t, err)
	var reason atomic.Value
	gotB := make(chan *Grant, 1)
	go func() {
		g, err := mb.Acquire(ctx, "large", func(_ int, r string) { reason.Store(r) })
		require.NoError(t, err)
		gotB <- g
	}()
	require.Eventually(t, func() bool { r, _ := reason.Load().(string); return r != "" }, 5*time.Second, 10*time.Millisecond)
	require.Contains(t, reason.Load(), "another agent")
	require.Empty(t, bb.Running(), "the fenced agent loads nothing")

	// Agent B's operator takes the device by force: A's renewal fails and it stands down.
	require.NoError(t, rdb.Set(ctx, controlKey("rx7900"), "operator|999", time.Second).Err())
	select {
	case <-ga.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("A kept serving after losing control")
	}
	require.Eventually(t, func() bool { return len(ba.Running()) == 0 }, 5*time.Second, 10*time.Millisecond, "A freed the device")
	ga.Release()
	cancelA()
	ma.Stop()
	g := <-gotB
	require.Equal(t, "large", g.Model)
	require.Equal(t, []string{"large"}, bb.Running())
	g.Release()
}
