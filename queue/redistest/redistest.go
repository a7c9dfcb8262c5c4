// Package redistest starts real redis-server children for tests: each on its own free
// loopback port, with its own data directory, stopped when the test ends. Tests never
// depend on a Redis that happens to be running.
package redistest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
)

// Server is one redis-server child process.
type Server struct {
	Addr     string
	Password string
	// Username and Password are what Client uses: with ACL users, an administrator
	// redistest adds (never one of the caller's users).
	Username string
	// CA is the PEM of the CA that signed the server's certificate (TLS only), CAFile
	// the same on disk.
	CA     []byte
	CAFile string
	dir    string
	port   int
	opts   Options
	cmd    *exec.Cmd
	exited chan struct{}
	t      testing.TB
}

// Options for a test Redis.
type Options struct {
	// Password sets requirepass (the production config always has one).
	Password string
	// AppendOnly turns on AOF persistence, as deploy/redis.conf does.
	AppendOnly bool
	// TLS serves TLS only (port 0, tls-port), as deploy/redis.conf does, with a
	// certificate for 127.0.0.1 and localhost signed by a CA generated at test time.
	TLS bool
	// ACL is aclfile content ("user NAME on >password ~keys +commands" lines, as in
	// deploy/redis-users.acl); the server loads it. redistest adds an administrator for
	// Client; the caller's lines decide everything else (the default user included).
	ACL []string
	// ReplicaOf makes this server a replica of that primary, authenticating as its
	// administrator (and over TLS when the primary has it).
	ReplicaOf *Server
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
	s := &Server{Password: o.Password, dir: dir, t: t, opts: o}
	if o.TLS {
		if err := s.writeCerts(); err != nil {
			t.Fatalf("redistest: %v", err)
		}
	}
	if len(o.ACL) > 0 {
		s.Username, s.Password = adminUser, adminPassword
		acl := append([]string{"user " + adminUser + " on >" + adminPassword + " ~* &* +@all"}, o.ACL...)
		if err := os.WriteFile(filepath.Join(dir, "users.acl"), []byte(strings.Join(acl, "\n")+"\n"), 0o600); err != nil {
			t.Fatalf("redistest: %v", err)
		}
	}
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
	if o.TLS {
		args[1] = "0"
		args = append(args, "--tls-port", strconv.Itoa(s.port), "--tls-cert-file", filepath.Join(s.dir, "redis.crt"),
			"--tls-key-file", filepath.Join(s.dir, "redis.key"), "--tls-ca-cert-file", s.CAFile,
			"--tls-auth-clients", "no", "--tls-replication", "yes")
	}
	if len(o.ACL) > 0 {
		args = append(args, "--aclfile", filepath.Join(s.dir, "users.acl"))
	}
	if p := o.ReplicaOf; p != nil {
		host, port, _ := net.SplitHostPort(p.Addr)
		args = append(args, "--replicaof", host, port)
		if p.Username != "" {
			args = append(args, "--masteruser", p.Username)
		}
		if p.Password != "" {
			args = append(args, "--masterauth", p.Password)
		}
	}
	if o.AppendOnly {
		args = append(args, "--appendonly", "yes", "--appendfsync", "everysec")
	} else {
		args = append(args, "--appendonly", "no")
	}
	if o.Password != "" && len(o.ACL) == 0 {
		args = append(args, "--requirepass", o.Password)
	}
	return s.start(exec.Command(bin, args...), filepath.Join(s.dir, "redis.log"))
}

// Client returns a new go-redis client for this server (its administrator when it has
// ACL users, over TLS when it serves TLS); the caller closes it.
func (s *Server) Client() *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, Username: s.Username, Password: s.Password, TLSConfig: s.TLSConfig()})
}

// ClientAs returns a client that authenticates as one of the caller's ACL users.
func (s *Server) ClientAs(user, password string) *redis.Client {
	return redis.NewClient(&redis.Options{Addr: s.Addr, Username: user, Password: password, TLSConfig: s.TLSConfig()})
}

// TLSConfig trusts this server's CA (nil without TLS).
func (s *Server) TLSConfig() *tls.Config {
	if s.CA == nil {
		return nil
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(s.CA)
	return &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
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
	o.Password = s.opts.Password
	o.TLS, o.ACL, o.ReplicaOf = s.opts.TLS, s.opts.ACL, s.opts.ReplicaOf
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
