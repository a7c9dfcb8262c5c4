package stream

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/appwrite/sdk-for-go/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/functions/service"
	"privateassistant/internal/startstop"
	"privateassistant/longpoll"
	"privateassistant/queue"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
)

// Prefix is the path prefix the proxy routes to the stream service.
const Prefix = "/stream/"

// Scopes are the Appwrite key scopes the service needs, and all it may have: records
// (runs, events, conversations, artifacts, runtime keys and links) and file downloads.
var Scopes = []string{"documents.read", "files.read"}

// Service is the stream service: an http.Handler with a startstop lifecycle.
type Service struct {
	cfg     Config
	log     *slog.Logger
	http    *http.Client // Appwrite's JSON API
	dl      *http.Client // Appwrite downloads: no overall timeout, the body streams
	rdb     *redis.Client
	st      *schema.Store
	auth    *httpapi.Authenticator
	api     *httpapi.API
	hub     *longpoll.Hub
	sys     *sysWatch
	metrics *Metrics
	// userTokens verifies runtime keys' user tokens (runtimeapi).
	userTokens runtimeapi.UserVerifier

	runner   startstop.Runner
	instance string // this process in the heartbeat set (alive.go)
	mu       sync.Mutex
	started  bool
	stopped  bool
	streams  map[string]int // user → open streams
	open     sync.WaitGroup // handlers in flight
	lives    lives          // direct run streams (live.go), for the ticker
	workers  sync.WaitGroup // direct streams' goroutines (live.go spawn, pool)
	beats    beats          // the heartbeat workers' queue (live.go pool)
}

var _ startstop.Service = (*Service)(nil)
var _ http.Handler = (*Service)(nil)

// New builds the service; it does not touch the network. reg (may be nil) receives the
// service's metrics.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	rdb, err := cfg.Redis().NewClient(queue.RedisTuning{DialTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, PoolSize: 8})
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 90 * time.Second}}
	dl := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 90 * time.Second, ResponseHeaderTimeout: 30 * time.Second}}
	cl := client.New()
	cl.Client = hc
	cl.Endpoint = strings.TrimRight(cfg.Endpoint, "/")
	cl.Headers["X-Appwrite-Project"] = cfg.ProjectID
	cl.Headers["X-Appwrite-Key"] = cfg.APIKey
	s := &Service{
		cfg: cfg, log: log, http: hc, dl: dl, rdb: rdb,
		st:      schema.NewStore(cl, schema.Definition(cfg.DatabaseID)),
		auth:    &httpapi.Authenticator{Endpoint: cfg.Endpoint, Project: cfg.ProjectID, TTL: cfg.JWTCacheTTL, HTTP: hc},
		streams: map[string]int{}, instance: instanceID(),
	}
	s.lives.all = map[*live]struct{}{}
	// Each stream has at most one poll in flight, so the hub's own per-user cap never
	// refuses one this service admitted.
	s.hub = &longpoll.Hub{Base: rdb.Options(), Readers: cfg.Readers, MaxPerUser: cfg.MaxPerUser, Log: log}
	// No asynq inspector (its reads are scripts): the queues with plain reads.
	s.sys = newSysWatch(service.SystemReader{Store: s.st, RDB: rdb, Stale: cfg.HeartbeatStale},
		cfg.SystemEvery, cfg.SystemRecordsEvery)
	s.metrics = newMetrics(reg, s)
	s.api = httpapi.New(s.auth, cfg.CORSOrigins, log)
	s.api.Member = func(u httpapi.User) bool { return service.IsMember(u, cfg.MemberLabel, cfg.AdminLabel) }
	s.routes(s.api)
	return s, nil
}

// Routes lists the registered routes (the proxy check in deploy/ walks them).
func (s *Service) Routes() []httpapi.RouteInfo { return s.api.Routes() }

// Follows reports the streams open in this process.
func (s *Service) Follows() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, c := range s.streams {
		n += c
	}
	return n
}

// Start starts the hub (it sends nothing to Redis until someone follows) and the
// service's heartbeat (alive.go).
func (s *Service) Start(ctx context.Context) error {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		return startstop.ErrStarted
	}
	s.started = true
	s.mu.Unlock()
	if err := s.runner.Start(ctx, nil); err != nil {
		return err
	}
	if err := s.hub.Start(s.runner.Context()); err != nil {
		s.runner.Stop()
		return err
	}
	s.runner.Go(s.sys.run)
	s.runner.Go(s.beat)
	s.runner.Go(s.tick)
	return nil
}

// Stop, in this order: refuse new requests, cancel every stream and download in flight
// and wait for their handlers, stop the hub (its readers), close the clients. Idempotent.
func (s *Service) Stop() {
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		s.open.Wait()
		return
	}
	s.stopped = true
	started := s.started
	s.mu.Unlock()
	s.runner.Stop() // cancels the context every handler's is tied to; the ticker ends the direct streams
	s.open.Wait()
	s.workers.Wait()
	s.hub.Stop()
	if started {
		s.unbeat()
	}
	s.http.CloseIdleConnections()
	s.dl.CloseIdleConnections()
	_ = s.rdb.Close()
}

// Ping checks Redis (readiness).
func (s *Service) Ping(ctx context.Context) error { return s.rdb.Ping(ctx).Err() }

// PingAppwrite checks Appwrite answers (readiness).
func (s *Service) PingAppwrite(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(s.cfg.Endpoint, "/")+"/health/version", nil)
	if err != nil {
		return err
	}
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		return errors.New("appwrite answered " + resp.Status)
	}
	return nil
}

// ServeHTTP serves the public paths.
func (s *Service) ServeHTTP(w http.ResponseWriter, r *http.Request) { s.api.ServeHTTP(w, r) }

var errStopping = &httpapi.Error{Status: 503, Code: "stream_unavailable", Message: "the stream service is stopping; retry", RetryAfter: 2 * time.Second}

// begin admits one request: a context that ends with the client or with Stop, and a
// release that Stop waits for.
func (s *Service) begin(r *http.Request) (context.Context, func(), error) {
	s.mu.Lock()
	if !s.started || s.stopped {
		s.mu.Unlock()
		return nil, nil, errStopping
	}
	s.open.Add(1)
	base := s.runner.Context()
	s.mu.Unlock()
	ctx, cancel := context.WithCancel(r.Context())
	unhook := context.AfterFunc(base, cancel)
	return ctx, func() { unhook(); cancel(); s.open.Done() }, nil
}

// detach admits a stream that goes on after its handler returned (a taken-over
// connection): a release that Stop waits for (the runner's context ends the stream). ok
// false when the service is stopping.
func (s *Service) detach() (func(), bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.started || s.stopped {
		return nil, false
	}
	s.open.Add(1)
	return s.open.Done, true
}

// follow counts one open stream of user, refusing beyond MaxPerUser with the long-poll's
// answer (429 too_many_follows with Retry-After).
func (s *Service) follow(user string) (func(), error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.streams[user] >= s.cfg.MaxPerUser {
		return nil, fault.Errorf(fault.RateLimited, "too_many_follows",
			"too many live event requests at once (at most %d); close a tab or try again shortly", s.cfg.MaxPerUser).Retry(2 * time.Second)
	}
	s.streams[user]++
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.streams[user]--; s.streams[user] <= 0 {
				delete(s.streams, user)
			}
			s.mu.Unlock()
		})
	}, nil
}
