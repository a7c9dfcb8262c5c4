package homes

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// process is one member's running Hermes (bwrap and everything under it: one process
// group, and the PID namespace dies with bwrap's child).
type process struct {
	url, key string
	pid      int // Hermes's pid (the sandbox's init) as this host sees it; 0: unknown
	cmd      *exec.Cmd
	done     chan struct{} // closed when cmd has exited
	log      *os.File
}

// exited reports whether the process has ended (a crash: the next Acquire starts it again).
func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// spawn starts argv (bwrap and its arguments) with env, its output to logPath, and waits until the API
// server answers /health on url.
func spawn(ctx context.Context, argv, env []string, logPath, url, key string, timeout time.Duration) (*process, error) {
	f, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	// bwrap reads its arguments from a pipe (--args 3), so the sandbox's /proc/1/cmdline
	// (bwrap is its PID 1) shows no host path: not the homes folder, not the member's id.
	pr, pw, err := os.Pipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	// Options through the pipe; the command ("--" and after) stays on the command line
	// (bwrap wants it there): the venv's hermes, no member's path.
	cut := slices.Index(argv, "--")
	if cut < 0 {
		cut = len(argv)
	}
	var args []byte
	for _, a := range argv[1:cut] {
		args = append(append(args, a...), 0)
	}
	if _, err := pw.Write(args); err != nil { // far below a pipe's buffer
		pr.Close()
		pw.Close()
		f.Close()
		return nil, err
	}
	pw.Close()
	defer pr.Close()
	// bwrap reports the sandboxed process's pid on fd 4 (--info-fd).
	ir, iw, err := os.Pipe()
	if err != nil {
		f.Close()
		return nil, err
	}
	defer ir.Close()
	cmd := exec.Command(argv[0], append([]string{"--args", "3"}, argv[cut:]...)...)
	cmd.ExtraFiles = []*os.File{pr, iw}
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = f, f
	// Its own process group (stop kills the group); if the agent dies without stopping
	// it, the kernel kills bwrap, and bwrap (--die-with-parent) the sandbox.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	err = cmd.Start()
	iw.Close()
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("start hermes: %w", err)
	}
	p := &process{url: url, key: key, cmd: cmd, done: make(chan struct{}), log: f}
	go func() { _ = cmd.Wait(); close(p.done) }() // ends with the process; stop waits for it
	var info struct {
		ChildPid int `json:"child-pid"`
	}
	_ = ir.SetReadDeadline(time.Now().Add(timeout))
	if err := json.NewDecoder(ir).Decode(&info); err != nil || info.ChildPid <= 0 {
		p.stop(0)
		return nil, fmt.Errorf("hermes sandbox did not report its pid (%v)\n--- log (tail) ---\n%s", err, tail(logPath, 30))
	}
	p.pid = info.ChildPid
	if err := p.waitHealthy(ctx, timeout); err != nil {
		p.stop(0)
		return nil, fmt.Errorf("%w\n--- hermes log (tail) ---\n%s", err, tail(logPath, 30))
	}
	return p, nil
}

func (p *process) waitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	hc := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, _ := http.NewRequestWithContext(ctx, "GET", p.url+"/health", nil)
		if resp, err := hc.Do(req); err == nil {
			var h struct{ Status string }
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if resp.StatusCode == 200 && h.Status == "ok" {
				return nil
			}
		}
		select {
		case <-p.done:
			return fmt.Errorf("%w before it served /health (%v)", errExited, p.cmd.ProcessState)
		case <-ctx.Done():
			return fmt.Errorf("hermes did not serve /health within %v: %w", timeout, ctx.Err())
		case <-tick.C:
		}
	}
}

// stop ends the member's Hermes: SIGTERM to Hermes itself (the sandbox's init), SIGKILL
// after grace (which kills the whole sandbox), and it returns once bwrap has exited,
// which is after every process of the sandbox is gone. Killing bwrap's group is the last
// resort (a sandbox whose pid is unknown); its --die-with-parent then kills the sandbox.
func (p *process) stop(grace time.Duration) {
	if p.exited() { // never signal a pid that may have been reused
		_ = p.log.Close()
		return
	}
	if p.pid > 0 {
		if grace > 0 {
			_ = syscall.Kill(p.pid, syscall.SIGTERM)
		}
		if grace <= 0 || !p.waitDone(grace) {
			_ = syscall.Kill(p.pid, syscall.SIGKILL)
		}
		if p.waitDone(10 * time.Second) {
			_ = p.log.Close()
			return
		}
	}
	_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
	_ = p.log.Close()
}

func (p *process) waitDone(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.done:
		return true
	case <-t.C:
		return false
	}
}

func randomKey() string {
	b := make([]byte, 32)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// errExited: the Hermes being started exited before it served /health.
var errExited = errors.New("hermes exited")

// pickPort picks the port a Hermes is started on (a test replaces it).
var pickPort = freePort

// portTaken reports whether another process listens on 127.0.0.1:port.
func portTaken(port int) bool {
	ln, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	if err != nil {
		return true
	}
	ln.Close()
	return false
}

func freePort() (int, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, err
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port, nil
}

func tail(path string, n int) string {
	b, _ := os.ReadFile(path)
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
