package main

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// engines are the browser engines beyond Chromium (web/test/engines/driver.js): what each
// needs on this machine (Debian packages; make deps installs them) and which tests run in
// it. Chromium runs only the installability check here (the rest of its suite is test/e2e).
var engines = []struct {
	name, pkgs string
	needs      []string
	tests      string
}{
	{"firefox", "firefox-esr", []string{"/usr/bin/firefox-esr"}, "test/engines/chat.test.js"},
	{"webkit", "webkit2gtk-driver and xvfb", []string{"/usr/bin/WebKitWebDriver", "/usr/lib/x86_64-linux-gnu/webkit2gtk-4.1/MiniBrowser", "/usr/bin/Xvfb"}, "test/engines/chat.test.js"},
	{"chromium", "chromium", []string{chromium()}, "test/engines/pwa.test.js"},
}

// TestWebChatInFirefoxAndWebKit runs the web chat's engine tests (web/test/engines/chat.test.js:
// sign-up and sign-in, JWT renewal, live streaming, uploads, downloads, the service worker
// (offline too), the web app manifest and the conversation list, then in the same engine
// session issue 34's edit, versions, regenerate and retry, search, links and export and the
// rough edges (habits.js); one session per size, 1280×800 and 390×844) in Firefox ESR and WebKit against the make-dev stack with the Hermes double, through a front
// origin that serves the web with 6-second JWTs and logs the API requests it passes on; then
// once with the web on another origin than Appwrite and the API (same-site, as seed 001 §3
// asks) with third-party cookies blocked. Chromium checks that the app is installable
// (pwa.test.js). An engine that is not installed skips with the reason; with CI=true it fails.
func TestWebChatInFirefoxAndWebKit(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	if _, err := os.Stat(filepath.Join(root, "web", "node_modules", "puppeteer-core")); err != nil {
		engineMissing(t, "web/node_modules/puppeteer-core is missing: run `make deps`")
	}
	// PA_ENGINES names the engines to run instead of all (e.g. "webkit", while working on one);
	// PA_ENGINE_TESTS the test files (under web/) instead of each engine's own.
	only := strings.Fields(os.Getenv("PA_ENGINES"))
	files := strings.Fields(os.Getenv("PA_ENGINE_TESTS"))
	have := map[string]string{}
	for _, e := range engines {
		if len(only) > 0 && !slices.Contains(only, e.name) {
			continue
		}
		ok := true
		for _, p := range e.needs {
			if _, err := os.Stat(p); err != nil {
				ok = false
				t.Run(e.name, func(t *testing.T) { engineMissing(t, "missing "+p+": run `make deps` (Debian's "+e.pkgs+")") })
				break
			}
		}
		if ok {
			have[e.name] = e.tests
		}
	}
	if len(have) == 0 {
		return
	}

	// The fronts' listeners first: the stack must name their origins as web platforms.
	frontLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	frontURL := "http://" + frontLn.Addr().String()
	crossLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	crossURL := "http://" + crossLn.Addr().String()
	logPath := filepath.Join(t.TempDir(), "stack.log")
	logFile, err := os.Create(logPath)
	require.NoError(t, err)
	t.Cleanup(func() {
		_ = logFile.Close()
		if t.Failed() {
			b, _ := os.ReadFile(logPath)
			var keep []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					keep = append(keep, l)
				}
			}
			if len(keep) > 200 {
				keep = keep[len(keep)-200:]
			}
			t.Logf("the stack's warnings and errors:\n%s", strings.Join(keep, "\n"))
		}
	})
	s, err := Start(context.Background(), Config{Root: root, DataDir: t.TempDir(), TokenDelay: 15 * time.Millisecond,
		WebOrigins: []string{frontURL, crossURL}, Log: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))})
	require.NoError(t, err)
	defer s.Close()

	// The page's configuration as the stack serves it, with 6-second JWTs (renewal is seen
	// within the test) and, for the cross-origin web, Appwrite and the API on the stack's origin.
	tr := &http.Transport{}
	defer tr.CloseIdleConnections()
	res, err := (&http.Client{Transport: tr}).Get(s.URL + "/config.js")
	require.NoError(t, err)
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, json.Unmarshal(b[strings.IndexByte(string(b), '{'):strings.LastIndexByte(string(b), '}')+1], &cfg))
	delete(cfg, "demo")
	cfg["jwtSeconds"] = 6

	// The same-origin front: the web, and /v1, /api and /stream passed on to the stack
	// (the Host kept, so the stack sees this origin) with each request logged.
	front := &frontOrigin{web: s.web("", ""), cfg: cfg, stack: s.URL, tr: tr}
	cfg["endpoint"] = frontURL + "/v1"
	serveOn(t, frontLn, front)
	crossCfg := map[string]any{}
	for k, v := range cfg {
		crossCfg[k] = v
	}
	// Appwrite and the API for the cross-origin web: the stack behind a logging front of
	// their own (the page connects there; the Host is kept, so cookies are that origin's).
	apiLn, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	apiURL := "http://" + apiLn.Addr().String()
	serveOn(t, apiLn, &frontOrigin{stack: s.URL, tr: tr})
	crossCfg["endpoint"], crossCfg["api"] = apiURL+"/v1", apiURL
	serveOn(t, crossLn, &frontOrigin{web: s.web("", ""), cfg: crossCfg, connect: apiURL})

	for _, e := range engines {
		engine, tests := e.name, have[e.name]
		if tests == "" {
			continue
		}
		t.Run(engine, func(t *testing.T) {
			if len(files) > 0 {
				tests = strings.Join(files, " ")
			}
			cmd := exec.Command("node", append([]string{"--test", "--test-concurrency=1"}, strings.Fields(tests)...)...)
			cmd.Dir = filepath.Join(root, "web")
			cmd.Env = append(os.Environ(), "PA_ENGINE="+engine, "PA_CHROMIUM="+chromium(), "PA_BASE_URL="+frontURL, "PA_CROSS_URL="+crossURL, "PA_CROSS_API_URL="+apiURL,
				"PA_ADMIN_EMAIL="+s.AdminEmail, "PA_ADMIN_PASS="+s.AdminPass)
			out, err := cmd.CombinedOutput()
			t.Logf("node --test %s (%s):\n%s", tests, engine, out)
			require.NoError(t, err)
		})
	}
}

// engineMissing skips locally and fails in CI (make deps installs every engine there).
func engineMissing(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(why)
	}
	t.Skip(why)
}

// serveOn serves h on ln until the test ends.
func serveOn(t *testing.T, ln net.Listener, h http.Handler) {
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	done := make(chan struct{})
	go func() { defer close(done); _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close(); <-done })
}

// frontOrigin serves the web chat with its own config.js. With stack set it passes /v1,
// /api and /stream on to the stack and logs them (GET /_engines/requests lists them); with
// connect set, the page may connect to that origin too (its CSP). POST
// /_engines/offline?on=1 takes it off the network (on=0 back).
type frontOrigin struct {
	web     http.Handler
	cfg     map[string]any
	stack   string
	connect string
	tr      *http.Transport // to the stack

	// offline: every request but /_engines/ ones has its connection dropped (the network
	// gone, as the page's service worker sees it).
	offline atomic.Bool

	mu    sync.Mutex
	log   []frontRequest
	proxy *httputil.ReverseProxy
	once  sync.Once
}

type frontRequest struct {
	Method string `json:"method"`
	Path   string `json:"path"`
	Status int    `json:"status"`
}

func (f *frontOrigin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p := r.URL.Path
	if f.offline.Load() && !strings.HasPrefix(p, "/_engines/") {
		f.mu.Lock()
		f.log = append(f.log, frontRequest{r.Method, p, 0})
		f.mu.Unlock()
		if hj, ok := w.(http.Hijacker); ok {
			if c, _, err := hj.Hijack(); err == nil {
				_ = c.Close()
				return
			}
		}
		http.Error(w, "offline", http.StatusBadGateway)
		return
	}
	switch {
	case p == "/_engines/offline" && r.Method == http.MethodPost:
		f.offline.Store(r.URL.Query().Get("on") == "1")
		w.WriteHeader(http.StatusNoContent)
	case p == "/config.js":
		f.mu.Lock()
		f.log = append(f.log, frontRequest{r.Method, p, 200})
		f.mu.Unlock()
		b, _ := json.Marshal(f.cfg)
		w.Header().Set("Content-Type", "text/javascript; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		_, _ = w.Write([]byte("window.PA_CONFIG = " + string(b) + ";\n"))
	case p == "/_engines/requests":
		f.mu.Lock()
		b, _ := json.Marshal(f.log)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write(b)
	case f.stack != "" && (strings.HasPrefix(p, "/v1/") || strings.HasPrefix(p, "/api/") || strings.HasPrefix(p, "/stream/")):
		f.once.Do(func() {
			u, _ := url.Parse(f.stack)
			f.proxy = httputil.NewSingleHostReverseProxy(u)
			f.proxy.Transport = f.tr
		})
		rec := &statusWriter{ResponseWriter: w, status: http.StatusOK}
		f.proxy.ServeHTTP(rec, r)
		f.mu.Lock()
		f.log = append(f.log, frontRequest{r.Method, p, rec.status})
		f.mu.Unlock()
	case f.web == nil:
		http.NotFound(w, r)
	default:
		if f.connect != "" {
			w = &cspWriter{ResponseWriter: w, connect: f.connect}
		}
		f.web.ServeHTTP(w, r)
	}
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) { s.status = code; s.ResponseWriter.WriteHeader(code) }
func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// cspWriter lets the page connect to the API's origin as well as its own (as
// deploy/proxy/nginx.conf does for the Appwrite domain).
type cspWriter struct {
	http.ResponseWriter
	connect string
	done    bool
}

func (c *cspWriter) fix() {
	if c.done {
		return
	}
	c.done = true
	h := c.ResponseWriter.Header()
	if v := h.Get("Content-Security-Policy"); v != "" {
		h.Set("Content-Security-Policy", strings.Replace(v, "connect-src 'self'", "connect-src 'self' "+c.connect, 1))
	}
}
func (c *cspWriter) WriteHeader(code int) { c.fix(); c.ResponseWriter.WriteHeader(code) }
func (c *cspWriter) Write(b []byte) (int, error) {
	c.fix()
	return c.ResponseWriter.Write(b)
}
