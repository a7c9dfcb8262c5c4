package hermesreal

import (
	"context"
	"fmt"
	"net"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"

	"privateassistant/hermes"
	"privateassistant/hermes/hermestest"
	"privateassistant/modeltest"
)

// The suite (suite_test.go) runs every test body against two backends: the double
// (hermes/hermestest, in process) and the real Hermes (this package's Launch). Each
// backend has one shared server for the tests that can share it (their keys, inputs and
// markers are unique, so they run in parallel and -count=N is safe) and one "own" server
// per TestOwnServer run for the cases that need other settings (approval timeout 2 s,
// concurrency cap 2) or a restart.

// backend is one server the suite drives.
type backend struct {
	name    string
	url     string
	key     string
	model   *modeltest.Backend
	workDir string // the only folder a test lets a tool delete or write in
	real    *Server
	dbl     *doubleServer
}

func (b *backend) isDouble() bool { return b.dbl != nil }

// client is a new client of the backend: each test gets its own, so its one-stream-per-run
// registry is its own too.
func (b *backend) client() *hermes.Client { return &hermes.Client{BaseURL: b.url, APIKey: b.key} }

// inWorkDir reports whether path is inside the backend's work folder.
func (b *backend) inWorkDir(path string) bool {
	rel, err := filepath.Rel(b.workDir, filepath.Clean(path))
	return err == nil && rel != "." && !strings.HasPrefix(rel, "..") && !filepath.IsAbs(rel)
}

// restart stops the server as a crash would and starts it again on the same address and
// state (HERMES_HOME / DataDir).
func (b *backend) restart(ctx context.Context) (time.Duration, error) {
	if b.real != nil {
		err := b.real.Restart(ctx, true)
		return b.real.StartTime, err
	}
	start := time.Now()
	err := b.dbl.restart()
	return time.Since(start), err
}

func (b *backend) close() error {
	if b.real != nil {
		return b.real.Close()
	}
	b.dbl.close()
	return nil
}

// doubleServer is the double on a loopback port with its own scripted model.
type doubleServer struct {
	opts  hermestest.Options
	d     *hermestest.Server
	hs    *httptest.Server
	ms    *httptest.Server
	art   string
	mu    sync.Mutex
	model *modeltest.Backend
}

const doubleKey = "pa-test-double-key-0123456789abcdef0123456789"

// launchDouble starts the double with durable state and artifacts under root.
func launchDouble(root string, opts hermestest.Options) (*backend, error) {
	model := modeltest.New("scripted")
	ms := httptest.NewServer(model)
	ds := &doubleServer{ms: ms, model: model, art: filepath.Join(root, "artifacts")}
	opts.APIKey, opts.ModelURL, opts.Model = doubleKey, ms.URL+"/v1", model.Model
	opts.DataDir, opts.ArtifactDir = filepath.Join(root, "hermes-home"), ds.art
	ds.opts = opts
	d, err := hermestest.New(opts)
	if err != nil {
		ms.Close()
		return nil, err
	}
	ds.d, ds.hs = d, httptest.NewServer(d)
	work := filepath.Join(root, "work")
	if err := os.MkdirAll(work, 0o700); err != nil {
		ds.close()
		return nil, err
	}
	return &backend{name: "double", url: ds.hs.URL, key: doubleKey, model: model, workDir: work, dbl: ds}, nil
}

func (ds *doubleServer) server() *hermestest.Server {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	return ds.d
}

// restart: connections drop, runs in flight are left unsettled, and a new double on the
// same DataDir and address reads them back as interrupted.
func (ds *doubleServer) restart() error {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	addr := ds.hs.Listener.Addr().String()
	ds.hs.CloseClientConnections()
	ds.hs.Close()
	ds.d.Close()
	d, err := hermestest.New(ds.opts)
	if err != nil {
		return err
	}
	hs := httptest.NewUnstartedServer(d)
	var ln net.Listener
	for i := 0; i < 100; i++ {
		if ln, err = net.Listen("tcp", addr); err == nil {
			break
		}
		time.Sleep(20 * time.Millisecond) // the old listener's port is being released
	}
	if err != nil {
		d.Close()
		return fmt.Errorf("relisten on %s: %w", addr, err)
	}
	hs.Listener = ln
	hs.Start()
	ds.d, ds.hs = d, hs
	return nil
}

func (ds *doubleServer) close() {
	ds.mu.Lock()
	defer ds.mu.Unlock()
	ds.hs.CloseClientConnections()
	ds.hs.Close()
	ds.d.Close()
	ds.ms.CloseClientConnections()
	ds.ms.Close()
}

// shared holds each backend's package-wide server, started on first use and stopped in
// TestMain before the leak check.
var shared struct {
	mu    sync.Mutex
	byKey map[string]*sharedEntry
	roots []string
}

type sharedEntry struct {
	once sync.Once
	b    *backend
	err  error
}

// sharedBackend returns the package's server for the backend name ("double" or "real");
// for "real" it skips without the virtualenv (fails under CI=true).
func sharedBackend(t *testing.T, name string) *backend {
	t.Helper()
	var venv string
	if name == "real" {
		venv = Require(t)
	}
	shared.mu.Lock()
	if shared.byKey == nil {
		shared.byKey = map[string]*sharedEntry{}
	}
	e := shared.byKey[name]
	if e == nil {
		e = &sharedEntry{}
		shared.byKey[name] = e
	}
	shared.mu.Unlock()
	e.once.Do(func() {
		root, err := os.MkdirTemp("", "hermes-suite-"+name+"-")
		if err != nil {
			e.err = err
			return
		}
		shared.mu.Lock()
		shared.roots = append(shared.roots, root)
		shared.mu.Unlock()
		if name == "double" {
			e.b, e.err = launchDouble(root, hermestest.Options{})
			return
		}
		var s *Server
		s, e.err = Launch(context.Background(), venv, root, Options{})
		if e.err == nil {
			t.Logf("real Hermes %s started in %v at %s", s.Version, s.StartTime, s.URL)
			e.b = realBackend(s)
		}
	})
	if e.err != nil {
		t.Fatalf("starting the %s backend: %v", name, e.err)
	}
	return e.b
}

func realBackend(s *Server) *backend {
	return &backend{name: "real", url: s.URL, key: s.Key, model: s.Model, workDir: s.WorkDir, real: s}
}

// ownBackend starts a server of its own for one test, with a 2 s approval timeout and a
// concurrency cap of 2, stopped on t.Cleanup.
func ownBackend(t *testing.T, name string) *backend {
	t.Helper()
	if name == "double" {
		b, err := launchDouble(t.TempDir(), hermestest.Options{ApprovalTTL: 2 * time.Second, MaxConcurrent: 2})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = b.close() })
		return b
	}
	venv := Require(t)
	s, err := Launch(context.Background(), venv, t.TempDir(), Options{ApprovalTimeout: 2 * time.Second,
		Config: map[string]any{"gateway": map[string]any{"api_server": map[string]any{"max_concurrent_runs": 2}}}})
	if err != nil {
		t.Fatalf("starting real Hermes: %v", err)
	}
	t.Cleanup(func() {
		start := time.Now()
		if err := s.Close(); err != nil {
			t.Errorf("stopping Hermes: %v", err)
		}
		t.Logf("own real Hermes stopped in %v (killed after SIGTERM grace: %v)", time.Since(start).Round(time.Millisecond), s.Killed)
	})
	t.Logf("own real Hermes started in %v", s.StartTime)
	return realBackend(s)
}

// backends are the suite's table.
var backends = []string{"double", "real"}

// eachBackend runs body once per backend, in parallel subtests named after it.
func eachBackend(t *testing.T, body func(t *testing.T, b *backend)) {
	t.Helper()
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			body(t, sharedBackend(t, name))
		})
	}
}

func TestMain(m *testing.M) {
	code := m.Run()
	for name, e := range shared.byKey {
		if e.b == nil {
			continue
		}
		start := time.Now()
		err := e.b.close()
		if e.b.real != nil {
			fmt.Fprintf(os.Stderr, "hermesreal: shared Hermes stopped in %v (killed after SIGTERM grace: %v)\n",
				time.Since(start).Round(time.Millisecond), e.b.real.Killed)
			if code != 0 {
				fmt.Fprintf(os.Stderr, "--- shared Hermes log (tail) ---\n%s\n", e.b.real.LogTail(80))
			}
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "stopping the %s backend: %v\n", name, err)
			code = 1
		}
	}
	for _, root := range shared.roots {
		_ = os.RemoveAll(root)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
