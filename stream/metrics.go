package stream

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the stream service's series.
type Metrics struct {
	Events     prometheus.Counter
	Bytes      prometheus.Counter
	Heartbeats prometheus.Counter
}

func newMetrics(reg prometheus.Registerer, s *Service) *Metrics {
	m := &Metrics{
		Events:     prometheus.NewCounter(prometheus.CounterOpts{Name: "pa_stream_events_delivered_total", Help: "SSE messages with an event (run, response or feed) written to clients."}),
		Bytes:      prometheus.NewCounter(prometheus.CounterOpts{Name: "pa_stream_download_bytes_total", Help: "Bytes of artifact downloads relayed from Appwrite."}),
		Heartbeats: prometheus.NewCounter(prometheus.CounterOpts{Name: "pa_stream_heartbeats_total", Help: "Heartbeat comments written."}),
	}
	if reg != nil {
		reg.MustRegister(m.Events, m.Bytes, m.Heartbeats,
			prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "pa_stream_followers", Help: "Event streams open (runs, responses, feeds)."},
				func() float64 { return float64(s.Follows()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pa_stream_identity_cache_hits_total", Help: "JWT verifications answered by the short verified cache."},
				func() float64 { return float64(s.auth.Hits()) }),
			prometheus.NewCounterFunc(prometheus.CounterOpts{Name: "pa_stream_identity_verifications_total", Help: "JWT verifications that reached Appwrite (GET /v1/account)."},
				func() float64 { return float64(s.auth.Calls()) }))
	}
	return m
}

// Metrics exposes the service's counters (tests read them).
func (s *Service) Metrics() *Metrics { return s.metrics }
