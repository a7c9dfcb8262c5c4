// Package daemon builds the resident agent from its settings and runs it.
//
// Every background component is a startstop.Service (Start backgrounds it, Stop is
// idempotent and waits for every goroutine it started): the asynq server of each device
// queue, the outbox, the resume scanner, the retention sweeper (outbox.Expirer), the
// harness validator (agent/validator: the admin's validation requests, with this host's
// keys), the ops listener, the GPU managers and their status publishers, and the
// inference gateway.
//
// Start order: the members' Hermes supervisor (agent/homes, with PA_AGENT_HERMES_HOMES) →
// one asynq server per device queue (concurrency = the device's slots, so
// an exclusive device runs one job; the chat device polls every 20 ms) → outbox → resume
// scanner → retention sweeper → harness validator → ops listener → GPU managers, status
// publishers and gateway → readiness report (ready.go).
//
// Shutdown is two-stage (lifecycle.go writes the full order down): StopIntake stops
// taking work and lets runs in flight finish (main waits up to PA_AGENT_SHUTDOWN_GRACE);
// Shutdown then aborts what is left (handlers return without stopping their native
// runs, which the next agent start re-attaches to), stops every component in order, and
// closes Redis last.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/client"
	"github.com/hibiken/asynq"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"privateassistant/agent/artifacts"
	"privateassistant/agent/executor"
	"privateassistant/agent/gateway"
	"privateassistant/agent/gpu"
	"privateassistant/agent/harness"
	"privateassistant/agent/homes"
	"privateassistant/agent/immich"
	"privateassistant/agent/mcpjobs"
	"privateassistant/agent/outbox"
	"privateassistant/agent/validator"
	"privateassistant/hermes"
	"privateassistant/keyref"
	"privateassistant/ops"
	"privateassistant/queue"
	"privateassistant/schema"
)

// Settings are read with envconfig (see .env.example).
type Settings struct {
	AppwriteEndpoint string `envconfig:"APPWRITE_ENDPOINT" required:"true"`
	AppwriteProject  string `envconfig:"APPWRITE_PROJECT_ID" required:"true"`
	AppwriteKey      string `envconfig:"APPWRITE_API_KEY" required:"true"`
	DatabaseID       string `envconfig:"APPWRITE_DATABASE_ID" default:"privateassistant"`

	RedisAddr     string `envconfig:"PA_REDIS_ADDR"` // or Sentinel (queue.RedisSecurity)
	RedisUsername string `envconfig:"PA_REDIS_USERNAME"`
	RedisPassword string `envconfig:"PA_REDIS_PASSWORD"`
	RedisDB       int    `envconfig:"PA_REDIS_DB" default:"0"`
	// TLS, the password by key reference, Sentinel (PA_REDIS_TLS, ...; deploy/redis.conf).
	queue.RedisSecurity

	AgentID      string        `envconfig:"PA_AGENT_ID"`
	Devices      string        `envconfig:"PA_AGENT_DEVICES" default:"arc:4,xtx:1"` // device:slots,…
	ChatDevice   string        `envconfig:"PA_AGENT_CHAT_DEVICE" default:"arc"`
	OpsAddr      string        `envconfig:"PA_AGENT_OPS_ADDR" default:"127.0.0.1:9464"`
	OpsUser      string        `envconfig:"PA_AGENT_OPS_USER" default:"admin"`
	OpsPassword  string        `envconfig:"PA_AGENT_OPS_PASSWORD"`
	ArtifactRoot string        `envconfig:"PA_AGENT_ARTIFACT_ROOT"`
	Grace        time.Duration `envconfig:"PA_AGENT_SHUTDOWN_GRACE" default:"2m"`
	LeaseTTL     time.Duration `envconfig:"PA_AGENT_LEASE_TTL" default:"15s"`
	Heartbeat    time.Duration `envconfig:"PA_AGENT_HEARTBEAT" default:"2s"`
	ResumeEvery  time.Duration `envconfig:"PA_AGENT_RESUME_EVERY" default:"5s"`
	// ResumeBackstop is how often the agents serving a queue list its unfinished runs in
	// full (executor.Resumer.Backstop); the scans between read the expired leases only.
	ResumeBackstop time.Duration `envconfig:"PA_AGENT_RESUME_BACKSTOP" default:"5m"`
	OutboxEvery    time.Duration `envconfig:"PA_AGENT_OUTBOX_EVERY" default:"15s"`
	// RedisRetention is how long a run's Redis keys (streams, hot state, control) and its
	// asynq task outlive the run once it is terminal and Appwrite holds its whole record.
	RedisRetention time.Duration `envconfig:"PA_AGENT_REDIS_RETENTION" default:"24h"`
	RetentionEvery time.Duration `envconfig:"PA_AGENT_RETENTION_EVERY" default:"1m"`
	// UploadAge is how long a file of the uploads bucket that no message names is kept
	// (attached in the web, never sent) before the upload sweep deletes it.
	UploadAge        time.Duration `envconfig:"PA_AGENT_UPLOAD_AGE" default:"24h"`
	UploadSweepEvery time.Duration `envconfig:"PA_AGENT_UPLOAD_SWEEP_EVERY" default:"1h"`
	DeltaWindow      time.Duration `envconfig:"PA_AGENT_DELTA_WINDOW" default:"100ms"`
	HTTPTimeout      time.Duration `envconfig:"PA_AGENT_HTTP_TIMEOUT" default:"30s"`

	// HermesWorkDir is real Hermes's terminal.cwd as this host sees it (HermesCwd: as
	// Hermes names it, when it differs, e.g. in a container): a run's artifacts include
	// exactly the files its own file tools wrote there. Empty: none are collected.
	HermesWorkDir string `envconfig:"PA_AGENT_HERMES_WORKDIR"`
	HermesCwd     string `envconfig:"PA_AGENT_HERMES_CWD"`
	// HermesConfig is the Hermes profile's config.yaml on this host: with the gateway,
	// harness validation refuses a profile whose delegation (or any inference) bypasses it.
	HermesConfig string `envconfig:"PA_AGENT_HERMES_CONFIG"`
	// HermesHomes, when set, gives every member a Hermes of their own (agent/homes): a
	// home under this folder, made from HermesConfig (the profile template) and run from
	// HermesVenv in a bubblewrap sandbox, started on the member's first run and stopped
	// after HermesIdle unused. Every run of a Hermes profile then runs on its owner's own
	// Hermes, and HermesWorkDir/HermesCwd are the member's (<home>/work, /member/work).
	HermesHomes string `envconfig:"PA_AGENT_HERMES_HOMES"`
	// HermesVenv is also where the installed Hermes's version and commit are read
	// (hermes.ReadBuild), recorded with every validation and on every run's binding.
	HermesVenv string        `envconfig:"PA_AGENT_HERMES_VENV"`
	HermesIdle time.Duration `envconfig:"PA_AGENT_HERMES_IDLE" default:"10m"`
	// HermesMax bounds the members' Hermes processes running at once (about 150 MB each
	// idle): past it the least recently used idle one is stopped; all in use, a run waits.
	HermesMax int `envconfig:"PA_AGENT_HERMES_MAX" default:"8"`
	// StreamCheck: the stream service (pa-stream) is part of this deployment, so readiness
	// reports it failing when no instance has sent a heartbeat for queue.AliveStale.
	StreamCheck bool `envconfig:"PA_AGENT_STREAM_CHECK" default:"true"`

	// GPUConfig names the GPU host file (deploy/gpu.example.json): the devices this agent
	// manages (model swaps, control leases, Immich). Empty: devices are plain slots.
	GPUConfig string `envconfig:"PA_GPU_CONFIG"`
	// GPUWaiting is how many runs per managed device may wait in its GPU manager's queue
	// beyond the device's slots (0: 16). Only runs that reach the manager show their
	// position and the reason they wait, and only they are ordered to save swaps; the rest
	// stay queued in asynq.
	GPUWaiting  int    `envconfig:"PA_AGENT_GPU_WAITING" default:"16"`
	GatewayAddr string `envconfig:"PA_GATEWAY_ADDR" default:"127.0.0.1:8091"`
	GatewayKey  string `envconfig:"PA_GATEWAY_API_KEY"`
	// MCPAddr serves the MCP job server Hermes loads (enqueue_job, …; mcp.go), loopback or
	// private only; empty: off. Needs the gateway (PA_GPU_CONFIG).
	MCPAddr string `envconfig:"PA_MCP_ADDR"`
	// AppCallbackAllow is the admin's allow-list of host-app callback URL prefixes
	// (comma-separated; apptools): with it the MCP server offers app_tool; empty: off.
	AppCallbackAllow string `envconfig:"PA_APP_CALLBACK_ALLOW"`
	// Issuer is the project's issuer name, its public origin (https://assistant.example):
	// with it every host-app callback also carries a JWT signed by the project's keys
	// (issuer.Keyring, published at <origin>/api/v1/jwks), which an app verifies with
	// public keys only. Empty: callbacks carry the HMAC headers only.
	Issuer string `envconfig:"PA_ISSUER"`
}

// Validate names the first bad field.
func (s Settings) Validate() error {
	if _, err := ParseDevices(s.Devices); err != nil {
		return fmt.Errorf("PA_AGENT_DEVICES: %w", err)
	}
	if err := s.Redis().Validate(); err != nil {
		return err
	}
	switch {
	case s.LeaseTTL < time.Second:
		return errors.New("PA_AGENT_LEASE_TTL must be at least 1s")
	case s.Heartbeat <= 0 || s.Heartbeat*3 > s.LeaseTTL:
		return errors.New("PA_AGENT_HEARTBEAT must be positive and at most a third of PA_AGENT_LEASE_TTL")
	case s.Grace < 0:
		return errors.New("PA_AGENT_SHUTDOWN_GRACE must not be negative")
	case s.RedisRetention < 0 || s.RetentionEvery < 0:
		return errors.New("PA_AGENT_REDIS_RETENTION and PA_AGENT_RETENTION_EVERY must not be negative")
	case s.UploadAge < 0 || s.UploadSweepEvery < 0:
		return errors.New("PA_AGENT_UPLOAD_AGE and PA_AGENT_UPLOAD_SWEEP_EVERY must not be negative")
	case s.HermesHomes != "" && (s.HermesConfig == "" || s.HermesVenv == ""):
		return errors.New("PA_AGENT_HERMES_HOMES needs PA_AGENT_HERMES_CONFIG (the profile template) and PA_AGENT_HERMES_VENV")
	case s.GPUConfig != "" && len(s.GatewayKey) < 16:
		return errors.New("PA_GATEWAY_API_KEY (at least 16 characters) is required with PA_GPU_CONFIG")
	}
	return nil
}

func (s Settings) gpuWaiting() int {
	if s.GPUWaiting <= 0 {
		return 16
	}
	return s.GPUWaiting
}

// hermesBuild reads the installed Hermes's build on this host for the server's version.
func (s Settings) hermesBuild(version string) hermes.Build {
	home := ""
	if s.HermesConfig != "" && s.HermesHomes == "" {
		home = filepath.Dir(s.HermesConfig) // with member homes it is a template no Hermes runs in
	}
	return hermes.ReadBuild(version, s.HermesVenv, home)
}

// Redis is how the agent reaches the dedicated Redis.
func (s Settings) Redis() queue.RedisConn {
	return queue.RedisConn{Addr: s.RedisAddr, Username: s.RedisUsername, Password: s.RedisPassword, DB: s.RedisDB, RedisSecurity: s.RedisSecurity}
}

// ParseDevices reads "arc:4,xtx:1" (slots default to 1).
func ParseDevices(s string) (map[string]int, error) {
	out := map[string]int{}
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, n, found := strings.Cut(part, ":")
		slots := 1
		if found {
			v, err := strconv.Atoi(n)
			if err != nil || v < 1 {
				return nil, fmt.Errorf("bad slot count in %q", part)
			}
			slots = v
		}
		if !queue.ValidID(name) {
			return nil, fmt.Errorf("bad device name %q", name)
		}
		out[name] = slots
	}
	if len(out) == 0 {
		return nil, errors.New("no devices")
	}
	return out, nil
}

// newerPayloadRetry is how long a task whose payload major version is newer than this
// agent's waits before it is offered again (to this agent or an upgraded one).
var newerPayloadRetry = time.Minute

// Agent is the running daemon.
type Agent struct {
	S        Settings
	Log      *slog.Logger
	RDB      *redis.Client
	Store    *schema.Store
	Exec     *executor.Executor
	Servers  map[string]*asynq.Server
	Outbox   *outbox.Reconciler
	Expirer  *outbox.Expirer
	Uploads  *outbox.UploadSweeper
	Resumer  *executor.Resumer
	Ops      *ops.Server
	Registry *prometheus.Registry

	// Homes runs each member's own Hermes (PA_AGENT_HERMES_HOMES; nil without it).
	Homes *homes.Supervisor
	// directTools are the MCP job server's tools the direct harness offers (with MCP).
	directTools *mcpTools

	// Validator validates the harness profiles an admin asks for, with the keys this
	// host holds (issue #11: a function cannot read a file: key reference).
	Validator *validator.Validator

	// GPU: the managed devices (nil without PA_GPU_CONFIG), their status publishers,
	// Immich tenants and the inference gateway.
	GPU        gpu.Pool
	Publishers []*gpu.Publisher
	Qualifier  *gpu.Qualifier // the handler of the route qualifications the admin API queues (issue 20)
	Tenants    map[string]*immich.Client
	Gateway    *gateway.Gateway
	Usage      *gateway.UsageWriter // the gateway's usage records, on a Redis connection of their own
	usageRDB   *redis.Client
	probes     gateway.ProbeRuns // release probes in flight, served by the gateway (executor.HandleProbe)
	gwSrv      *ops.HTTPServer
	gwBound    string
	gwUp       atomic.Bool     // the gateway listens (gwSrv and gwBound are set)
	MCP        *mcpjobs.Server // the MCP job server (PA_MCP_ADDR; mcp.go)
	mcpSrv     *ops.HTTPServer

	mu        sync.Mutex
	harnesses map[string]harness.Harness
	profiles  profileCache   // the harness profiles readiness probes (ready.go)
	ready     *readyReporter // the readiness report in Redis (ready.go)
	cancel    context.CancelFunc

	// Lifecycle (lifecycle.go): the asynq servers as services, the handler calls in
	// flight, and the work context every handler runs under (cancelled to abort).
	qs           []*queueServer
	handlers     inflight
	work         context.Context
	abortWork    context.CancelFunc
	aborting     atomic.Bool
	shutdownOnce sync.Once
}

// New builds the object graph (no network yet).
func New(s Settings, log *slog.Logger) (*Agent, error) {
	if err := s.Validate(); err != nil {
		return nil, err
	}
	if s.AgentID == "" {
		h, _ := os.Hostname()
		s.AgentID = h + "-" + strconv.Itoa(os.Getpid())
	}
	if log == nil {
		log = slog.Default()
	}
	log = log.With("component", "agent", "agent", s.AgentID)
	rdb, err := s.Redis().NewClient(queue.RedisTuning{DialTimeout: 3 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, PoolSize: 64})
	if err != nil {
		return nil, err
	}
	c := appwrite.NewClient(appwrite.WithEndpoint(s.AppwriteEndpoint), appwrite.WithProject(s.AppwriteProject), appwrite.WithKey(s.AppwriteKey))
	c.Client = &http.Client{Timeout: s.HTTPTimeout}
	st := schema.NewStore(c, schema.Definition(s.DatabaseID))
	devices, _ := ParseDevices(s.Devices)
	reg := prometheus.NewRegistry()
	m := ops.NewMetrics(reg)
	a := &Agent{S: s, Log: log, RDB: rdb, Store: st, Registry: reg, harnesses: map[string]harness.Harness{}, Servers: map[string]*asynq.Server{}}
	a.work, a.abortWork = context.WithCancel(context.Background())
	insp := asynq.NewInspectorFromRedisClient(rdb)
	a.Exec = &executor.Executor{Store: st, RDB: rdb, Harness: a.harnessFor, Slots: executor.NewSlots(devices),
		Uploader: &artifacts.Uploader{Store: st, Log: log}, Log: log.With("component", "executor"), Metrics: m,
		AgentID: s.AgentID, Inspector: insp, ArtifactRoot: s.ArtifactRoot, LeaseTTL: s.LeaseTTL,
		HermesWorkDir: s.HermesWorkDir, HermesCwd: s.HermesCwd,
		HeartbeatEvery: s.Heartbeat, DeltaWindow: s.DeltaWindow}
	if s.HermesHomes != "" {
		if a.Homes, err = homes.New(homes.Options{Root: s.HermesHomes, Venv: s.HermesVenv, Template: s.HermesConfig,
			IdleAfter: s.HermesIdle, MaxRunning: s.HermesMax, GatewayKey: s.GatewayKey, Log: log.With("component", "homes"),
			// A member's Hermes runs jobs only with durable run idempotency, as a shared one.
			Check: func(ctx context.Context, h homes.Home) error {
				_, err := a.memberHarness(h).Ready(ctx)
				return err
			}}); err != nil {
			return nil, err
		}
		a.Exec.MemberHome = a.memberHome
		// A release probe of a Hermes profile runs on a Hermes of no member, made from the
		// template like a member's (homes.Supervisor.Probe).
		a.Exec.ProbeHome = func(ctx context.Context, f func(harness.Harness) error) error {
			return a.Homes.Probe(ctx, func(h homes.Home) error { return f(a.memberHarness(h)) })
		}
	}
	if s.GPUConfig != "" {
		if err := a.buildGPU(); err != nil {
			return nil, err
		}
	}
	var queues []string
	for dev, slots := range devices {
		q := queue.DeviceQueue(dev)
		queues = append(queues, q)
		if a.GPU.Manages(dev) {
			// The GPU manager orders a managed device's queue (swap-minimizing, with
			// reasons and positions): its runs must reach it, so asynq hands out more
			// tasks than the device has slots; the extra ones wait in the manager.
			slots += s.gpuWaiting()
		}
		interval := time.Second
		if dev == s.ChatDevice {
			// asynq polls idle queues, sleeping interval/2 + rand(interval) after an empty
			// poll: the chat queue's pickup waits 5–15 ms at 10 ms (10–30 at 20 ms), for ~100
			// empty polls a second per agent (~50 at 20 ms; the performance log, issue 29).
			interval = 10 * time.Millisecond
		}
		a.Servers[q] = asynq.NewServerFromRedisClient(rdb, asynq.Config{
			Concurrency: slots, Queues: map[string]int{q: 1}, TaskCheckInterval: interval,
			ShutdownTimeout: 5 * time.Second, LogLevel: asynq.WarnLevel,
			BaseContext: func() context.Context { return a.work }, // Shutdown cancels it to abort
			// Not failures (retried without using the retry budget, never archived): a run
			// busy elsewhere, and a payload version newer than this agent (an upgraded agent
			// runs it; queue.ErrNewerVersion).
			// Nor is a handler aborted by Shutdown (it resumes on the next start), nor a
			// user's cancel: asynq's CancelProcessing (control's fast path) cancels the
			// handler's context and asynq then records ctx.Err() at once, without waiting
			// for the handler (a deadline is DeadlineExceeded and a lost lease
			// ErrLeaseExpired, so a bare Canceled outside an abort is a cancel). The
			// handler goes on stopping the native run; the task's next delivery finds the
			// run settled and completes, with its retry budget untouched.
			IsFailure: func(err error) bool {
				return !a.aborting.Load() && !errors.Is(err, executor.ErrBusy) && !errors.Is(err, queue.ErrNewerVersion) &&
					!errors.Is(err, context.Canceled)
			},
			RetryDelayFunc: func(n int, err error, t *asynq.Task) time.Duration {
				switch {
				case errors.Is(err, executor.ErrBusy):
					return 10 * time.Second
				case errors.Is(err, queue.ErrNewerVersion):
					return newerPayloadRetry
				case a.aborting.Load():
					return 0 // offered again at once, as asynq's own abort requeues it
				case errors.Is(err, context.Canceled):
					return time.Second // a cancel: the run settles in about this time
				case errors.Is(err, asynq.ErrLeaseExpired) && t.Type() == queue.TypeQualify:
					// Its agent died holding it (asynq's recoverer): nothing of it was
					// recorded, and an admin waits for the verdict.
					return time.Second
				}
				return asynq.DefaultRetryDelayFunc(n, err, t)
			},
		})
	}
	a.Outbox = &outbox.Reconciler{Store: st, Inspector: insp, Enq: queue.NewEnqueuer(asynq.NewClientFromRedisClient(rdb)),
		RDB: rdb, Log: log.With("component", "outbox"), Interval: s.OutboxEvery}
	a.Expirer = &outbox.Expirer{RDB: rdb, Store: st, Inspector: insp, Retention: s.RedisRetention, Every: s.RetentionEvery,
		Log: log.With("component", "retention")}
	if a.Homes != nil {
		a.Expirer.ForgetHome = a.Homes.ForgetBefore // forgotten users' homes go from this host too
	}
	a.Uploads = &outbox.UploadSweeper{Store: st, Age: s.UploadAge, Every: s.UploadSweepEvery, Log: log.With("component", "uploads")}
	a.Validator = &validator.Validator{Store: st, AgentID: s.AgentID, Log: log.With("component", "validator"), HermesConfig: s.HermesConfig,
		Build: s.hermesBuild, Failing: func(n int) { m.LiveHarnessFailing.Set(float64(n)) }}
	if a.Gateway != nil {
		a.Validator.GatewayURL = a.GatewayURL // a Hermes profile's config must keep inference on it
	}
	if a.Homes != nil {
		// Runs use members' Hermes processes made from the template: validation probes one.
		a.Validator.MemberHermes = func(ctx context.Context, f func(url, key string) error) error {
			return a.Homes.Probe(ctx, func(h homes.Home) error { return f(h.URL, h.Key) })
		}
	}
	a.Resumer = &executor.Resumer{RDB: rdb, Store: st, Enq: a.Outbox.Enq, Inspector: insp, Queues: queues, Active: a.Exec.Active,
		Every: s.ResumeEvery, Backstop: s.ResumeBackstop, Log: log.With("component", "resume")}
	a.Ops = &ops.Server{Addr: s.OpsAddr, User: s.OpsUser, Password: s.OpsPassword, Registry: reg, RDB: rdb,
		Log: log.With("component", "ops"), Checks: a.staticProbes(), Dynamic: a.dynamicProbes}
	a.ready = &readyReporter{a: a, every: queue.AliveEvery}
	return a, nil
}

// buildGPU makes the managed devices, their publishers and the gateway.
func (a *Agent) buildGPU() error {
	cfg, err := gpu.LoadConfig(a.S.GPUConfig)
	if err != nil {
		return fmt.Errorf("PA_GPU_CONFIG: %w", err)
	}
	// A run's grant lives while its run lease does (the executor's heartbeat renews it):
	// a run that stops beating loses its GPU grant within two lease TTLs.
	pool, leases, tenants, err := cfg.Build(a.RDB, a.S.AgentID, a.S.LeaseTTL, func(d *gpu.Device) {
		d.GrantTTL = 2 * a.S.LeaseTTL
		d.HolderAlive = func(ctx context.Context, run string) (bool, error) {
			n, err := a.RDB.Exists(ctx, executor.LeaseKey(run)).Result()
			return n == 1, err
		}
	})
	if err != nil {
		return fmt.Errorf("PA_GPU_CONFIG: %w", err)
	}
	a.GPU, a.Tenants, a.Exec.GPU = pool, tenants, pool
	a.Qualifier = &gpu.Qualifier{RDB: a.RDB, Store: a.Store, Pool: pool, Config: cfg, Log: a.Log.With("component", "gpu-qualify")}
	host, _ := os.Hostname()
	devs := map[string]gateway.Fence{}
	for name, m := range pool {
		devs[name] = m
		q := queue.DeviceQueue(name)
		insp := a.Exec.Inspector
		a.Publishers = append(a.Publishers, &gpu.Publisher{RDB: a.RDB, Store: a.Store, Host: host, Manager: m, Lease: leases[name],
			Every: a.S.Heartbeat, Log: a.Log.With("component", "gpu-status"),
			QueueDepth: func(context.Context) int64 {
				// Runs waiting in the manager (their handlers are asynq-active) and
				// those still pending in asynq behind them.
				n := int64(m.Snapshot().Waiting)
				if qi, err := insp.GetQueueInfo(q); err == nil {
					n += int64(qi.Pending)
				}
				return n
			}})
	}
	a.Registry.MustRegister(ops.NewGPUCollector(a.gpuReadings)) // pa_gpu_*: phase, memory, temperature, power, swaps
	// Usage goes out on a connection of its own, released to the answer once its bytes
	// are sent; the executor reads a run's usage once its records are acknowledged.
	if a.usageRDB, err = a.S.Redis().NewClient(queue.RedisTuning{DialTimeout: 3 * time.Second, ReadTimeout: 5 * time.Second, WriteTimeout: 5 * time.Second, PoolSize: 1}); err != nil {
		return err
	}
	if a.Usage, err = gateway.NewUsageWriter(a.usageRDB, a.Log.With("component", "gateway")); err != nil {
		return err
	}
	a.Exec.UsageSettled = a.Usage.Settle
	a.Gateway = &gateway.Gateway{APIKey: a.S.GatewayKey, Devices: devs, Routes: a.gatewayRoutes(),
		UpstreamKey: func(d string) string { return pool[d].UpstreamKey() },
		Usage:       meteredUsage{next: a.Usage, m: ops.NewGatewayMetrics(a.Registry)}, Log: a.Log.With("component", "gateway"),
		// Each run's tool policy and route revision, pinned in its bindings, enforced on
		// every model call; a request naming no admitted run is refused.
		// A release's probe runs (executor.HandleProbe) are bound while they run.
		Tools:  a.probes.Tools(gateway.BindingPolicies(func() *schema.Store { return a.Store })),
		Pinned: a.probes.Pinned(gateway.BindingRoutes(func() *schema.Store { return a.Store }))}
	a.Exec.ProbeBinding = func(run string, r *schema.ModelRoute) func() {
		return a.probes.Bind(run, gateway.Route{Alias: r.Alias, Revision: r.Revision, Device: r.Device, Model: r.BackendModel, Budget: r.ContextBudget})
	}
	if a.S.HermesHomes != "" {
		// Members' own Hermes processes hold member keys (agent/homes): served for their
		// member's runs only.
		a.Gateway.Owner = a.probes.Owner(homes.ProbeMember, gateway.BindingOwners(func() *schema.Store { return a.Store }))
	}
	return a.buildMCP()
}

// gatewayRoutes reads the enabled model routes (latest revision of each), cached 10 s.
func (a *Agent) gatewayRoutes() func() map[string]gateway.Route {
	var mu sync.Mutex
	var at time.Time
	cur := map[string]gateway.Route{}
	return func() map[string]gateway.Route {
		mu.Lock()
		defer mu.Unlock()
		if time.Since(at) < 10*time.Second {
			return cur
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		rs, err := schema.For[schema.ModelRoute](a.Store, schema.CollModelRoutes).All(ctx, schema.ListQuery{})
		if err != nil {
			a.Log.Warn("gateway routes not refreshed", "err", err)
			return cur
		}
		latest := map[string]schema.ModelRoute{}
		for _, r := range rs {
			if p, ok := latest[r.RouteID]; !ok || r.Revision > p.Revision {
				latest[r.RouteID] = r
			}
		}
		next := map[string]gateway.Route{}
		for _, r := range latest {
			if r.Enabled {
				next[r.Alias] = gateway.Route{Alias: r.Alias, Device: r.Device, Model: r.BackendModel, Budget: r.ContextBudget}
			}
		}
		cur, at = next, time.Now()
		return cur
	}
}

// GatewayURL is the bound gateway's base URL (…/v1), once started.
func (a *Agent) GatewayURL() string { return "http://" + a.gwBound + "/v1" }

// UseAppwriteClient replaces the Appwrite client (before Start), e.g. to count requests.
func (a *Agent) UseAppwriteClient(c client.Client) {
	st := schema.NewStore(c, a.Store.Model())
	a.Store, a.Exec.Store, a.Exec.Uploader.Store, a.Outbox.Store, a.Expirer.Store, a.Uploads.Store = st, st, st, st, st, st
	a.Validator.Store = st
	if a.Qualifier != nil {
		a.Qualifier.Store = st
	}
}

// harnessFor returns (and caches) the harness of a profile revision.
func (a *Agent) harnessFor(p *schema.HarnessProfile) (harness.Harness, error) {
	key := fmt.Sprintf("%s@%d", p.ProfileID, p.Revision)
	a.mu.Lock()
	defer a.mu.Unlock()
	if h, ok := a.harnesses[key]; ok {
		return h, nil
	}
	secret := ""
	if p.KeyRef != nil {
		var err error
		if secret, err = keyref.Resolve(*p.KeyRef); err != nil {
			return nil, fmt.Errorf("harness %s: %w", key, err)
		}
	}
	var h harness.Harness
	switch p.Kind {
	case "hermes":
		if !p.Verified {
			return nil, fmt.Errorf("harness %s is not verified", key)
		}
		h = &harness.Hermes{Client: &hermes.Client{BaseURL: p.BaseURL, APIKey: secret, HTTP: &http.Client{Timeout: a.S.HTTPTimeout}},
			Build: a.S.hermesBuild}
	case "direct":
		d := &harness.Direct{BaseURL: p.BaseURL, APIKey: secret}
		if a.MCP != nil {
			d.Tools = a.directTools // offered only as far as a run's tool policy allows
		}
		h = d
	default:
		return nil, fmt.Errorf("harness %s: unknown kind %q", key, p.Kind)
	}
	a.harnesses[key] = h
	return h, nil
}

// memberHome is the run owner's own Hermes (Homes), driven with the profile's settings.
func (a *Agent) memberHome(ctx context.Context, p *schema.HarnessProfile, owner string) (executor.MemberHome, error) {
	h, release, err := a.Homes.Acquire(ctx, owner)
	if err != nil {
		return executor.MemberHome{}, err
	}
	return executor.MemberHome{Harness: a.memberHarness(h), WorkDir: h.WorkDir, Cwd: h.Cwd, Release: release}, nil
}

func (a *Agent) memberHarness(h homes.Home) *harness.Hermes {
	return &harness.Hermes{Client: &hermes.Client{BaseURL: h.URL, APIKey: h.Key, HTTP: &http.Client{Timeout: a.S.HTTPTimeout}},
		Build: a.S.hermesBuild}
}

// startGPU resumes Immich queues a crashed predecessor left paused, starts the device
// managers and their heartbeats, and serves the gateway.
func (a *Agent) startGPU(ctx context.Context) error {
	if a.GPU == nil {
		return nil
	}
	for name, t := range a.Tenants {
		if resumed, err := t.Recover(ctx); err != nil {
			a.Log.Warn("Immich queues paused before a restart could not be resumed", "device", name, "err", err)
		} else if len(resumed) > 0 {
			a.Log.Info("resumed Immich queues left paused", "device", name, "queues", resumed)
		}
	}
	for _, m := range a.GPU {
		if err := m.Start(ctx); err != nil {
			return err
		}
	}
	for _, p := range a.Publishers {
		if err := p.Start(ctx); err != nil {
			return err
		}
	}
	if err := a.Usage.Start(ctx); err != nil {
		return err
	}
	a.gwSrv = &ops.HTTPServer{Addr: a.S.GatewayAddr, Handler: a.Gateway, Log: a.Log, What: "gateway"}
	if err := a.gwSrv.Start(ctx); err != nil {
		return fmt.Errorf("gateway: %w", err)
	}
	a.gwBound = a.gwSrv.Bound()
	a.gwUp.Store(true)
	a.Log.Info("gateway listening", "addr", a.gwBound, "devices", len(a.GPU))
	return a.startMCP(ctx)
}
