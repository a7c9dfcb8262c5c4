package gpu

import (
	"context"
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
