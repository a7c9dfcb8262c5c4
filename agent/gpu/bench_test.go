package gpu

import (
	"context"
	"sort"
	"testing"
	"time"
)

// BenchmarkSwap measures a swap between two models on the scripted backend (real child
// processes): the total from the unload decision to the new model's grant, beside what
// the backend itself spent unloading and loading. The manager's overhead (drain,
// readiness, memory verification, bookkeeping) is the difference; the target is 300 ms.
func BenchmarkSwap(b *testing.B) {
	be := processBackend(b, 0)
	sys := newFakeSysfs(b, be)
	m := startManager(b, Device{Backend: be, Telemetry: sys, PollEvery: 10 * time.Millisecond})
	ctx := context.Background()
	models := []string{"small", "large"}
	g, err := m.Acquire(ctx, models[0], nil)
	if err != nil {
		b.Fatal(err)
	}
	g.Release()
	var total, backend, overhead, verify, ready []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		g, err := m.Acquire(ctx, models[(i+1)%2], nil)
		if err != nil {
			b.Fatal(err)
		}
		g.Release()
		t := m.Snapshot().LastSwap
		total = append(total, t.Total)
		backend = append(backend, t.Unload+t.Load)
		overhead = append(overhead, t.Total-t.Unload-t.Load)
		verify = append(verify, t.Verify)
		ready = append(ready, t.Ready)
	}
	b.StopTimer()
	ms := func(d []time.Duration) float64 { return float64(median(d).Microseconds()) / 1000 }
	b.ReportMetric(ms(total), "swap-ms")
	b.ReportMetric(ms(backend), "backend-unload+load-ms")
	b.ReportMetric(ms(overhead), "overhead-ms")
	b.ReportMetric(300, "target-overhead-ms")
	b.ReportMetric(ms(verify), "memory-verify-ms")
	b.ReportMetric(ms(ready), "readiness-ms")
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
