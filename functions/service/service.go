// Package service wires the functions' endpoints (docs/design/api.md) onto the shared HTTP
// layer: configuration from the environment, one set of long-lived clients per warm
// container, and the route table of each Appwrite Function.
package service

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/appwrite/sdk-for-go/client"
	"github.com/hibiken/asynq"
	"github.com/kelseyhightower/envconfig"
	"github.com/redis/go-redis/v9"

	"privateassistant/admit"
	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/longpoll"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
)

// Config is read from the function's environment. Appwrite sets the APPWRITE_FUNCTION_*
// variables; the PA_* ones are project or function variables set by the operator.
type Config struct {
	Endpoint   string `envconfig:"APPWRITE_FUNCTION_API_ENDPOINT" required:"true"`
	ProjectID  string `envconfig:"APPWRITE_FUNCTION_PROJECT_ID" required:"true"`
	DatabaseID string `envconfig:"PA_DATABASE_ID" default:"privateassistant"`
	// APIKey is only a fallback for running outside Appwrite: inside, every execution
	// carries its own x-appwrite-key with the function's scopes.
	APIKey string `envconfig:"PA_APPWRITE_API_KEY"`

	RedisAddr     string `envconfig:"PA_REDIS_ADDR"` // or Sentinel (queue.RedisSecurity)
	RedisUsername string `envconfig:"PA_REDIS_USERNAME"`
	RedisPassword string `envconfig:"PA_REDIS_PASSWORD"`
	RedisDB       int    `envconfig:"PA_REDIS_DB" default:"0"`
	// TLS, the password by key reference, Sentinel (PA_REDIS_TLS, ...; deploy/redis.conf).
	queue.RedisSecurity

	CORSOrigins []string      `envconfig:"PA_CORS_ORIGINS"`
	JWTCacheTTL time.Duration `envconfig:"PA_JWT_CACHE_TTL" default:"5s"`
	AdmitRate   int           `envconfig:"PA_ADMIT_RATE" default:"30"`
	AdmitWindow time.Duration `envconfig:"PA_ADMIT_WINDOW" default:"1m"`
	// ConversationRate bounds new conversations per user per AdmitWindow.
	ConversationRate int           `envconfig:"PA_CONVERSATION_RATE" default:"20"`
	HeartbeatStale   time.Duration `envconfig:"PA_HEARTBEAT_STALE" default:"30s"`
	// LongPollMax bounds how long a long-poll waits. A synchronous execution holds one of
	// Appwrite's few function workers while it waits (docs/design/api.md "Capacity"): followers use
	// the stream service, and this fallback waits briefly.
	LongPollMax time.Duration `envconfig:"PA_LONGPOLL_MAX" default:"2s"`
	// LongPollWaiters caps the long-polls of this container that wait at once (beyond
	// it a poll answers at once with what there is): with the other functions' caps, below
	// Appwrite's function workers, so waiting never takes the last worker.
	LongPollWaiters int           `envconfig:"PA_LONGPOLL_WAITERS" default:"1"`
	Coalesce        time.Duration `envconfig:"PA_LONGPOLL_COALESCE" default:"30ms"`
	FollowsPerUser  int           `envconfig:"PA_LONGPOLL_PER_USER" default:"16"` // a user's long-polls in flight per container; beyond: 429
	AdminLabel      string        `envconfig:"PA_ADMIN_LABEL" default:"admin"`
	// MemberLabel is the Appwrite label an admin gives a user to admit them (closed by
	// default: a verified user with neither this nor the admin label reaches nothing).
	MemberLabel  string   `envconfig:"PA_MEMBER_LABEL" default:"member"`
	KnownDevices []string `envconfig:"PA_KNOWN_DEVICES"` // devices routes may name (beside those reporting status)
	// RouteQualification is the selection gate (gpu_admin.go routeGate): "managed" (the
	// default) needs a passing GPU qualification for a route on a device an agent
	// manages, "all" for every route, "off" for none.
	RouteQualification string `envconfig:"PA_ROUTE_QUALIFICATION" default:"managed"`
	// SoloPromotion turns the two-admin rule off: with two or more admins, a release's
	// author alone cannot promote it unless this is set.
	SoloPromotion bool `envconfig:"PA_SOLO_PROMOTION" default:"false"`
	// ReconcileGap is the least time between two scheduled reconciler passes (the admin
	// function's schedule runs one a minute; scheduled.go).
	ReconcileGap time.Duration `envconfig:"PA_RECONCILE_GAP" default:"20s"`
	// ReleaseProbe is how a release's evidence gets its probe runs (probe.go): "agent"
	// (the default: the agent serving each role's route device runs one through the
	// candidate's harness and route on the gateway) or "off" (the evidence says the
	// probe was skipped; a Config built in code without it is off).
	ReleaseProbe string `envconfig:"PA_RELEASE_PROBE" default:"agent"`
	// ReleaseProbeWait bounds how long the evidence waits for an agent to answer a probe:
	// past it the probe fails ("no agent answered the probe within …").
	ReleaseProbeWait time.Duration `envconfig:"PA_RELEASE_PROBE_WAIT" default:"10m"`
	// AppCallbackAllow is the admin's allow-list of host-app callback URL prefixes
	// (comma-separated; apptools): PUT /api/v1/tools refuses a callback outside it.
	AppCallbackAllow string `envconfig:"PA_APP_CALLBACK_ALLOW"`
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case !strings.HasPrefix(c.Endpoint, "http"):
		return fmt.Errorf("APPWRITE_FUNCTION_API_ENDPOINT must be an http(s) URL, got %q", c.Endpoint)
	case c.LongPollMax <= 0 || c.LongPollMax > 25*time.Second:
		return fmt.Errorf("PA_LONGPOLL_MAX must be in (0, 25s]: Appwrite cuts synchronous executions at 30 s")
	case c.LongPollWaiters < 0:
		return fmt.Errorf("PA_LONGPOLL_WAITERS must be 0 (no poll waits) or more")
	case c.JWTCacheTTL < 0 || c.JWTCacheTTL > httpapi.MaxJWTCacheTTL:
		return fmt.Errorf("PA_JWT_CACHE_TTL must be in [0, %s]: a signed-out session's JWT must stop working within that", httpapi.MaxJWTCacheTTL)
	case c.AdmitRate < 1:
		return fmt.Errorf("PA_ADMIT_RATE must be at least 1")
	case c.ReleaseProbe != "" && c.ReleaseProbe != "agent" && c.ReleaseProbe != "off":
		return fmt.Errorf("PA_RELEASE_PROBE must be agent or off, got %q", c.ReleaseProbe)
	case c.RouteQualification != "" && c.RouteQualification != "managed" && c.RouteQualification != "all" && c.RouteQualification != "off":
		return fmt.Errorf("PA_ROUTE_QUALIFICATION must be managed, all or off, not %q", c.RouteQualification)
	}
	return c.Redis().Validate()
}

// Redis is how the functions reach the dedicated Redis.
func (c Config) Redis() queue.RedisConn {
	return queue.RedisConn{Addr: c.RedisAddr, Username: c.RedisUsername, Password: c.RedisPassword, DB: c.RedisDB, RedisSecurity: c.RedisSecurity}
}

// ConfigFromEnv reads and validates the configuration.
func ConfigFromEnv() (Config, error) {
	var c Config
	if err := envconfig.Process("", &c); err != nil {
		return c, err
	}
	return c, c.Validate()
}

// Service holds the long-lived clients of one warm container.
type Service struct {
	cfg       Config
	log       *slog.Logger
	http      *http.Client
	rdb       redis.UniversalClient
	aq        *asynq.Client
	inspector *asynq.Inspector
	auth      *httpapi.Authenticator
	admitter  *admit.Admitter
	plans     *runconfig.Cache
	model     schema.Model
	follow    *longpoll.Hub // the container's one event reader; followers hold no connection while they wait
	waiters   chan struct{} // long-polls allowed to wait at once (Config.LongPollWaiters)
	// userTokens verifies the user tokens of keys with user keys (their JWKS cached).
	userTokens runtimeapi.UserVerifier

	mu        sync.Mutex
	runOwners map[string]runFacts // run → owner and conversation: immutable, cacheable
}

// New builds a Service. It does not touch the network.
func New(cfg Config, log *slog.Logger) (*Service, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = httpapi.DefaultLogger() // JSON on stderr at PA_LOG_LEVEL: Appwrite's execution logs
	}
	if cfg.AdminLabel == "" {
		cfg.AdminLabel = "admin"
	}
	if cfg.MemberLabel == "" {
		cfg.MemberLabel = "member"
	}
	rdb, err := cfg.Redis().NewClient(queue.RedisTuning{DialTimeout: 2 * time.Second, ReadTimeout: 3 * time.Second, WriteTimeout: 3 * time.Second, PoolSize: 64})
	if err != nil {
		return nil, err
	}
	hc := &http.Client{Timeout: 15 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 32, IdleConnTimeout: 90 * time.Second}}
	s := &Service{
		cfg: cfg, log: log, http: hc, rdb: rdb,
		aq:        asynq.NewClientFromRedisClient(rdb),
		inspector: asynq.NewInspectorFromRedisClient(rdb),
		auth:      &httpapi.Authenticator{Endpoint: cfg.Endpoint, Project: cfg.ProjectID, TTL: cfg.JWTCacheTTL, HTTP: hc},
		plans:     &runconfig.Cache{RDB: rdb},
		model:     schema.Definition(cfg.DatabaseID),
		runOwners: map[string]runFacts{},
	}
	s.admitter = &admit.Admitter{RDB: rdb, Enq: queue.NewEnqueuer(s.aq), Plans: s.plans, RateLimit: cfg.AdmitRate, RateWindow: cfg.AdmitWindow}
	// Followers use the hub's own clients, never this pool: admission, cancel and approval
	// do not wait behind them. Starting it sends nothing until someone follows.
	s.waiters = make(chan struct{}, cfg.LongPollWaiters)
	s.follow = &longpoll.Hub{Base: rdb.Options(), MaxPerUser: cfg.FollowsPerUser, Log: log}
	if err := s.follow.Start(context.Background()); err != nil {
		_ = rdb.Close()
		return nil, err
	}
	return s, nil
}

// Close releases the clients.
func (s *Service) Close() error {
	s.CloseIdleConnections()
	s.follow.Stop()
	_ = s.aq.Close()
	_ = s.inspector.Close()
	return s.rdb.Close()
}

// CloseIdleConnections closes the Appwrite client's kept-alive connections that are
// idle (their goroutines end with them); Close does it too.
func (s *Service) CloseIdleConnections() { s.http.CloseIdleConnections() }

// Admitter exposes the admission logic (tests inject failures through its hooks).
func (s *Service) Admitter() *admit.Admitter { return s.admitter }

// Authenticator exposes the JWT verifier (tests and benchmarks read its call count).
func (s *Service) Authenticator() *httpapi.Authenticator { return s.auth }

// Follows reports the long-polls in flight in this container (the load test waits for
// its followers with it).
func (s *Service) Follows() int { return s.follow.Follows() }

// store builds a Store for one execution with the key Appwrite gave it.
func (s *Service) store(c *httpapi.Call) (*schema.Store, error) {
	if c.AppwriteKey == "" {
		return nil, fault.Errorf(fault.Misconfigured, "misconfigured", "no Appwrite key for this execution")
	}
	cl := client.New()
	cl.Client = s.http
	cl.Endpoint = strings.TrimRight(s.cfg.Endpoint, "/")
	cl.Headers["X-Appwrite-Project"] = s.cfg.ProjectID
	cl.Headers["X-Appwrite-Key"] = c.AppwriteKey
	return schema.NewStore(cl, s.model), nil
}

// Functions lists the deployed functions and the path prefixes each one serves. The
// local function host and the reverse-proxy examples route by this table.
var Functions = []struct {
	Name     string
	Prefixes []string
	Scopes   []string
	Schedule string // cron: Appwrite runs the function at these times (asynchronously)
}{
	// files.read: message text and event data longer than their fields are kept whole in
	// a file of the bucket, which reads through schema fill back in (schema/overflow.go);
	// files.write: deleting a conversation deletes its messages' files.
	{"conversations", []string{"/api/conversations"}, []string{"documents.read", "documents.write", "files.read", "files.write"}, ""},
	{"runs", []string{"/api/runs"}, []string{"documents.read", "documents.write", "files.read"}, ""},
	{"artifacts", []string{"/api/artifacts"}, []string{"documents.read", "files.read"}, ""},
	{"system", []string{"/api/system", "/api/health", "/api/me", "/api/roles"}, []string{"documents.read"}, ""},
	// users.read/users.write: only the admin function manages accounts and their labels
	// (members, invitations); no other function's key can.
	{"admin", []string{"/api/harnesses", "/api/gpus", "/api/model-routes", "/api/harness-selection", "/api/settings", "/api/releases", "/api/environments", "/api/audit", "/api/members", "/api/invitations", "/api/runtime-keys", "/api/runtime-links"},
		[]string{"documents.read", "documents.write", "files.read", "files.write", "users.read", "users.write"},
		// Its schedule runs the reconciler's pass (scheduled.go): evidence is collected
		// without an admin asking.
		ReconcileSchedule},
	// The runtime API for host apps (responses.go): users.read/users.write only to make
	// and read an app's own users (runtimeapi: a derived id, the app's label,
	// never an existing member's account); files.read for long answers; files.write:
	// forgetting a user deletes their messages' and artifacts' files.
	{"responses", []string{"/api/v1"}, []string{"documents.read", "documents.write", "files.read", "files.write", "users.read", "users.write"}, ""},
}

// API builds the handler of one function.
func (s *Service) API(function string) (*httpapi.API, error) {
	a := httpapi.New(s.auth, s.cfg.CORSOrigins, s.log)
	a.FallbackKey = s.cfg.APIKey
	a.Member = s.isMember
	switch function {
	case "conversations":
		s.conversationRoutes(a)
	case "runs":
		s.runRoutes(a)
	case "artifacts":
		s.artifactRoutes(a)
	case "system":
		s.systemRoutes(a)
		s.memberRoutes(a)
	case "admin":
		s.adminRoutes(a)
		s.adminMemberRoutes(a)
		s.runtimeKeyRoutes(a)
		s.scheduledRoutes(a)
	case "responses":
		s.runtimeRoutes(a)
		s.appToolRoutes(a)
	case "all":
		s.adminRoutes(a)
		s.scheduledRoutes(a)
		s.adminMemberRoutes(a)
		s.runtimeKeyRoutes(a)
		s.runtimeRoutes(a)
		s.appToolRoutes(a)
		s.memberRoutes(a)
		s.conversationRoutes(a)
		s.runRoutes(a)
		s.artifactRoutes(a)
		s.systemRoutes(a)
	default:
		return nil, fmt.Errorf("unknown function %q", function)
	}
	return a, nil
}

// Lazy builds a function's handler from the environment on first use and keeps it for
// the life of the warm container; a configuration error is answered as 500 with the
// reason and retried on the next execution.
type Lazy struct {
	Function string
	mu       sync.Mutex
	h        http.Handler
	svc      *Service
}

// Close releases the clients of the built handler (the local function host and tests call
// it; in Appwrite the container simply ends). The next Handler builds afresh.
func (l *Lazy) Close() error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.svc == nil {
		return nil
	}
	err := l.svc.Close()
	l.svc, l.h = nil, nil
	return err
}

// Handler returns the function's handler, building it if needed.
func (l *Lazy) Handler() http.Handler {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.h != nil {
		return l.h
	}
	cfg, err := ConfigFromEnv()
	var svc *Service
	if err == nil {
		svc, err = New(cfg, httpapi.DefaultLogger())
	}
	var a *httpapi.API
	if err == nil {
		a, err = svc.API(l.Function)
	}
	if err != nil {
		if svc != nil {
			_ = svc.Close()
		}
		msg := err.Error()
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			httpapi.WriteJSON(w, 500, map[string]any{"error": map[string]any{"code": "misconfigured", "message": msg}})
		})
	}
	l.h, l.svc = a, svc
	return a
}

// ctxWait returns the long-poll budget left in ctx, capped at max.
// pollWait is how long a long-poll may wait: what it asked, within LongPollMax and the
// execution's deadline, and only while fewer than LongPollWaiters of this container's
// polls wait (else 0: it answers at once). release gives the place back.
func (s *Service) pollWait(ctx context.Context, want time.Duration) (time.Duration, func()) {
	w := ctxWait(ctx, want, s.cfg.LongPollMax)
	if w <= 0 {
		return 0, func() {}
	}
	select {
	case s.waiters <- struct{}{}:
		return w, func() { <-s.waiters }
	default:
		return 0, func() {}
	}
}

func ctxWait(ctx context.Context, want, max time.Duration) time.Duration {
	if want > max {
		want = max
	}
	if dl, ok := ctx.Deadline(); ok {
		if left := time.Until(dl) - 500*time.Millisecond; left < want {
			want = left
		}
	}
	if want < 0 {
		return 0
	}
	return want
}
