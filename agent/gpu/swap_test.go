package gpu

import (
	"context"
	"errors"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// staleTelemetry reports the memory back, but from a reading a minute old.
type staleTelemetry struct{}

func (staleTelemetry) Read(context.Context) (Reading, error) {
	return Reading{At: time.Now().Add(-time.Minute), MemTotal: 24 << 30, MemUsed: 1 << 30}, nil
}

// TestStaleReadingNeverProvesMemoryBack: memory verification after an unload accepts
// only a fresh reading; a stale one showing the memory free proves nothing.
func TestStaleReadingNeverProvesMemoryBack(t *testing.T) {
	m := NewManager(Device{Name: "d", Backend: &UpstreamBackend{}, Telemetry: staleTelemetry{},
		MemoryWait: 100 * time.Millisecond, PollEvery: 10 * time.Millisecond})
	before := Reading{At: time.Now(), MemTotal: 24 << 30, MemUsed: 20 << 30}
	require.False(t, m.waitMemory(context.Background(), before, 8<<30))
	fresh := NewManager(Device{Name: "d", Backend: &UpstreamBackend{}, Telemetry: readingFunc(func() Reading {
		return Reading{At: time.Now(), MemTotal: 24 << 30, MemUsed: 1 << 30}
	}), MemoryWait: 100 * time.Millisecond, PollEvery: 10 * time.Millisecond})
	require.True(t, fresh.waitMemory(context.Background(), before, 8<<30), "the same figures, fresh, prove it")
}

// readingFunc is telemetry from a function.
type readingFunc func() Reading

func (f readingFunc) Read(context.Context) (Reading, error) { return f(), nil }

// failingTelemetry fails every read while Fail is set (a telemetry source that is gone:
// an unreadable sysfs file, a device-listing command that errors).
type failingTelemetry struct {
	Telemetry
	Fail atomic.Bool
}

func (f *failingTelemetry) Read(ctx context.Context) (Reading, error) {
	if f.Fail.Load() {
		return Reading{}, errors.New("telemetry unreadable")
	}
	return f.Telemetry.Read(ctx)
}

// TestFailedReadingBeforeUnloadMakesTheDeviceUnknown: when no reading can be taken right
// before an unload, the memory cannot be verified back, so the device is unknown and the
// next model does not load. It recovers by itself once fresh readings show the memory
// back against the last reading taken while the model was loaded. Before the fix a failed
// reading skipped the memory check and the next model loaded on faith, with the old
// model's memory still held.
func TestFailedReadingBeforeUnloadMakesTheDeviceUnknown(t *testing.T) {
	b := processBackend(t, 0)
	sys := newFakeSysfs(t, b)
	tel := &failingTelemetry{Telemetry: sys}
	m := startManager(t, Device{Name: "rx7900", Backend: b, Telemetry: tel, MemoryWait: 300 * time.Millisecond,
		TelemetryEvery: 20 * time.Millisecond, RecoverReadings: 3})
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	g, err := m.Acquire(ctx, "small", nil)
	require.NoError(t, err)
	loadedAt := time.Now()
	require.Eventually(t, func() bool { return m.Snapshot().Reading.At.After(loadedAt) }, 10*time.Second, 5*time.Millisecond,
		"a reading taken while small is loaded")
	g.Release()
	tel.Fail.Store(true) // telemetry is gone before the unload
	sys.Hold()           // and the memory stays used after it
	got := make(chan error, 1)
	go func() {
		g, err := m.Acquire(ctx, "large", nil)
		if err == nil {
			g.Release()
		}
		got <- err
	}()
	require.Eventually(t, func() bool {
		return m.Snapshot().Phase == PhaseUnknown || slices.Contains(b.Running(), "large")
	}, 30*time.Second, 5*time.Millisecond)
	require.Equal(t, PhaseUnknown, m.Snapshot().Phase, "large loaded although small's memory was never verified back: %+v", m.Snapshot())
	require.Empty(t, b.Running(), "small was unloaded, nothing else loaded")
	r := m.Snapshot().Reason
	require.Contains(t, r, "no telemetry reading could be taken before unloading small")
	require.Contains(t, r, "pa admin gpu confirm rx7900")
	tel.Fail.Store(false) // readings again, but the memory is still held: still unknown
	require.Never(t, func() bool { return len(got) > 0 || m.Snapshot().Phase != PhaseUnknown }, 300*time.Millisecond, 10*time.Millisecond)
	sys.Held.Store(false) // the memory comes back: fresh readings prove it, several in a row
	require.NoError(t, <-got)
	require.Equal(t, []string{"large"}, b.Running())
}
