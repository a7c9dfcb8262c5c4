// Package ops is the agent's operations listener: /healthz (the process is up), /readyz
// (each dependency reported separately: Redis, Appwrite, every harness and backend),
// /metrics (Prometheus: asynq's queue collector plus run, event, harness and upload
// counters) and asynqmon under /asynqmon/ behind HTTP basic auth (asynqmon has no
// authentication of its own).
package ops

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sort"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynq/x/metrics"
	"github.com/hibiken/asynqmon"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/redis/go-redis/v9"
)

// Check is one readiness probe.
type Check func(ctx context.Context) error

// Metrics are the agent's own counters.
type Metrics struct {
	Runs     *prometheus.CounterVec
	Finished *prometheus.CounterVec
	Events   *prometheus.CounterVec
	Harness  *prometheus.CounterVec
	Uploads  *prometheus.CounterVec
}

// NewMetrics registers the counters on reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		Runs:     prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pa_runs_started_total", Help: "Run attempts started, by role."}, []string{"role"}),
		Finished: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pa_runs_finished_total", Help: "Runs settled, by role and status."}, []string{"role", "status"}),
		Events:   prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pa_events_emitted_total", Help: "Run events emitted, by type."}, []string{"type"}),
		Harness:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pa_harness_errors_total", Help: "Harness errors, by harness kind."}, []string{"kind"}),
		Uploads:  prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pa_artifact_uploads_total", Help: "Artifact uploads, by result."}, []string{"result"}),
	}
	reg.MustRegister(m.Runs, m.Finished, m.Events, m.Harness, m.Uploads)
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
	Checks   map[string]Check
	// Dynamic adds checks known only at run time (one per harness and backend in use).
	Dynamic  func() map[string]Check
	Registry *prometheus.Registry
	RDB      redis.UniversalClient
	Log      *slog.Logger

	srv  *http.Server
	ln   net.Listener
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
			s.Registry.MustRegister(metrics.NewQueueMetricsCollector(asynq.NewInspectorFromRedisClient(s.RDB)))
		}
		s.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
		mux.Handle("GET /metrics", promhttp.HandlerFor(s.Registry, promhttp.HandlerOpts{}))
	}
	if s.Password != "" && s.RDB != nil {
		s.mon = asynqmon.New(asynqmon.Options{RootPath: "/asynqmon", RedisConnOpt: redisOpt{s.RDB}, ReadOnly: false})
		mux.Handle("/asynqmon/", s.basicAuth(s.mon))
	}
	return mux
}

// redisOpt hands asynqmon the agent's own client.
type redisOpt struct{ c redis.UniversalClient }

func (o redisOpt) MakeRedisClient() interface{} { return o.c }

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

func (s *Server) ready(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	defer cancel()
	checks := map[string]Check{}
	for n, c := range s.Checks {
		checks[n] = c
	}
	if s.Dynamic != nil {
		for n, c := range s.Dynamic() {
			checks[n] = c
		}
	}
	names := make([]string, 0, len(checks))
	for n := range checks {
		names = append(names, n)
	}
	sort.Strings(names)
	out := map[string]string{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	ok := true
	for _, n := range names {
		wg.Add(1)
		go func(n string) {
			defer wg.Done()
			err := checks[n](ctx)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				out[n] = "error: " + err.Error()
				ok = false
			} else {
				out[n] = "ok"
			}
		}(n)
	}
	wg.Wait()
	status := 200
	if !ok {
		status = 503
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"ready": ok, "checks": out})
}

// Start listens in the background.
func (s *Server) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", s.Addr)
	if err != nil {
		return err
	}
	s.ln = ln
	s.srv = &http.Server{Handler: s.Handler(), ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := s.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && s.Log != nil {
			s.Log.Error("ops listener failed", "err", err)
		}
	}()
	return nil
}

// Addr returns the bound address (after Start).
func (s *Server) Bound() string { return s.ln.Addr().String() }

// Stop closes the listener. Idempotent.
func (s *Server) Stop() {
	s.once.Do(func() {
		if s.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
			defer cancel()
			_ = s.srv.Shutdown(ctx)
		}
		if s.mon != nil {
			_ = s.mon.Close()
		}
	})
}
