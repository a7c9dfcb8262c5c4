// Command dev brings the whole stack up on one local origin (make dev): a dedicated
// Redis, the Appwrite emulator with a data directory (provisioned by the real apply code,
// with a demo user), the functions behind the local function host, the resident agent
// with the scripted demo model, the real Hermes `make deps` installs for the work roles
// (one per member, agent/homes; PA_SKIP_HERMES=1, or no Hermes installed: the Hermes
// double, and the banner says so), and the web chat. Real services are used as soon as
// .env names them: APPWRITE_ENDPOINT (+ _PROJECT_ID, _API_KEY), HERMES_URL (+
// HERMES_KEY_REF, PA_GATEWAY_API_KEY), MODEL_URL. Ctrl-C stops everything.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"privateassistant/internal/dotenv"
)

func main() {
	// The function host captures the process's stdout and stderr during each execution, as
	// Appwrite's Go runtime does: this command's own lines go to the streams it started with.
	stdout, stderr := os.Stdout, os.Stderr
	runModelServer() // when the GPU manager started this binary as an xtx model server (modelchild.go)
	if err := dotenv.Load(".env"); err != nil {
		fmt.Fprintln(stderr, "dev:", err)
		os.Exit(1)
	}
	root, _ := os.Getwd()
	addr := os.Getenv("PA_DEV_ADDR")
	if addr == "" {
		addr = "127.0.0.1:8080"
	}
	ops := os.Getenv("PA_DEV_OPS_ADDR")
	if ops == "" {
		ops = "127.0.0.1:9464"
	}
	data := filepath.Join(root, ".dev")
	if addr != "127.0.0.1:8080" {
		// The stored configuration names this origin: keep one data directory per address.
		data += "-" + strings.NewReplacer(":", "-", ".", "-").Replace(addr)
	}
	// The agent's inference gateway (the stored harness configuration names it): the
	// origin's port + 11 (8091 beside 8080, as deploy/ has it).
	// Redis: the origin's port − 1690 (6390 beside 8080), so stacks on other addresses, each
	// with its own data folder, never share one.
	gateway, redisPort := "127.0.0.1:8091", 6390
	if h, p, err := net.SplitHostPort(addr); err == nil {
		if n, err := strconv.Atoi(p); err == nil {
			gateway = net.JoinHostPort(h, strconv.Itoa(n+11))
			if n-1690 > 1024 {
				redisPort = n - 1690
			}
		}
	}
	cfg := Config{Root: root, DataDir: data, Addr: addr, OpsAddr: ops, RedisPort: redisPort, GatewayAddr: gateway,
		AppwriteEndpoint: os.Getenv("APPWRITE_ENDPOINT"), AppwriteProject: os.Getenv("APPWRITE_PROJECT_ID"),
		AppwriteKey: os.Getenv("APPWRITE_API_KEY"), HermesURL: os.Getenv("HERMES_URL"), HermesKeyRef: os.Getenv("HERMES_KEY_REF"),
		ModelURL: os.Getenv("MODEL_URL"), ModelLoadTime: 1500 * time.Millisecond, GatewayKey: os.Getenv("PA_GATEWAY_API_KEY"),
		Hermes:       HermesMembers,
		CaptureStdio: true, Log: slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	if os.Getenv("PA_SKIP_HERMES") == "1" {
		cfg.Hermes, cfg.HermesNote = HermesDouble, "PA_SKIP_HERMES=1"
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	began := startedAt(os.Getenv("PA_DEV_T0"))
	s, err := Start(ctx, cfg)
	if err != nil {
		fmt.Fprintln(stderr, "dev:", err)
		os.Exit(1)
	}
	fmt.Fprint(stdout, banner(s, time.Since(began)))
	<-ctx.Done()
	fmt.Fprintln(stdout, "stopping…")
	s.Close()
}

// startedAt is when make dev was typed (PA_DEV_T0, nanoseconds since the epoch, set by the
// Makefile before its installs and the build), so the start-up time printed includes them;
// now when run without it.
func startedAt(t0 string) time.Time {
	if n, err := strconv.ParseInt(strings.TrimSpace(t0), 10, 64); err == nil && n > 0 {
		if t := time.Unix(0, n); time.Since(t) >= 0 && time.Since(t) < time.Hour {
			return t
		}
	}
	return time.Now()
}

// banner is what make dev prints once the stack is up: where to go, the logins, and how
// long start-up took.
func banner(s *Stack, took time.Duration) string {
	return fmt.Sprintf(`
Private Assistant is running.

  Web chat:   %s
  Demo login: %s / %s   (a member)
  Admin:      %s / %s   (the admin: pa admin invite, pa admin member)
  asynqmon:   %s/asynqmon/  (user %s, password %s)
  Gateway:    %s  (devices arc: chat; xtx: research and coding, two models it swaps between, shared with the Immich double)
  Hermes:     %s

Try "hello", "#markdown", "#delegate" (the chat hands a research job on), "#research a topic" with
the research role, or "#tool" with the coding role
(it asks before a guarded command; a coding job asked while a research job runs waits — its card says
why — then the XTX swaps models).
Started in %.1f s. Press Ctrl-C to stop.
`, s.URL, s.DemoEmail, s.DemoPass, s.AdminEmail, s.AdminPass, s.Ops, s.OpsUser, s.OpsPass, s.Gateway, s.HermesInfo, took.Seconds())
}
