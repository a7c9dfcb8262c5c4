package hermesreal

import (
	"context"
	"net/http"
	"testing"
	"time"
)

// BenchmarkStart reports how long a real Hermes takes from exec to a healthy /health
// (start-ms, one start per benchmark call) and, as the floor beside it, one /health
// round trip on the running server (health-us, the loop).
func BenchmarkStart(b *testing.B) {
	venv := Require(b)
	s, err := Launch(context.Background(), venv, b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	hc := &http.Client{Timeout: 5 * time.Second}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		resp, err := hc.Get(s.URL + "/health")
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	b.StopTimer()
	b.ReportMetric(float64(s.StartTime.Milliseconds()), "start-ms")
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "health-us")
	hc.CloseIdleConnections()
}
