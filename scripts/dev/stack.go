package main

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/open-runtimes/types-for-go/v4/openruntimes"

	"privateassistant/agent/daemon"
	"privateassistant/agent/immich/immichtest"
	"privateassistant/backup"
	"privateassistant/functions/functionhost"
	"privateassistant/functions/runtimehttp"
	"privateassistant/functions/service"
	"privateassistant/hermes/hermestest"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/appwritetest"
	"privateassistant/schema/provision"
	"privateassistant/settings"
	"privateassistant/stream"
)

// Config of the dev stack. Zero ports pick free ones (tests); make dev uses the defaults.
type Config struct {
	Root      string // repository root
	DataDir   string // .dev: Redis AOF, emulator state, keys, Hermes double state
	Addr      string // the one origin: web, /api and /v1 (default 127.0.0.1:8080)
	OpsAddr   string // agent ops (asynqmon behind its login)
	RedisPort int
	// WebOrigins are further origins the web chat is served from (the emulator's web
	// platforms and the functions' and stream's CORS origins): the cross-origin tests.
	WebOrigins []string
	// Real services, when .env names them.
	AppwriteEndpoint, AppwriteProject, AppwriteKey string
	HermesURL, HermesKeyRef                        string
	ModelURL                                       string
	// Hermes picks what runs research and coding when HermesURL is empty: HermesDouble
	// (the tests' default) or HermesMembers (make dev: the real Hermes in HermesVenv, one
	// per member; the double, saying why, when it is not installed). HermesNote says
	// which one was chosen when not the members' (PA_SKIP_HERMES=1).
	Hermes, HermesVenv, HermesNote string
	// GatewayKey is the agent's gateway key (PA_GATEWAY_API_KEY in .env: a Hermes of
	// HERMES_URL configured with it keeps working on a new data directory); empty: one
	// derived from the data directory's secrets.
	GatewayKey string
	TokenDelay time.Duration
	// ModelLoadTime is how long an xtx model server takes to load (modelchild.go; default
	// 300 ms, make dev 1.5 s so a swap can be watched).
	ModelLoadTime time.Duration
	// GatewayAddr is where the agent's inference gateway listens (PA_GATEWAY_ADDR): the
	// harnesses call it, never the model (empty: a free port; the stored configuration
	// names it, so make dev keeps it fixed).
	GatewayAddr string
	// Grace is how long Close lets runs in flight finish before aborting them (they
	// resume on the next start); default 5 s.
	Grace time.Duration
	Log   *slog.Logger
	// Workers is the number of Appwrite API workers the function host gives function
	// executions (default functionhost.DefaultWorkers: a 4-core Appwrite host).
	Workers int
	// CaptureStdio makes the function host swap the process's stdout and stderr per
	// execution as the Go runtime does (make dev; a test binary's streams are its own).
	CaptureStdio bool
	// Restore names a `pa admin backup` archive to restore (backup.Restore, the code of
	// `pa admin restore`) into the freshly provisioned project before the functions and
	// the agent start, in place of the dev configuration: the restore drill on a dev
	// stack, with a new data directory (a restart re-checks the restore, which refuses
	// with backup.ErrNotEmpty once the restored project has changed). The archive has no
	// accounts: its users need theirs made again with the same ids (the dev logins are
	// made as always).
	Restore string
}

// Stack is the running dev stack.
type Stack struct {
	cfg       Config
	URL       string
	Ops       string
	DemoEmail string
	DemoPass  string
	OpsUser   string
	OpsPass   string
	Model     *modeltest.Backend
	// The agent (its GPU managers and gateway), the gateway's base URL (…/v1) and the
	// Immich double sharing the xtx (gpuconfig.go).
	Agent   *daemon.Agent
	Gateway string
	Immich  *immichtest.Server
	// Functions is the function host: its execution records (also GET /_dev/executions).
	Functions *functionhost.Host
	closers   []closer
	// Stopped names the components Close stopped, in order (the shutdown order test).
	Stopped []string
	redis   *exec.Cmd
	// redisExited is closed once redis-server has exited (and been waited for).
	redisExited chan struct{}
	srv         *http.Server

	// AdminEmail/AdminPass: the dev administrator (label admin); the demo login is a member.
	AdminEmail, AdminPass string
	// Stream is the stream service mounted on the origin under /stream/.
	Stream *stream.Service
	// HermesInfo says which Hermes runs research and coding (the banner).
	HermesInfo string
	// HermesHomes is the members' homes folder when the real Hermes runs them.
	HermesHomes string
}

// devStreamKey is the stream service's emulator key, derived from a kept secret.
func devStreamKey(k *keys) string { return "stream-" + secretFrom(k.JWTSecret, "dev-stream-key") }

type keys struct {
	Bootstrap string            `json:"bootstrap"`
	Runtime   string            `json:"runtime"`
	Functions map[string]string `json:"functions"`
	DemoPass  string            `json:"demoPassword"`
	OpsPass   string            `json:"opsPassword"`
	Hermes    string            `json:"hermesKey"`
	JWTSecret string            `json:"jwtSecret"`
}

// secretFrom derives a stable dev secret from a kept one (so an older keys.json needs no
// new field).
func secretFrom(kept, purpose string) string {
	h := sha256.Sum256([]byte(purpose + "\x00" + kept))
	return hex.EncodeToString(h[:6])
}

func secret(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// loadKeys keeps generated secrets across restarts (mode 0600 in the data dir).
func loadKeys(dir string) (*keys, error) {
	p := filepath.Join(dir, "keys.json")
	var k keys
	if b, err := os.ReadFile(p); err == nil {
		if err := json.Unmarshal(b, &k); err != nil {
			return nil, err
		}
		return &k, nil
	}
	k = keys{Bootstrap: secret(24), Runtime: secret(24), Functions: map[string]string{}, DemoPass: "demo-" + secret(6),
		OpsPass: secret(12), JWTSecret: secret(32), Hermes: secret(20)}
	for _, f := range service.Functions {
		k.Functions[f.Name] = secret(24)
	}
	b, _ := json.MarshalIndent(k, "", "  ")
	return &k, os.WriteFile(p, b, 0o600)
}

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "127.0.0.1:0"
	}
	defer l.Close()
	return l.Addr().String()
}

type closer struct {
	name string
	f    func()
}

func (s *Stack) onClose(name string, f func()) { s.closers = append(s.closers, closer{name, f}) }

// Close stops everything in reverse start order, which is the shutdown order: the agent
// first (intake stops, runs in flight get the grace period, then what is left is aborted
// and resumes on the next start), while the functions, the Hermes double, the one origin
// (the agent reaches Appwrite and Hermes through it) and the emulator still serve; Redis
// last, so the agent's abort can hand its tasks back to asynq. Redis runs in a process
// group of its own: the terminal's Ctrl-C reaches only this process, never Redis directly.
func (s *Stack) Close() {
	for i := len(s.closers) - 1; i >= 0; i-- {
		s.closers[i].f()
		s.Stopped = append(s.Stopped, s.closers[i].name)
	}
	s.closers = nil
}

// Start brings the whole stack up on one origin.
func Start(ctx context.Context, cfg Config) (*Stack, error) {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if cfg.Grace == 0 {
		cfg.Grace = 5 * time.Second
	}
	if cfg.ModelLoadTime == 0 {
		cfg.ModelLoadTime = 300 * time.Millisecond
	}
	if cfg.Addr == "" {
		cfg.Addr = freeAddr()
	}
	if cfg.OpsAddr == "" {
		cfg.OpsAddr = freeAddr()
	}
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, err
	}
	k, err := loadKeys(cfg.DataDir)
	if err != nil {
		return nil, err
	}
	s := &Stack{cfg: cfg, URL: "http://" + cfg.Addr, Ops: "http://" + cfg.OpsAddr, DemoEmail: "demo@example.com",
		DemoPass: k.DemoPass, OpsUser: "admin", OpsPass: k.OpsPass,
		AdminEmail: "admin@example.com", AdminPass: "admin-" + secretFrom(k.JWTSecret, "dev-admin")}
	ok := false
	defer func() {
		if !ok {
			s.Close()
		}
	}()

	// 1. The dedicated Redis (AOF on, its own port, a password).
	redisAddr, redisPass, err := s.startRedis(cfg, k)
	if err != nil {
		return nil, err
	}

	// 2. Appwrite: the emulator with a data directory, unless a real one is configured.
	endpoint, project, runtimeKey, bootstrapKey := cfg.AppwriteEndpoint, cfg.AppwriteProject, cfg.AppwriteKey, ""
	fnKey := func(name string) string { return runtimeKey }
	var emu *appwritetest.Server
	if endpoint == "" {
		project = "privateassistant"
		ks := map[string][]string{
			k.Bootstrap: {"databases.read", "databases.write", "collections.read", "collections.write", "buckets.read", "buckets.write"},
			k.Runtime:   {"documents.read", "documents.write", "files.read", "files.write", "users.read", "users.write"},
		}
		for _, f := range service.Functions {
			ks[k.Functions[f.Name]] = f.Scopes
		}
		ks[devStreamKey(k)] = stream.Scopes // the stream service's own read-only key
		emu, err = appwritetest.New(appwritetest.Options{ProjectID: project, Keys: ks, DataDir: filepath.Join(cfg.DataDir, "appwrite"),
			JWTSecret: []byte(k.JWTSecret), Logger: cfg.Log, Origins: cfg.WebOrigins})
		if err != nil {
			return nil, fmt.Errorf("appwrite emulator: %w", err)
		}
		s.onClose("appwrite emulator", func() { _ = emu.Close() })
		endpoint = s.URL + "/v1"
		runtimeKey, bootstrapKey = k.Runtime, k.Bootstrap
		fnKey = func(name string) string { return k.Functions[name] }
	}

	// 3. The one origin: /v1 (Appwrite), /api (functions), everything else the web chat.
	mux := http.NewServeMux()
	ln, err := net.Listen("tcp", cfg.Addr)
	if err != nil {
		return nil, err
	}
	if emu != nil {
		mux.Handle("/v1/", emu)
	} else {
		u, _ := url.Parse(strings.TrimSuffix(endpoint, "/v1"))
		mux.Handle("/v1/", httputil.NewSingleHostReverseProxy(u))
	}
	s.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	s.onClose("origin", func() {
		c, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_ = s.srv.Shutdown(c)
		// Shutdown leaves a connection that never sent a request alone for its first 5 s
		// (net/http treats a new one as busy until then), and gives up on a busy one at its
		// deadline: a client whose request was cancelled while dialling keeps such a
		// connection idle, and both ends would outlive the stack (goleak saw them).
		_ = s.srv.Close()
	})

	// 4. Provision with the real apply code; the demo user through the Account API.
	if bootstrapKey != "" {
		if _, err := provision.Apply(ctx, provision.Config{Endpoint: endpoint, ProjectID: project, APIKey: bootstrapKey,
			WaitTimeout: time.Minute, PollInterval: 50 * time.Millisecond}, schema.Definition("")); err != nil {
			return nil, fmt.Errorf("provision: %w", err)
		}
		if err := s.demoUser(endpoint, project, runtimeKey); err != nil {
			return nil, err
		}
	}

	// 5. Models: the scripted demo backend unless MODEL_URL names a real one; and Hermes
	// where HERMES_URL is configured (otherwise the direct harness serves every role).
	modelURL, modelKeyFile := cfg.ModelURL, ""
	if modelURL == "" {
		s.Model = modeltest.New("chat")
		s.Model.TokenDelay = cfg.TokenDelay
		if s.Model.TokenDelay == 0 {
			s.Model.TokenDelay = 25 * time.Millisecond
		}
		demoScripts(s.Model) // demo.go
		// Served on the origin itself so the configured URL stays valid across restarts,
		// behind a key (like any model server): /_dev/* answers nobody without one.
		s.Model.APIKey = secretFrom(k.JWTSecret, "dev-model")
		modelKeyFile = filepath.Join(cfg.DataDir, "model.key")
		if err := os.WriteFile(modelKeyFile, []byte(s.Model.APIKey), 0o600); err != nil {
			return nil, err
		}
		mux.Handle("/_dev/model/", http.StripPrefix("/_dev/model", s.Model))
		modelURL = s.URL + "/_dev/model/v1"
	}
	// The devices behind the agent's gateway: a GPU config for the arc (chat) and the xtx
	// (work, shared with the Immich double), whose backend is the model above; the
	// harnesses call the gateway with its key (gpuconfig.go).
	if cfg.GatewayAddr == "" {
		// The stored configuration names the gateway: a restart on this data directory
		// keeps the port it picked.
		p := filepath.Join(cfg.DataDir, "gateway.addr")
		if b, err := os.ReadFile(p); err == nil && len(b) > 0 {
			cfg.GatewayAddr = string(b)
		} else {
			cfg.GatewayAddr = freeAddr()
			if err := os.WriteFile(p, []byte(cfg.GatewayAddr), 0o600); err != nil {
				return nil, err
			}
		}
	}
	s.Gateway = "http://" + cfg.GatewayAddr + "/v1"
	gatewayKey := cfg.GatewayKey
	if gatewayKey == "" {
		gatewayKey = "gw-" + secretFrom(k.JWTSecret, "dev-gateway") + secretFrom(k.JWTSecret, "dev-gateway-2")
	}
	gatewayKeyFile := filepath.Join(cfg.DataDir, "gateway.key")
	if err := os.WriteFile(gatewayKeyFile, []byte(gatewayKey), 0o600); err != nil {
		return nil, err
	}
	gpuConfig, err := s.gpuConfig(cfg, k, mux, modelURL)
	if err != nil {
		return nil, err
	}
	hermesURL, hermesRef := cfg.HermesURL, cfg.HermesKeyRef
	artifactRoot := filepath.Join(cfg.DataDir, "artifacts")
	var venv, template string
	switch {
	case hermesURL != "":
		s.HermesInfo = "the Hermes at " + hermesURL + " (HERMES_URL; its GATEWAY_API_KEY is in " + gatewayKeyFile + ", or set PA_GATEWAY_API_KEY)"
	case cfg.Hermes == HermesMembers:
		why := ""
		if venv, why = realHermes(cfg); why != "" {
			s.HermesInfo = "the Hermes double: " + why
		}
	default:
		s.HermesInfo = "the Hermes double"
		if cfg.HermesNote != "" {
			s.HermesInfo += " (" + cfg.HermesNote + ")"
		}
	}
	keyFile := filepath.Join(cfg.DataDir, "hermes.key")
	switch {
	case hermesURL != "":
	case venv != "":
		// The real Hermes, one per member (agent/homes), from a profile template made
		// from deploy/hermes/config.yaml. Runs never use the profile's base URL (nothing
		// serves it): each goes to its owner's Hermes, and validation probes one made
		// from the template.
		if template, err = writeTemplate(cfg.Root, filepath.Join(cfg.DataDir, "hermes-profile"), s.Gateway, gatewayKey, ""); err != nil {
			return nil, err
		}
		s.HermesHomes = filepath.Join(cfg.DataDir, "hermes-homes")
		s.HermesInfo = "the real Hermes (" + venv + "), one per member in bubblewrap, homes in " + s.HermesHomes
		if err := os.WriteFile(keyFile, []byte(k.Hermes), 0o600); err != nil {
			return nil, err
		}
		hermesURL, hermesRef = s.URL+"/_dev/member-hermes", "file:"+keyFile
	default:
		// The demo runs work roles on a local Hermes double so tools, approvals and
		// artifacts can be tried; plain chat goes straight to the model.
		hkey := k.Hermes
		if err := os.WriteFile(keyFile, []byte(hkey), 0o600); err != nil {
			return nil, err
		}
		d, err := hermestest.New(hermestest.Options{APIKey: hkey, ModelURL: s.Gateway, ModelKey: gatewayKey, Model: "work",
			DataDir: filepath.Join(cfg.DataDir, "hermes"), ArtifactDir: artifactRoot, Logger: cfg.Log})
		if err != nil {
			return nil, err
		}
		mux.Handle("/_dev/hermes/", http.StripPrefix("/_dev/hermes", d))
		s.onClose("hermes double", d.Close)
		hermesURL, hermesRef = s.URL+"/_dev/hermes", "file:"+keyFile
	}

	// 6. The configuration, once (an operator act in production: `make bootstrap`), or
	// the restored project's own, with the agent not yet started (the restore drill).
	client := appwrite.NewClient(appwrite.WithEndpoint(endpoint), appwrite.WithProject(project), appwrite.WithKey(runtimeKey))
	if cfg.Restore != "" {
		if _, err := backup.Restore(ctx, backup.Options{Client: client, Model: schema.Definition(""), KeyRef: "dev", Progress: io.Discard}, cfg.Restore); err != nil {
			return nil, fmt.Errorf("restore %s: %w", cfg.Restore, err)
		}
	}
	var sync *hermesSync
	if cfg.Restore == "" {
		st := schema.NewStore(client, schema.Definition(""))
		if err := s.bootstrap(ctx, st, s.Gateway, gatewayKeyFile, hermesURL, hermesRef); err != nil {
			return nil, err
		}
		// The admission plan cache's pointer moves with each selection commit, as the admin
		// function's does: else admissions keep the plan of the Hermes of the last start.
		rdb, err := queue.RedisConn{Addr: redisAddr, Password: redisPass}.NewClient(queue.RedisTuning{DialTimeout: 3 * time.Second, PoolSize: 2})
		if err != nil {
			return nil, err
		}
		s.onClose("settings redis client", func() { _ = rdb.Close() })
		sync = &hermesSync{adm: &settings.Admin{Store: st, Plans: &runconfig.Cache{RDB: rdb}}, real: cfg.HermesURL != "" || venv != "",
			want: settings.HarnessInput{ProfileID: "hermes", Kind: "hermes", BaseURL: hermesURL, ProfileName: "demo", KeyRef: hermesRef}}
		if err := sync.prepare(ctx); err != nil {
			return nil, err
		}
	}

	// 7. Functions behind the local host, exactly as Appwrite would run them.
	fcfg := service.Config{Endpoint: endpoint, ProjectID: project, DatabaseID: schema.DefaultDatabaseID, RedisAddr: redisAddr,
		RedisPassword: redisPass, CORSOrigins: append([]string{s.URL}, cfg.WebOrigins...), JWTCacheTTL: 5 * time.Second, AdmitRate: 60,
		AdmitWindow: time.Minute, HeartbeatStale: 30 * time.Second, LongPollMax: 2 * time.Second, Coalesce: 30 * time.Millisecond,
		// One service serves every function here; in Appwrite the three polling functions
		// (runs, conversations, responses) are three containers with one waiter each.
		LongPollWaiters: 3,
		// The scripted backends are not measured: no qualification gate (the dev stack's own
		// commits have none either); release evidence says "not checked" (hermes.go check).
		RouteQualification: "off",
		// A candidate's evidence holds a probe run per role made by the dev agent through
		// its gateway, as in production (functions/service probe.go).
		ReleaseProbe: "agent", ReleaseProbeWait: 2 * time.Minute}
	svc, err := service.New(fcfg, cfg.Log)
	if err != nil {
		return nil, err
	}
	s.onClose("functions", func() { _ = svc.Close() })
	// The executions' logs (Context.Log and what they print), as the runtime keeps them.
	execLogs, err := os.OpenFile(filepath.Join(cfg.DataDir, "executions.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return nil, err
	}
	s.onClose("execution logs", func() { _ = execLogs.Close() })
	host := &functionhost.Host{Workers: cfg.Workers, CaptureStdio: cfg.CaptureStdio, Logs: execLogs}
	s.Functions = host
	mux.HandleFunc("GET /_dev/executions", host.ServeStats)
	for _, f := range service.Functions {
		api, err := svc.API(f.Name)
		if err != nil {
			return nil, err
		}
		main := func(c openruntimes.Context) openruntimes.Response {
			return runtimehttp.Serve(&c, api, runtimehttp.ExecutionBudget)
		}
		host.Functions = append(host.Functions, functionhost.Function{Name: f.Name, Prefixes: f.Prefixes, Main: main, Key: fnKey(f.Name),
			Schedule: f.Schedule, Timeout: 30 * time.Second})
	}
	mux.Handle("/api/", host)
	// The functions' schedules (the admin function's reconciler pass, every minute), run
	// asynchronously as Appwrite's functions worker does; stopped after the agent.
	if err := host.StartSchedules(); err != nil {
		return nil, err
	}
	s.onClose("function schedules", host.StopSchedules)

	// 7b. The stream service (SSE and downloads) in-process on the same origin under
	// /stream/, with its own read-only key (on a real Appwrite: the runtime key) and the
	// dev Redis password. Stopped before the origin, so no open stream holds its shutdown.
	streamKey := runtimeKey
	if emu != nil {
		streamKey = devStreamKey(k)
	}
	ss, err := stream.New(stream.Config{Endpoint: endpoint, ProjectID: project, DatabaseID: schema.DefaultDatabaseID, APIKey: streamKey,
		RedisAddr: redisAddr, RedisPassword: redisPass, CORSOrigins: append([]string{s.URL}, cfg.WebOrigins...), JWTCacheTTL: 5 * time.Second,
		MemberLabel: "member", AdminLabel: "admin", Heartbeat: 15 * time.Second, WriteTimeout: 10 * time.Second,
		MaxPerUser: 16, Readers: 16}, cfg.Log, nil)
	if err != nil {
		return nil, err
	}
	if err := ss.Start(context.Background()); err != nil {
		return nil, err
	}
	s.Stream = ss
	s.onClose("stream", ss.Stop)
	mux.Handle(stream.Prefix, ss)

	// 8. The agent with its ops listener (asynqmon behind its login).
	as := daemon.Settings{AppwriteEndpoint: endpoint, AppwriteProject: project, AppwriteKey: runtimeKey, DatabaseID: schema.DefaultDatabaseID,
		RedisAddr: redisAddr, RedisPassword: redisPass, AgentID: "dev-agent", Devices: "arc:4,xtx:1", ChatDevice: "arc",
		OpsAddr: cfg.OpsAddr, OpsUser: s.OpsUser, OpsPassword: s.OpsPass, ArtifactRoot: artifactRoot, Grace: cfg.Grace,
		LeaseTTL: 6 * time.Second, Heartbeat: time.Second, ResumeEvery: 2 * time.Second, OutboxEvery: 5 * time.Second,
		DeltaWindow: 80 * time.Millisecond, HTTPTimeout: 30 * time.Second,
		GPUConfig: gpuConfig, GatewayAddr: cfg.GatewayAddr, GatewayKey: gatewayKey,
		// The MCP job server: the chat role (direct harness) enqueues research and coding
		// jobs through it (harness.Direct Tools).
		MCPAddr: "127.0.0.1:0"}
	if venv != "" {
		as.HermesHomes, as.HermesVenv, as.HermesConfig = s.HermesHomes, venv, template
		as.HermesIdle, as.HermesMax = 3*time.Minute, 4
	} else if cfg.HermesURL != "" {
		as.HermesWorkDir = os.Getenv("PA_AGENT_HERMES_WORKDIR") // that Hermes's terminal.cwd, when on this host
		as.HermesConfig = os.Getenv("PA_AGENT_HERMES_CONFIG")   // its config.yaml, which validation checks
	}
	// Stopped after the agent (its managers leave loaded models running): the xtx's model
	// servers still running.
	s.onClose("model servers", func() { stopModelServers(filepath.Join(cfg.DataDir, "model-servers")) })
	agent, err := daemon.New(as, cfg.Log)
	if err != nil {
		return nil, err
	}
	// A member's Hermes made from the template can take over 10 s (the validator's default)
	// to answer its first capability reads on a loaded 2-core machine starting several
	// stacks at once (the tests): the probe waits as long as the Hermes client does.
	agent.Validator.HTTP = &http.Client{Timeout: 30 * time.Second}
	if err := agent.Start(context.Background()); err != nil {
		return nil, err
	}
	s.Agent = agent
	s.onClose("agent", func() { stopAgent(agent, cfg.Grace) })
	if sync != nil {
		// The agent's validator answers the request (a Hermes started from the template).
		if err := sync.finish(ctx, 3*time.Minute); err != nil {
			return nil, err
		}
	}

	// 9. The web chat (demo entry point) and its dependencies.
	mux.Handle("/", s.web(endpoint, project))
	ok = true
	return s, nil
}

func (s *Stack) startRedis(cfg Config, k *keys) (string, string, error) {
	port := cfg.RedisPort
	addr := fmt.Sprintf("127.0.0.1:%d", port)
	if port == 0 {
		addr = freeAddr()
		_, p, _ := net.SplitHostPort(addr)
		fmt.Sscan(p, &port)
	}
	dir := filepath.Join(cfg.DataDir, "redis")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	pidFile := filepath.Join(dir, "redis.pid")
	// A Redis left by a make dev that was killed (its Close never ran) still holds the
	// port and the AOF: stop it (it writes its AOF on SIGTERM) and start our own, never
	// reuse it without knowing it.
	if err := stopLeftoverRedis(pidFile, cfg.Log); err != nil {
		return "", "", err
	}
	if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
		c.Close()
		return "", "", fmt.Errorf("%s is in use by a process this data directory did not start (not a Redis of %s): stop it, or run make dev with another PA_DEV_ADDR", addr, dir)
	}
	pass := k.OpsPass + "r"
	cmd := exec.Command("redis-server", "--port", fmt.Sprint(port), "--bind", "127.0.0.1", "--dir", dir,
		"--appendonly", "yes", "--appendfsync", "everysec", "--maxmemory-policy", "noeviction", "--requirepass", pass,
		"--save", "", "--logfile", filepath.Join(dir, "redis.log"), "--pidfile", pidFile)
	// Its own process group: Ctrl-C in the terminal signals the foreground group, and
	// Redis must outlive the agent's shutdown (Close stops it last).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		return "", "", fmt.Errorf("start redis-server (run `make deps`): %w", err)
	}
	s.redis = cmd
	exited := make(chan struct{})
	s.redisExited = exited
	go func() { _ = cmd.Wait(); close(exited) }()
	s.onClose("redis", func() { _ = cmd.Process.Signal(os.Interrupt); <-exited })
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-exited:
			return "", "", fmt.Errorf("redis-server exited at start (%s): see %s", cmd.ProcessState, filepath.Join(dir, "redis.log"))
		default:
		}
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err == nil {
			c.Close()
			// The one answering must be ours (another could have taken the port meanwhile).
			if pid, err := redisPID(addr, pass); err != nil || pid != cmd.Process.Pid {
				return "", "", fmt.Errorf("the Redis answering on %s is not the one just started (pid %d, ours %d): %v", addr, pid, cmd.Process.Pid, err)
			}
			return addr, pass, nil
		}
		if time.Now().After(deadline) {
			return "", "", fmt.Errorf("redis did not start on %s", addr)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// stopLeftoverRedis stops the redis-server named by pidFile if it still runs (a make dev
// killed before its Close): SIGTERM, then SIGKILL after 10 s.
func stopLeftoverRedis(pidFile string, log *slog.Logger) error {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return nil
	}
	var pid int
	if _, err := fmt.Sscan(strings.TrimSpace(string(b)), &pid); err != nil || pid <= 1 {
		_ = os.Remove(pidFile)
		return nil
	}
	cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	if err != nil || !strings.Contains(string(cmdline), "redis-server") {
		_ = os.Remove(pidFile) // gone, or the pid now belongs to something else
		return nil
	}
	fmt.Fprintf(os.Stderr, "dev: stopping the Redis (pid %d) an earlier make dev left running on this data directory\n", pid)
	log.Warn("stopping a Redis left by an earlier make dev", "pid", pid)
	_ = syscall.Kill(pid, syscall.SIGTERM)
	for i := 0; i < 200; i++ {
		if syscall.Kill(pid, 0) != nil {
			_ = os.Remove(pidFile)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	_ = syscall.Kill(pid, syscall.SIGKILL)
	for i := 0; i < 100; i++ {
		if syscall.Kill(pid, 0) != nil {
			_ = os.Remove(pidFile)
			return nil
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("the Redis (pid %d) an earlier make dev left would not stop", pid)
}

// redisPID asks the Redis on addr for its process id (INFO server).
func redisPID(addr, pass string) (int, error) {
	c, err := net.DialTimeout("tcp", addr, time.Second)
	if err != nil {
		return 0, err
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(2 * time.Second))
	fmt.Fprintf(c, "*2\r\n$4\r\nAUTH\r\n$%d\r\n%s\r\n*2\r\n$4\r\nINFO\r\n$6\r\nserver\r\n", len(pass), pass)
	buf := make([]byte, 0, 8192)
	tmp := make([]byte, 4096)
	for {
		n, err := c.Read(tmp)
		buf = append(buf, tmp[:n]...)
		if i := strings.Index(string(buf), "process_id:"); i >= 0 {
			rest := string(buf[i+len("process_id:"):])
			if j := strings.Index(rest, "\r\n"); j >= 0 {
				var pid int
				_, err := fmt.Sscan(rest[:j], &pid)
				return pid, err
			}
		}
		if strings.HasPrefix(string(buf), "-") {
			return 0, fmt.Errorf("redis: %s", strings.TrimSpace(string(buf)))
		}
		if err != nil {
			return 0, err
		}
	}
}

// stopAgent is the agent's two-stage shutdown, as cmd agent does it on a signal: intake
// stops, runs in flight get up to grace to finish, then Shutdown aborts the rest (they
// resume on the next start).
func stopAgent(a *daemon.Agent, grace time.Duration) {
	a.StopIntake()
	deadline := time.Now().Add(grace)
	for a.Busy() && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	a.Shutdown()
}

// demoUser creates the two dev logins as an admin would (idempotent): a member (user id
// "demo", label member) and an administrator (user id "admin", label admin). The product
// is closed by default: an account made through public sign-up gets nothing.
func (s *Stack) demoUser(endpoint, project, key string) error {
	users := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(endpoint), appwrite.WithProject(project), appwrite.WithKey(key)))
	for _, u := range []struct{ id, email, pass, name, label string }{
		{"demo", s.DemoEmail, s.DemoPass, "Demo", "member"},
		{"admin", s.AdminEmail, s.AdminPass, "Admin", "admin"},
	} {
		_, err := users.Create(u.id, users.WithCreateEmail(u.email), users.WithCreatePassword(u.pass), users.WithCreateName(u.name))
		if err != nil && !strings.Contains(err.Error(), "already exists") {
			return fmt.Errorf("dev user %s: %w", u.email, err)
		}
		if _, err := users.UpdateLabels(u.id, []string{u.label}); err != nil {
			return fmt.Errorf("dev user %s: label (an older data dir made it with another id: remove %s): %w", u.email, s.cfg.DataDir, err)
		}
	}
	return nil
}

func (s *Stack) bootstrap(ctx context.Context, st *schema.Store, modelURL, modelKeyFile, hermesURL, hermesRef string) error {
	modelRef := ""
	if modelKeyFile != "" {
		modelRef = "file:" + modelKeyFile
	}
	f, err := runconfig.ParseBootstrap([]byte(fmt.Sprintf(`{
  "harnesses": [
    {"profileId": "direct", "kind": "direct", "baseUrl": %q, "keyRef": %q},
    {"profileId": "hermes", "kind": "hermes", "baseUrl": %q, "profileName": "demo", "keyRef": %q}
  ],
  "routes": [
    {"routeId": "chat", "alias": "chat", "device": "arc", "backendModel": "chat", "contextBudget": 131072, "maxOutput": 2048},
    {"routeId": "work", "alias": "work", "device": "xtx", "backendModel": %q, "contextBudget": 131072, "maxOutput": 8192},
    {"routeId": "code", "alias": "code", "device": "xtx", "backendModel": %q, "contextBudget": 131072, "maxOutput": 8192}
  ],
  "toolCeiling": ["terminal", "file", "mcp__pa__enqueue_job", "mcp__pa__job_status"],
  "roles": {
    "chat": {"harness": "direct", "route": "chat", "tools": ["mcp__pa__enqueue_job", "mcp__pa__job_status"]},
    "research": {"harness": "hermes", "route": "work", "tools": ["terminal", "file"]},
    "coding": {"harness": "hermes", "route": "code", "tools": ["terminal", "file"]}
  }
}`, modelURL, modelRef, hermesURL, hermesRef, devResearchModel, devCodingModel)))
	if err != nil {
		return err
	}
	// Once per data directory; hermesSync then follows the Hermes of each start.
	err = runconfig.Bootstrap(ctx, st, f, "make-dev")
	if err != nil && !errors.Is(err, runconfig.ErrAlreadyBootstrapped) {
		return fmt.Errorf("bootstrap: %w", err)
	}
	return nil
}
