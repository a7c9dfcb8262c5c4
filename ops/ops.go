// Package ops is the agent's operations listener: /healthz (the process is up), /readyz
// (each dependency reported separately: Redis, Appwrite, every harness and backend),
// /metrics (Prometheus: asynq's queue collector, the Redis's memory use, plus run, event,
// harness and upload counters) and asynqmon under /asynqmon/ behind HTTP basic auth (asynqmon has no
// authentication of its own).
package ops

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynq/x/metrics"
	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"

	"privateassistant/readiness"
)

// Check is one readiness probe (readiness.Check).
type Check = readiness.Check

// Metrics are the agent's own counters.
type Metrics struct {
	Runs     *prometheus.CounterVec
	Finished *prometheus.CounterVec
	Events   *prometheus.CounterVec
	Harness  *prometheus.CounterVec
	Uploads  *prometheus.CounterVec
	// LiveHarnessFailing: live harness revisions whose latest validation failed (their
	// roles keep serving; the alert PrivateAssistantLiveHarnessCheckFailed).
	LiveHarnessFailing prometheus.Gauge
}

// NewMetrics registers the counters on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Runs:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pa_runs_started_total", Help: "Run attempts started, by role."}, []string{"role"}),
		Finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pa_runs_finished_total", Help: "Runs settled, by role and status."}, []string{"role", "status"}),
		Events:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pa_events_emitted_total", Help: "Run events emitted, by type."}, []string{"type"}),
		Harness:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pa_harness_errors_total", Help: "Harness errors, by harness kind."}, []string{"kind"}),
		Uploads:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pa_artifact_uploads_total", Help: "Artifact uploads, by result."}, []string{"result"}),
		LiveHarnessFailing: prometheus.NewGauge(prometheus.GaugeOpts{Name: "pa_live_harness_check_failing",
			Help: "Harness revisions a role is bound to whose latest validation failed (the roles keep serving)."}),
	}
	reg.MustRegister(m.Runs, m.Finished, m.Events, m.Harness, m.Uploads, m.LiveHarnessFailing)
	return m
}

func (m *Metrics) RunStarted(role string)          { m.Runs.WithLabelValues(role).Inc() }
func (m *Metrics) RunFinished(role, status string) { m.Finished.WithLabelValues(role, status).Inc() }
func (m *Metrics) EventEmitted(kind string)        { m.Events.WithLabelValues(kind).Inc() }
func (m *Metrics) HarnessError(kind string)        { m.Harness.WithLabelValues(kind).Inc() }

// Server is the ops listener.
type Server struct {
	Addr     string
	User     string // asynqmon basic auth; asynqmon is not mounted without a password
	Password string
	Checks   map[string]readiness.Probe
	// Dynamic adds probes known only at run time (one per Hermes, device and queue).
	Dynamic  func() map[string]readiness.Probe
	Registry *prometheus.Registry
	RDB      redis.UniversalClient
	Log      *slog.Logger

	http *HTTPServer
	once sync.Once
	mon  *asynqmon.HTTPHandler
}

// Handler builds the routes.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("GET /readyz", s.ready)
	if s.Registry != nil {
		if s.RDB != nil {
			s.Registry.MustRegister(metrics.NewQueueMetricsCollector(asynq.NewInspectorFromRedisClient(s.RDB)), NewRedisMemory(s.RDB))
		}
		s.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
			NewReadinessCollector(s.Evaluate))
		// A collector that fails leaves its series out and the rest is served: a component
		// that fails reaches Prometheus as pa_component_ready 0 and its own alert fires,
		// rather than the whole scrape failing (AgentDown).
		opts := promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}
		if s.Log != nil {
			opts.ErrorLog = slog.NewLogLogger(s.Log.Handler(), slog.LevelDebug)
		}
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.Registry, opts))
	}
	if s.Password != "" && s.RDB != nil {
		s.mon = asynqmon.New(asynqmon.Options{RootPath: "/asynqmon", RedisConnOpt: redisOpt{s.RDB}, ReadOnly: false})
		mux.Handle("/asynqmon/", s.basicAuth(s.mon))
	}
	return mux
}

// redisOpt hands asynqmon the agent's own client, wrapped so that asynqmon's Close (which
// closes the client it was given) leaves the agent's client open: the daemon closes Redis
// last, after every component that uses it has stopped.
type redisOpt struct{ c redis.UniversalClient }

func (o redisOpt) MakeRedisClient() interface{} { return noClose{o.c} }

// noClose is a Redis client whose Close does nothing.
type noClose struct{ redis.UniversalClient }

func (noClose) Close() error { return nil }

func (s *Server) basicAuth(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		u, p, ok := r.BasicAuth()
		if !ok || subtle.ConstantTimeCompare([]byte(u), []byte(s.User)) != 1 || subtle.ConstantTimeCompare([]byte(p), []byte(s.Password)) != 1 {
			w.Header().Set("WWW-Authenticate", `Basic realm="asynqmon", charset="UTF-8"`)
			http.Error(w, "authentication required", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}

// Evaluate runs every readiness probe (static and dynamic) at once.
func (s *Server) Evaluate(ctx context.Context) []readiness.Component {
	probes := map[string]readiness.Probe{}
	for n, p := range s.Checks {
		probes[n] = p
	}
	if s.Dynamic != nil {
		for n, p := range s.Dynamic() {
			probes[n] = p
		}
	}
	return readiness.Evaluate(ctx, probes)
}

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	b := readiness.Body(s.Evaluate(ctx))
	status := 200
	if !b.Ready {
		status = 503
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(b)
}

// Start listens in the background (see HTTPServer).
func (s *Server) Start(ctx context.Context) error {
	s.http = &HTTPServer{Addr: s.Addr, Handler: s.Handler(), Log: s.Log, What: "ops listener"}
	return s.http.Start(ctx)
}

// Bound returns the bound address (after Start).
func (s *Server) Bound() string { return s.http.Bound() }

// Stop closes the listener and waits for it (requests in flight get a bounded grace).
// Idempotent, safe before Start.
func (s *Server) Stop() {
	if s.http == nil {
		return
	}
	s.http.Stop()
	s.once.Do(func() {
		if s.mon != nil {
			_ = s.mon.Close() // closes only asynqmon's inspector: the client is the agent's (noClose)
		}
	})
}
