package redistest

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Sentinel is one Redis Sentinel child process watching a primary (Debian's
// redis-sentinel, or redis-server --sentinel, the same program).
type Sentinel struct {
	Addr     string
	Master   string
	Password string // requirepass of the Sentinel itself ("" for none)
	srv      *Server
}

// SentinelOptions tune a test Sentinel.
type SentinelOptions struct {
	// Password is the Sentinel's own requirepass (clients: SentinelPassword).
	Password string
	// DownAfter is how long the primary must be silent to be down (default 500 ms).
	DownAfter time.Duration
}

// StartSentinel starts a Sentinel that monitors primary as master (quorum 1, a failover
// within about a second of the primary going silent), authenticating to the servers as
// their administrator, over TLS when the primary serves TLS. It is stopped when the test
// ends.
func StartSentinel(t testing.TB, primary *Server, master string, opts ...SentinelOptions) *Sentinel {
	t.Helper()
	var o SentinelOptions
	if len(opts) > 0 {
		o = opts[0]
	}
	if o.DownAfter == 0 {
		o.DownAfter = 500 * time.Millisecond
	}
	bin, args := "redis-sentinel", []string{}
	if _, err := exec.LookPath(bin); err != nil {
		bin, args = "redis-server", []string{"--sentinel"}
	}
	if _, err := exec.LookPath(bin); err != nil {
		t.Fatalf("redistest: neither redis-sentinel nor redis-server found (run `make deps`): %v", err)
	}
	dir := t.TempDir()
	s := &Sentinel{Master: master, Password: o.Password, srv: &Server{dir: dir, t: t, CA: primary.CA, CAFile: primary.CAFile, Password: o.Password}}
	host, port, _ := strings.Cut(primary.Addr, ":")
	for attempt := 0; ; attempt++ {
		s.srv.port = freePort(t)
		s.Addr = "127.0.0.1:" + strconv.Itoa(s.srv.port)
		s.srv.Addr = s.Addr
		conf := []string{
			"bind 127.0.0.1", "dir " + dir, "logfile " + filepath.Join(dir, "sentinel.log"), "daemonize no",
			fmt.Sprintf("sentinel monitor %s %s %s 1", master, host, port),
			fmt.Sprintf("sentinel down-after-milliseconds %s %d", master, o.DownAfter.Milliseconds()),
			fmt.Sprintf("sentinel failover-timeout %s 5000", master),
			fmt.Sprintf("sentinel parallel-syncs %s 1", master),
		}
		if primary.CA != nil {
			// The Sentinel's own TLS certificate: one more signed by the test CA.
			if err := s.srv.writeCerts(); err != nil {
				t.Fatalf("redistest: %v", err)
			}
			conf = append(conf, "port 0", "tls-port "+strconv.Itoa(s.srv.port), "tls-cert-file "+filepath.Join(dir, "redis.crt"),
				"tls-key-file "+filepath.Join(dir, "redis.key"), "tls-ca-cert-file "+s.srv.CAFile, "tls-auth-clients no", "tls-replication yes")
		} else {
			conf = append(conf, "port "+strconv.Itoa(s.srv.port))
		}
		if primary.Username != "" {
			conf = append(conf, fmt.Sprintf("sentinel auth-user %s %s", master, primary.Username))
		}
		if primary.Password != "" {
			conf = append(conf, fmt.Sprintf("sentinel auth-pass %s %s", master, primary.Password))
		}
		if o.Password != "" {
			conf = append(conf, "requirepass "+o.Password)
		}
		path := filepath.Join(dir, "sentinel.conf") // Sentinel rewrites it: it must be writable
		if err := os.WriteFile(path, []byte(strings.Join(conf, "\n")+"\n"), 0o600); err != nil {
			t.Fatalf("redistest: %v", err)
		}
		err := s.srv.start(exec.Command(bin, append([]string{path}, args...)...), filepath.Join(dir, "sentinel.log"))
		if err == nil {
			t.Cleanup(s.srv.Stop)
			return s
		}
		if attempt == 4 {
			t.Fatalf("redistest: sentinel: %v", err)
		}
	}
}

// Client returns a client of the Sentinel itself (SENTINEL commands); the caller closes it.
func (s *Sentinel) Client() *redis.SentinelClient {
	return redis.NewSentinelClient(&redis.Options{Addr: s.Addr, Password: s.Password, TLSConfig: s.srv.TLSConfig()})
}

// Primary asks the Sentinel for the current primary's address.
func (s *Sentinel) Primary(ctx context.Context) (string, error) {
	c := s.Client()
	defer c.Close()
	a, err := c.GetMasterAddrByName(ctx, s.Master).Result()
	if err != nil {
		return "", err
	}
	return strings.Join(a, ":"), nil
}

// Replicas is the number of replicas the Sentinel knows of the primary.
func (s *Sentinel) Replicas(ctx context.Context) (int, error) {
	c := s.Client()
	defer c.Close()
	r, err := c.Replicas(ctx, s.Master).Result()
	return len(r), err
}

// Stop stops the Sentinel and waits for it. Idempotent.
func (s *Sentinel) Stop() { s.srv.Stop() }

// start runs cmd (a redis-server or sentinel) and waits until it answers PING.
func (s *Server) start(cmd *exec.Cmd, logfile string) error {
	s.cmd = cmd
	s.exited = make(chan struct{})
	if err := s.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w", cmd.Path, err)
	}
	go func() { _ = s.cmd.Wait(); close(s.exited) }()
	c := s.Client()
	defer c.Close()
	deadline := time.Now().Add(10 * time.Second)
	for {
		select {
		case <-s.exited:
			log, _ := os.ReadFile(logfile)
			return fmt.Errorf("%s exited early: %s", cmd.Path, log)
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
			return fmt.Errorf("%s did not answer PING: %w", cmd.Path, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
