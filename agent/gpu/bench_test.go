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

// BenchmarkAcquireRelease measures how fast the owner goroutine answers Acquire (a grant
// on the loaded model) and Release, first with a healthy backend and then, in the same
// run, with a backend whose health call hangs (it never answers). The target is under
// 1 ms p99 in both.
func BenchmarkAcquireRelease(b *testing.B) {
	measure := func(hang bool) (acq, rel []time.Duration) {
		be := newTestBackend(b)
		m := startManager(b, Device{Backend: be, HealthEvery: time.Millisecond, HealthTimeout: time.Hour})
		ctx := context.Background()
		g, err := m.Acquire(ctx, "m", nil) // loads the model
		if err != nil {
			b.Fatal(err)
		}
		g.Release()
		if hang {
			be.hangAlive.Store(true)
			for be.hanging.Load() == 0 { // wait until a health call hangs
				time.Sleep(time.Millisecond)
			}
		}
		for i := 0; i < b.N; i++ {
			t0 := time.Now()
			g, err := m.Acquire(ctx, "m", nil)
			if err != nil {
				b.Fatal(err)
			}
			t1 := time.Now()
			g.Release()
			acq, rel = append(acq, t1.Sub(t0)), append(rel, time.Since(t1))
		}
		return acq, rel
	}
	b.ResetTimer()
	idleA, idleR := measure(false)
	hungA, hungR := measure(true)
	b.StopTimer()
	us := func(d []time.Duration) float64 { return float64(percentile(d, 0.99).Nanoseconds()) / 1000 }
	b.ReportMetric(us(idleA), "idle-acquire-p99-us")
	b.ReportMetric(us(idleR), "idle-release-p99-us")
	b.ReportMetric(us(hungA), "hung-health-acquire-p99-us")
	b.ReportMetric(us(hungR), "hung-health-release-p99-us")
	b.ReportMetric(1000, "target-p99-us")
}

func percentile(d []time.Duration, p float64) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[int(float64(len(s)-1)*p)]
}

func median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	return s[len(s)/2]
}
