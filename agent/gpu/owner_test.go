package gpu

import (
	"context"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/modeltest"
)

// testBackend is an OpenAI-compatible upstream (the scripted model over real HTTP) that
// the manager "loads" by name. It records every load and unload; its health call and its
// loads can be made to hang until their context ends.
type testBackend struct {
	url string

	hangAlive  atomic.Bool
	aliveCalls atomic.Int32
	hanging    atomic.Int32 // health calls hanging right now
	hangLoad   atomic.Bool
	loadsIn    atomic.Int32 // loads that entered Load
	loadsOut   atomic.Int32 // loads that returned

	mu      sync.Mutex
	loads   []string
	unloads []string
}

var _ Backend = (*testBackend)(nil)

func newTestBackend(t testing.TB) *testBackend {
	up := httptest.NewServer(modeltest.New("m"))
	t.Cleanup(up.Close)
	return &testBackend{url: up.URL + "/v1"}
}

func (b *testBackend) Load(ctx context.Context, model string) (string, error) {
	b.loadsIn.Add(1)
	defer b.loadsOut.Add(1)
	if b.hangLoad.Load() {
		<-ctx.Done()
		return "", ctx.Err()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.loads = append(b.loads, model)
	return b.url, nil
}

func (b *testBackend) Unload(_ context.Context, model string) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.unloads = append(b.unloads, model)
	return nil
}

func (b *testBackend) Footprint(string) int64 { return 0 }
func (b *testBackend) Key() string            { return "" }

func (b *testBackend) Alive(ctx context.Context, _ string) (bool, error) {
	b.aliveCalls.Add(1)
	if b.hangAlive.Load() {
		b.hanging.Add(1)
		defer b.hanging.Add(-1)
		<-ctx.Done() // a backend whose health endpoint never answers
		return false, ctx.Err()
	}
	return true, nil
}

func (b *testBackend) calls() (loads, unloads []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]string(nil), b.loads...), append([]string(nil), b.unloads...)
}

// hungTelemetry never answers until its context ends (a device-listing command stuck).
type hungTelemetry struct{ calls atomic.Int32 }

func (h *hungTelemetry) Read(ctx context.Context) (Reading, error) {
	h.calls.Add(1)
	<-ctx.Done()
	return Reading{}, ctx.Err()
}

// TestOwnerAnswersWhileHealthHangs: the backend's health call hangs; Acquire, Release,
// Serve and Snapshot are still answered at once (the health check has its own loop).
func TestOwnerAnswersWhileHealthHangs(t *testing.T) {
	b := newTestBackend(t)
	m := startManager(t, Device{Backend: b, HealthEvery: 5 * time.Millisecond, HealthTimeout: time.Hour})
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	g, err := m.Acquire(ctx, "m", nil)
	require.NoError(t, err)
	g.Release()
	b.hangAlive.Store(true)
	require.Eventually(t, func() bool { return b.hanging.Load() == 1 }, 5*time.Second, time.Millisecond, "a health call hangs")

	actx, acancel := context.WithTimeout(ctx, 2*time.Second)
	defer acancel()
	for range 50 {
		g, err := m.Acquire(actx, "m", nil)
		require.NoError(t, err, "Acquire must not wait for a hung health call")
		_, err = m.Serve("", "m", g.Generation)
		require.NoError(t, err)
		g.Release()
	}
	require.Equal(t, PhaseReady, m.Snapshot().Phase, "a health call that cannot answer is no crash")
}

// TestOwnerAnswersWhileTelemetryHangs: a telemetry read that never returns does not
// block the status snapshot (the heartbeat) or grants.
func TestOwnerAnswersWhileTelemetryHangs(t *testing.T) {
	b := newTestBackend(t)
	tel := &hungTelemetry{}
	m := startManager(t, Device{Backend: b, Telemetry: tel, TelemetryEvery: 5 * time.Millisecond})
	require.Eventually(t, func() bool { return tel.calls.Load() > 0 }, 5*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	done := make(chan Status, 1)
	go func() { done <- m.Snapshot() }()
	select {
	case s := <-done:
		require.Equal(t, PhaseIdle, s.Phase)
	case <-ctx.Done():
		t.Fatal("Snapshot waited for a hung telemetry read")
	}
	g, err := m.Acquire(ctx, "m", nil)
	require.NoError(t, err)
	g.Release()
}

// TestStopWaitsForEffects: Stop returns only after a load in flight (an effect goroutine)
// has returned.
func TestStopWaitsForEffects(t *testing.T) {
	b := newTestBackend(t)
	b.hangLoad.Store(true)
	m := NewManager(Device{Name: "d", Backend: b})
	require.NoError(t, m.Start(context.Background()))
	errc := make(chan error, 1)
	go func() {
		_, err := m.Acquire(context.Background(), "m", nil)
		errc <- err
	}()
	require.Eventually(t, func() bool { return b.loadsIn.Load() == 1 }, 5*time.Second, time.Millisecond)
	m.Stop()
	require.EqualValues(t, 1, b.loadsOut.Load(), "Stop returned before the load goroutine did")
	require.ErrorIs(t, <-errc, ErrStopped)
	m.Stop() // idempotent
}

// TestGrantExpiresWithoutHeartbeat: a grant nobody renews expires (its Done closes and
// its generation is refused); one whose run's lease lives is renewed by the holder loop,
// and expires once the run's lease is gone.
func TestGrantExpiresWithoutHeartbeat(t *testing.T) {
	b := newTestBackend(t)
	var runAlive atomic.Bool
	runAlive.Store(true)
	m := startManager(t, Device{Backend: b, Slots: 2, GrantTTL: 300 * time.Millisecond,
		HolderAlive: func(_ context.Context, run string) (bool, error) { return run == "r1" && runAlive.Load(), nil }})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	held, err := m.AcquireFor(ctx, "r1", "m", nil)
	require.NoError(t, err)
	defer held.Release()
	lone, err := m.AcquireFor(ctx, "r2", "m", nil)
	require.NoError(t, err)
	defer lone.Release()

	select {
	case <-lone.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("an unrenewed grant did not expire")
	}
	require.Contains(t, lone.Reason(), "expired")
	_, err = m.Serve("r2", "m", 0)
	require.ErrorIs(t, err, ErrStaleGeneration)

	// r1's lease lives: its grant outlives several TTLs.
	require.Never(t, func() bool {
		select {
		case <-held.Done():
			return true
		default:
			return false
		}
	}, time.Second, 20*time.Millisecond, "a grant whose run beats must not expire")
	_, err = m.Serve("r1", "m", held.Generation)
	require.NoError(t, err)
	runAlive.Store(false)
	select {
	case <-held.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the grant outlived its run's lease")
	}
	require.ErrorIs(t, held.Renew(), ErrGrantEnded)
}

type atomicString struct{ v atomic.Value }

func (a *atomicString) Store(s string) { a.v.Store(s) }
func (a *atomicString) Load() string   { s, _ := a.v.Load().(string); return s }
