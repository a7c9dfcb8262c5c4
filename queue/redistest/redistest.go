// Package redistest starts real redis-server children for tests: each on its own free
// loopback port, with its own data directory, stopped when the test ends. Tests never
// depend on a Redis that happens to be running.
package redistest

import (
	"context"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server child process.
type Server struct {
	Addr     string
	Password string
	dir      string
	port     int
	cmd      *exec.Cmd
	exited   chan struct{}
	t        testing.TB
}

// Options for a test Redis.
type Options struct {
	// Password sets requirepass (the production config always has one).
	Password string
	// AppendOnly turns on AOF persistence, as deploy/redis.conf does.
	AppendOnly bool
}

// Start launches redis-server on a free 127.0.0.1 port and waits until it answers PING.
// The test fails (not skips) when redis-server is missing: `make deps` installs it.
func Start(t testing.TB, opts ...Options) *Server {
	t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	bin, err := exec.LookPath("redis-server")
	if err != nil {
		t.Fatalf("redistest: redis-server not found (run `make deps`): %v", err)
	}
	dir := t.TempDir()
	s := &Server{Password: o.Password, dir: dir, t: t}
	// A port picked by the kernel can be taken between close and bind; retry a few times.
	for attempt := 0; attempt < 5; attempt++ {
		s.port = freePort(t)
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.port)
		if err := s.launch(bin, o); err == nil {
			t.Cleanup(s.Stop)
			return s
		} else if attempt == 4 {
			t.Fatalf("redistest: %v", err)
		}
	}
	return s
}

func (s *Server) launch(bin string, o Options) error {
	args := []string{
		"--port", strconv.Itoa(s.port), "--bind", "127.0.0.1", "--dir", s.dir,
		"--save", "", "--daemonize", "no", "--protected-mode", "yes",
		"--maxmemory-policy", "noeviction", "--logfile", filepath.Join(s.dir, "redis.log"),
	}
	if o.AppendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "everysec")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if o.Password != "" {
		args = append(args, "--requirepass", o.Password)
	}
	s.cmd = exec.Command(bin, args...)
	s.exited = make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start redis-server: %w", err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	c := s.Client()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.exited:
			log, _ := os.ReadFile(filepath.Join(s.dir, "redis.log"))
			return fmt.Errorf("redis-server exited early: %s", log)
		default:
		}
		ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
		err := c.Ping(ctx).Err()
		cancel()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			s.kill()
			return fmt.Errorf("redis-server did not answer PING: %w", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// Client returns a new go-redis client for this server; the caller closes it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, Password: s.Password})
}

// Stop shuts the server down and waits for it to exit. Idempotent.
func (s *Server) Stop() { s.kill() }

func (s *Server) kill() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	// SIGTERM first: Redis then flushes its AOF, as a clean restart of the service would.
	_ = s.cmd.Process.Signal(os.Interrupt)
	select {
	case <-s.exited:
	case <-time.After(5 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Crash kills the server with SIGKILL (no AOF flush), like a power cut.
func (s *Server) Crash() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// Restart stops the server and starts it again on the same port and data directory
// (with AOF on, data survives; without it, Redis comes back empty).
func (s *Server) Restart(opts ...Options) {
	s.t.Helper()
	var o Options
	if len(opts) > 0 {
		o = opts[0]
	}
	o.Password = s.Password
	s.kill()
	bin, _ := exec.LookPath("redis-server")
	if err := s.launch(bin, o); err != nil {
		s.t.Fatalf("redistest: restart: %v", err)
	}
}

// Pause makes the server stop answering clients for d (CLIENT PAUSE ALL), the way an
// overloaded or failing-over Redis looks to its clients.
func (s *Server) Pause(ctx context.Context, d time.Duration) error {
	c := s.Client()
	defer c.Close()
	return c.Do(ctx, "CLIENT", "PAUSE", strconv.FormatInt(d.Milliseconds(), 10), "ALL").Err()
}

func freePort(t testing.TB) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatalf("redistest: free port: %v", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
