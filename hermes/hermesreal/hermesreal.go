package hermesreal

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"privateassistant/hermes"
	"privateassistant/modeltest"
)

// EnvVenv overrides where the Hermes virtualenv is (default <repo>/.cache/hermes/venv).
const EnvVenv = "PA_HERMES_VENV"

// Options shape one server.
type Options struct {
	// Model is the scripted LLM (nil: a new modeltest backend with model id "scripted").
	Model *modeltest.Backend
	// ApprovalTimeout is approvals.timeout (default 60 s): an unanswered approval is
	// denied after it.
	ApprovalTimeout time.Duration
	// StartTimeout bounds the wait for /health (default 120 s).
	StartTimeout time.Duration
	// Config holds extra top-level config.yaml keys; each replaces the helper's value for
	// that key (e.g. "gateway": {"api_server": {"max_concurrent_runs": 2}}).
	Config map[string]any
	// Env holds extra NAME=value variables for Hermes's environment (e.g. proxy settings);
	// a name given here replaces the helper's value.
	Env []string
	// Proxy, when set, is Hermes's proxy for every outbound request (ProxyEnv): only the
	// scripted model is exempt (NO_PROXY).
	Proxy string
}

// Server is a running Hermes.
type Server struct {
	URL        string // http://127.0.0.1:<port>
	Key        string // API_SERVER_KEY (Bearer)
	Root       string // temporary folder holding everything below
	Home       string // HOME
	HermesHome string // HERMES_HOME (config.yaml, state.db, runs_idempotency.db, logs/)
	WorkDir    string // terminal.cwd: the only folder tests let tools touch
	Model      *modeltest.Backend
	ModelURL   string        // the scripted model's base URL (…/v1)
	Version    string        // /health version
	StartTime  time.Duration // process start until /health answered (the latest start)
	LogPath    string        // Hermes's stdout and stderr
	// Killed is set by Close when Hermes outlived the SIGTERM grace and was killed
	// (it waits for runs blocked on an approval, for instance).
	Killed bool

	bin          string
	env          []string
	startTimeout time.Duration
	cmd          *exec.Cmd
	done         chan struct{} // closed when cmd has exited
	modelSrv     *httptest.Server
	logFile      *os.File
}

// Venv returns the Hermes virtualenv, or an error saying why there is none.
func Venv() (string, error) {
	dir := os.Getenv(EnvVenv)
	if dir == "" {
		root, err := repoRoot()
		if err != nil {
			return "", err
		}
		dir = filepath.Join(root, ".cache", "hermes", "venv")
	}
	bin := filepath.Join(dir, "bin", "hermes")
	if _, err := os.Stat(bin); err != nil {
		return "", fmt.Errorf("no Hermes virtualenv at %s (run `make deps`; see deploy/hermes/README.md): %w", dir, err)
	}
	return dir, nil
}

func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("go.mod not found above the working directory")
		}
		dir = parent
	}
}

// Require returns the virtualenv, or skips the test with the reason; under CI=true a
// missing Hermes fails the test instead.
func Require(t testing.TB) string {
	t.Helper()
	venv, err := Venv()
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("real Hermes is required in CI: %v", err)
		}
		t.Skipf("real Hermes not installed: %v", err)
	}
	return venv
}

// Start launches a server for one test (in t.TempDir) and stops it on t.Cleanup.
func Start(t testing.TB, opts Options) *Server {
	t.Helper()
	venv := Require(t)
	s, err := Launch(context.Background(), venv, t.TempDir(), opts)
	if err != nil {
		t.Fatalf("starting real Hermes: %v", err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("stopping Hermes: %v", err)
		}
		if s.Killed {
			t.Logf("Hermes outlived SIGTERM by %v and was killed", StopGrace)
		}
	})
	t.Logf("real Hermes %s started in %v at %s", s.Version, s.StartTime.Round(time.Millisecond), s.URL)
	return s
}

// Launch starts Hermes from venv with all its state under root (an existing, empty,
// temporary folder), and waits for /health. Close stops it.
func Launch(ctx context.Context, venv, root string, opts Options) (*Server, error) {
	if opts.Model == nil {
		opts.Model = modeltest.New("scripted")
	}
	if opts.ApprovalTimeout <= 0 {
		opts.ApprovalTimeout = 60 * time.Second
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 120 * time.Second
	}
	s := &Server{Root: root, Home: filepath.Join(root, "home"), HermesHome: filepath.Join(root, "hermes-home"),
		WorkDir: filepath.Join(root, "work"), Model: opts.Model, LogPath: filepath.Join(root, "hermes.log")}
	for _, d := range []string{s.Home, s.HermesHome, s.WorkDir, filepath.Join(root, "tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, err
		}
	}
	s.modelSrv = httptest.NewServer(opts.Model)
	s.ModelURL = s.modelSrv.URL + "/v1"
	s.Key = randomKey()
	if err := os.WriteFile(filepath.Join(s.HermesHome, "config.yaml"), []byte(s.config(opts)), 0o600); err != nil {
		s.modelSrv.Close()
		return nil, err
	}
	var err error
	if s.logFile, err = os.Create(s.LogPath); err != nil {
		s.modelSrv.Close()
		return nil, err
	}
	s.bin, s.startTimeout = filepath.Join(venv, "bin", "hermes"), opts.StartTimeout
	// Only what Hermes needs: no credential or proxy of the caller's environment leaks in.
	s.env = []string{
		"PATH=" + filepath.Join(venv, "bin") + ":/usr/local/bin:/usr/bin:/bin",
		"HOME=" + s.Home, "HERMES_HOME=" + s.HermesHome, "TMPDIR=" + filepath.Join(root, "tmp"),
		"LANG=C.UTF-8", "TZ=UTC", "NO_COLOR=1",
		"API_SERVER_ENABLED=true", "API_SERVER_KEY=" + s.Key,
		"API_SERVER_HOST=127.0.0.1",
	}
	if opts.Proxy != "" {
		s.env = mergeEnv(s.env, ProxyEnv(opts.Proxy, s.ModelURL))
	}
	base := mergeEnv(s.env, opts.Env)
	// A port picked free can be taken by another process before Hermes binds it (Hermes
	// then exits, "address already in use"): a port found taken after an exit is picked again.
	for attempt := 1; ; attempt++ {
		port, err := freePort()
		if err != nil {
			_ = s.Close()
			return nil, err
		}
		s.URL = "http://127.0.0.1:" + strconv.Itoa(port)
		s.env = mergeEnv(base, []string{"API_SERVER_PORT=" + strconv.Itoa(port)})
		err = s.spawn(ctx)
		if err == nil {
			return s, nil
		}
		if attempt == 3 || !s.exited() || !portTaken(port) {
			_ = s.Close()
			return nil, err
		}
	}
}

// exited reports whether the started process has ended.
func (s *Server) exited() bool {
	if s.done == nil {
		return false
	}
	select {
	case <-s.done:
		return true
	default:
		return false
	}
}

// portTaken reports whether another process listens on 127.0.0.1:port.
func portTaken(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return true
	}
	ln.Close()
	return false
}

// spawn starts the process and waits until /health answers.
func (s *Server) spawn(ctx context.Context) error {
	cmd := exec.Command(s.bin, "gateway", "run")
	cmd.Dir = s.WorkDir
	cmd.Env = s.env
	cmd.Stdout, cmd.Stderr = s.logFile, s.logFile
	// Its own process group (Close kills the group); and if the test binary dies without
	// Close (a panic, -timeout), the kernel kills Hermes instead of leaving it serving.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	start := time.Now()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("starting hermes: %w", err)
	}
	done := make(chan struct{})
	s.cmd, s.done = cmd, done
	go func() { _ = cmd.Wait(); close(done) }()
	if err := s.waitHealthy(ctx, s.startTimeout); err != nil {
		return fmt.Errorf("%w\n--- hermes log (tail) ---\n%s", err, s.LogTail(40))
	}
	s.StartTime = time.Since(start)
	return nil
}

// Restart stops Hermes and starts it again on the same port with the same HERMES_HOME
// (sessions, runs_idempotency.db). hard kills the process group at once (a crash); else
// it is stopped as Close does. Runs that were in flight read back as interrupted.
func (s *Server) Restart(ctx context.Context, hard bool) error {
	return s.RestartAfter(ctx, hard, nil)
}

// RestartAfter is Restart that runs between, when set, while Hermes is down (to change
// what it finds in HERMES_HOME when it starts again); an error from it leaves Hermes
// stopped.
func (s *Server) RestartAfter(ctx context.Context, hard bool, between func() error) error {
	if hard && s.cmd != nil {
		_ = syscall.Kill(-s.cmd.Process.Pid, syscall.SIGKILL)
	}
	s.stopProcess()
	if between != nil {
		if err := between(); err != nil {
			return err
		}
	}
	return s.spawn(ctx)
}

// config is $HERMES_HOME/config.yaml (JSON is valid YAML).
func (s *Server) config(opts Options) string {
	cfg := map[string]any{
		// The scripted model is the only LLM; context_length skips the metadata probe.
		"model": map[string]any{"provider": "custom", "base_url": s.ModelURL, "default": opts.Model.Model,
			"api_key": "scripted-model-key", "context_length": opts.Model.ContextLength},
		"approvals": map[string]any{"mode": "manual", "timeout": int(opts.ApprovalTimeout / time.Second)},
		"terminal":  map[string]any{"backend": "local", "cwd": s.WorkDir},
		// The API server offers these toolsets only.
		"platform_toolsets": map[string]any{"api_server": []string{"terminal", "file"}},
		// Nothing that would reach the internet (agent/validator LocalOnly, as the shipped
		// deploy/hermes/config.yaml; TestTheDevProfileIsLocalOnly).
		"updates":       map[string]any{"check": false},
		"model_catalog": map[string]any{"enabled": false},
		"curator":       map[string]any{"enabled": false},
		"plugins":       map[string]any{"auto_update_check_hours": 0},
		"security":      map[string]any{"allow_lazy_installs": false},
	}
	for k, v := range opts.Config {
		cfg[k] = v
	}
	b, _ := json.MarshalIndent(cfg, "", "  ")
	return string(b) + "\n"
}

func (s *Server) waitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", s.URL+"/health", nil)
		if resp, err := hc.Do(req); err == nil {
			var h struct {
				Status, Platform, Version string
			}
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if resp.StatusCode == 200 && h.Status == "ok" {
				s.Version = h.Version
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("hermes exited before it served /health (%v)", s.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("hermes did not serve /health within %v", timeout)
		case <-tick.C:
		}
	}
}

// StopGrace is how long Close waits after SIGTERM before it kills the process group.
const StopGrace = 8 * time.Second

// Close stops Hermes's whole process group (SIGTERM, then SIGKILL after StopGrace), then
// the scripted model. Everything Hermes wrote stays in Root. Safe to call twice.
func (s *Server) Close() error {
	s.stopProcess()
	if s.modelSrv != nil {
		s.modelSrv.CloseClientConnections()
		s.modelSrv.Close()
		s.modelSrv = nil
	}
	if s.logFile != nil {
		err := s.logFile.Close()
		s.logFile = nil
		return err
	}
	return nil
}

func (s *Server) stopProcess() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	pgid := s.cmd.Process.Pid
	_ = syscall.Kill(-pgid, syscall.SIGTERM)
	select {
	case <-s.done:
	case <-time.After(StopGrace):
		s.Killed = true
	}
	// Whatever the group still holds (tool children) goes too.
	_ = syscall.Kill(-pgid, syscall.SIGKILL)
	<-s.done
	s.cmd = nil
}

// LogTail returns the last n lines of Hermes's output.
func (s *Server) LogTail(n int) string {
	b, _ := os.ReadFile(s.LogPath)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// Client returns our Hermes client for this server.
func (s *Server) Client() *hermes.Client {
	return &hermes.Client{BaseURL: s.URL, APIKey: s.Key}
}

// InWorkDir reports whether path is inside the server's working directory: the only
// place a test may let a tool delete or write.
func (s *Server) InWorkDir(path string) bool {
	rel, err := filepath.Rel(s.WorkDir, filepath.Clean(path))
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..") && !filepath.IsAbs(rel)
}

// mergeEnv returns base with extra's variables added; a name in extra replaces base's.
func mergeEnv(base, extra []string) []string {
	out := make([]string, 0, len(base)+len(extra))
	for _, kv := range base {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.ContainsFunc(extra, func(e string) bool { return strings.HasPrefix(e, name+"=") }) {
			out = append(out, kv)
		}
	}
	return append(out, extra...)
}

func randomKey() string {
	b := make([]byte, 24)
	_, _ = rand.Read(b)
	return "pa-test-" + hex.EncodeToString(b)
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}
