package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"runtime"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Backend loads, unloads and serves models on one device.
type Backend interface {
	// Load makes model servable and returns the OpenAI-compatible base URL (…/v1).
	Load(ctx context.Context, model string) (endpoint string, err error)
	// Unload releases the model.
	Unload(ctx context.Context, model string) error
	// Footprint predicts the model's device memory (0: unknown or none).
	Footprint(model string) int64
	// Alive reports whether a loaded model's server still runs: false with a nil error
	// means it does not (a crash); an error means the backend could not tell (a timeout,
	// unreachable), which decides nothing.
	Alive(ctx context.Context, model string) (bool, error)
	// Key is the upstream credential the gateway injects ("" for none).
	Key() string
}

// Resident is a backend whose server outlives the agent (Ollama, a llama-server in router
// mode): it names the models of this device it holds now. A manager taking control of the
// device unloads them first (Manager.clearResident), so it never loads beside a model an
// earlier agent left loaded and lost track of. Models outside the device's configuration
// (another consumer of a shared Ollama) are not named: they are not the agent's to unload.
type Resident interface {
	Resident(ctx context.Context) ([]string, error)
}

var httpc = &http.Client{Timeout: 30 * time.Second}

// Ready checks a loaded model: health, a one-token completion, and that the context the
// backend reports covers the route's measured budget.
func Ready(ctx context.Context, endpoint, model, key string, budget int64) error {
	do := func(method, path string, body any) (*http.Response, error) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(endpoint, "/")+path, rd)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Content-Type", "application/json")
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		return httpc.Do(req)
	}
	resp, err := do("POST", "/chat/completions", map[string]any{"model": model, "max_tokens": 1,
		"messages": []any{map[string]any{"role": "user", "content": "ping"}}})
	if err != nil {
		return fmt.Errorf("readiness completion: %w", err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 {
		return fmt.Errorf("readiness completion answered %d", resp.StatusCode)
	}
	if budget <= 0 {
		return nil
	}
	rep, err := ServedContext(ctx, endpoint, model, key)
	if err != nil {
		return fmt.Errorf("context check: %w", err)
	}
	return rep.Check(budget)
}

// ProcessBackend runs one server process per model (llama-server style, or the scripted
// backend as a real child): started with its own process group, polled on its health
// endpoint until it is ready, and stopped with SIGTERM to the group, then SIGKILL after
// StopTimeout.
type ProcessBackend struct {
	// Command returns argv for serving model on port.
	Command      func(model string, port int) []string
	Env          []string
	HealthPath   string        // default /health
	StartTimeout time.Duration // default 120 s
	StopTimeout  time.Duration // default 10 s
	Footprints   map[string]int64
	APIKey       string

	mu    sync.Mutex
	procs map[string]*proc
}

type proc struct {
	cmd    *exec.Cmd
	port   int
	exited chan struct{}
}

var _ Backend = (*ProcessBackend)(nil)

func freeLocalPort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// Load starts the model's process and waits for it to be healthy.
func (b *ProcessBackend) Load(ctx context.Context, model string) (string, error) {
	b.mu.Lock()
	if b.procs == nil {
		b.procs = map[string]*proc{}
	}
	if p, ok := b.procs[model]; ok && alive(p) {
		b.mu.Unlock()
		return fmt.Sprintf("http://127.0.0.1:%d/v1", p.port), nil
	}
	b.mu.Unlock()
	port, err := freeLocalPort()
	if err != nil {
		return "", err
	}
	argv := b.Command(model, port)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Env = append(os.Environ(), b.Env...)
	// Its own process group (stop signals the group); and if the agent dies without
	// stopping it (SIGKILL, a crash), the kernel kills the server too: the next agent does
	// not adopt it, and a server left running would hold its VRAM beside the one the next
	// agent starts (TestModelServersDieWithTheAgent).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.WaitDelay = 2 * time.Second // grandchildren holding pipes cannot hang Wait
	p := &proc{cmd: cmd, port: port, exited: make(chan struct{})}
	started := make(chan error, 1)
	go func() {
		// Pdeathsig follows the thread that forked, not the process: this goroutine keeps
		// that thread, locked, until the server exits, so no other goroutine that locks a
		// thread and exits can take the server down with it (the runtime ends a thread
		// only with the goroutine locked to it).
		runtime.LockOSThread()
		if err := cmd.Start(); err != nil {
			started <- err
			return
		}
		started <- nil
		_ = cmd.Wait()
		close(p.exited)
	}()
	if err := <-started; err != nil {
		return "", fmt.Errorf("start %s: %w", model, err)
	}
	b.mu.Lock()
	b.procs[model] = p
	b.mu.Unlock()
	timeout := b.StartTimeout
	if timeout == 0 {
		timeout = 120 * time.Second
	}
	health := b.HealthPath
	if health == "" {
		health = "/health"
	}
	deadline := time.After(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", fmt.Sprintf("http://127.0.0.1:%d%s", port, health), nil)
		if b.APIKey != "" {
			req.Header.Set("Authorization", "Bearer "+b.APIKey)
		}
		if resp, err := (&http.Client{Timeout: time.Second}).Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return fmt.Sprintf("http://127.0.0.1:%d/v1", port), nil
			}
		}
		select {
		case <-p.exited:
			b.forget(model, p)
			return "", fmt.Errorf("%s: the server exited before it was healthy", model)
		case <-deadline:
			_ = b.stop(p)
			b.forget(model, p)
			return "", fmt.Errorf("%s: not healthy after %s", model, timeout)
		case <-ctx.Done():
			_ = b.stop(p)
			b.forget(model, p)
			return "", ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
}

func (b *ProcessBackend) forget(model string, p *proc) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.procs[model] == p {
		delete(b.procs, model)
	}
}

func alive(p *proc) bool {
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// stop: SIGTERM to the process group, SIGKILL after StopTimeout.
func (b *ProcessBackend) stop(p *proc) error {
	if !alive(p) {
		return nil
	}
	pgid := -p.cmd.Process.Pid
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	timeout := b.StopTimeout
	if timeout == 0 {
		timeout = 10 * time.Second
	}
	select {
	case <-p.exited:
		return nil
	case <-time.After(timeout):
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.exited
		return nil
	}
}

// Unload stops the model's process.
func (b *ProcessBackend) Unload(ctx context.Context, model string) error {
	b.mu.Lock()
	p := b.procs[model]
	b.mu.Unlock()
	if p == nil {
		return nil
	}
	err := b.stop(p)
	b.forget(model, p)
	return err
}

// Footprint implements Backend.
func (b *ProcessBackend) Footprint(model string) int64 { return b.Footprints[model] }

// Alive implements Backend.
func (b *ProcessBackend) Alive(_ context.Context, model string) (bool, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	p := b.procs[model]
	return p != nil && alive(p), nil
}

// stopAll stops every model process this backend started (processOwner).
func (b *ProcessBackend) stopAll(ctx context.Context) {
	for _, m := range b.Running() {
		_ = b.Unload(ctx, m)
	}
}

// Key implements Backend.
func (b *ProcessBackend) Key() string { return b.APIKey }

// Running returns the models whose processes run (for fake telemetry in tests).
func (b *ProcessBackend) Running() []string {
	b.mu.Lock()
	defer b.mu.Unlock()
	var out []string
	for m, p := range b.procs {
		if alive(p) {
			out = append(out, m)
		}
	}
	return out
}

// UpstreamBackend is an OpenAI-compatible server the agent cannot load or unload (an
// external endpoint): Load only checks reachability.
type UpstreamBackend struct {
	URL    string // …/v1
	APIKey string
}

var _ Backend = (*UpstreamBackend)(nil)

func (u *UpstreamBackend) Load(ctx context.Context, model string) (string, error) { return u.URL, nil }
func (u *UpstreamBackend) Unload(ctx context.Context, model string) error         { return nil }
func (u *UpstreamBackend) Footprint(string) int64                                 { return 0 }
func (u *UpstreamBackend) Alive(context.Context, string) (bool, error)            { return true, nil }
func (u *UpstreamBackend) Key() string                                            { return u.APIKey }

// OllamaBackend loads with a generate call and unloads with keep_alive 0.
type OllamaBackend struct {
	URL        string // http://host:11434
	Footprints map[string]int64
	// NumCtx, when set, is the context a model is loaded with (options.num_ctx on the
	// load; the device file's context). Readiness verifies it through /api/ps.
	NumCtx func(model string) int64
}

var _ Backend = (*OllamaBackend)(nil)

func (o *OllamaBackend) generate(ctx context.Context, model string, keepAlive any) error {
	body := map[string]any{"model": model, "prompt": "", "keep_alive": keepAlive, "stream": false}
	if n := o.numCtx(model); n > 0 && keepAlive != 0 {
		body["options"] = map[string]any{"num_ctx": n}
	}
	b, _ := json.Marshal(body)
	req, err := http.NewRequestWithContext(ctx, "POST", strings.TrimRight(o.URL, "/")+"/api/generate", bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := httpc.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("ollama %s: %d %s", model, resp.StatusCode, msg)
	}
	return nil
}

// Load asks Ollama to load model and keep it (keep_alive -1).
func (o *OllamaBackend) Load(ctx context.Context, model string) (string, error) {
	if err := o.generate(ctx, model, -1); err != nil {
		return "", err
	}
	return strings.TrimRight(o.URL, "/") + "/v1", nil
}

func (o *OllamaBackend) numCtx(model string) int64 {
	if o.NumCtx == nil {
		return 0
	}
	return o.NumCtx(model)
}

// Unload asks Ollama to drop model now (keep_alive 0).
func (o *OllamaBackend) Unload(ctx context.Context, model string) error {
	return o.generate(ctx, model, 0)
}

// Footprint implements Backend.
func (o *OllamaBackend) Footprint(model string) int64 { return o.Footprints[model] }

// Alive asks /api/ps whether model is loaded.
func (o *OllamaBackend) Alive(ctx context.Context, model string) (bool, error) {
	ps, err := o.ps(ctx)
	if err != nil {
		return false, err
	}
	for _, m := range ps {
		if m.Name == model || m.Model == model {
			return true, nil
		}
	}
	return false, nil
}

type ollamaLoaded struct{ Name, Model string }

// ps lists the models Ollama holds now (GET /api/ps).
func (o *OllamaBackend) ps(ctx context.Context) ([]ollamaLoaded, error) {
	req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(o.URL, "/")+"/api/ps", nil)
	if err != nil {
		return nil, err
	}
	resp, err := httpc.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("ollama /api/ps answered %d", resp.StatusCode)
	}
	var ps struct {
		Models []ollamaLoaded `json:"models"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&ps); err != nil {
		return nil, fmt.Errorf("ollama /api/ps: %w", err)
	}
	return ps.Models, nil
}

// Resident implements Resident: the device's models Ollama holds now.
func (o *OllamaBackend) Resident(ctx context.Context) ([]string, error) {
	ps, err := o.ps(ctx)
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range ps {
		for _, name := range []string{m.Name, m.Model} {
			if _, ours := o.Footprints[name]; ours && !slices.Contains(out, name) {
				out = append(out, name)
				break
			}
		}
	}
	return out, nil
}

// Key implements Backend.
func (o *OllamaBackend) Key() string { return "" }

var errNoBackend = errors.New("gpu: no backend")
