// Command pa is the Private Assistant CLI. It calls the same function endpoints as the web
// chat, as the signed-in user (an Appwrite session; each call carries a short-lived JWT,
// reused until shortly before it expires).
//
//	pa login EMAIL                     (password from PA_PASSWORD or stdin)
//	pa logout
//	pa chat [-conversation ID] [-role ROLE] [TEXT]   talk: each line is sent, the answer streams,
//	                                   approvals are asked inline, Ctrl-C cancels (twice: quits)
//	pa conversations | pa new TITLE
//	pa send [-role ROLE] CONVERSATION TEXT   (ROLE: one of pa roles)
//	pa roles                           (the work roles you may use)
//	pa runs [-conversation ID]
//	pa tail RUN                        follow a run's events until it ends
//	pa cancel RUN
//	pa approve [-yes] RUN REQUEST once|deny
//	pa admin harnesses | routes | audit | settings
//	pa admin harness -kind hermes -url URL [-key-ref env:NAME] [-yes] PROFILE
//	pa admin route -alias A -device D -model M -context N [-max-output N] [-yes] ROUTE
//	pa admin validate PROFILE REVISION
//	pa admin select [-yes] ROLE=HARNESS@REV:ROUTE@REV[:tool,tool] ...
//	pa admin member [-name N] [-yes] EMAIL   (password from PA_PASSWORD or stdin)
//	pa admin admit | remove [-yes] USER
//	pa admin invite [-hours N] [-yes]
//	pa admin runtime create -roles R[,R] [-rate N] [-window S] [-yes] APP | list | revoke [-yes] KEY
//	pa admin runtime link [-yes] APP USER [MEMBER]
//
// Every command has its own flags and `pa COMMAND -help` (or --help); flags may come
// before or after the arguments, and `--` ends the flags (for a TEXT that starts with a
// dash). Output is for people (tables, wrapped text); -json prints the server's JSON answer
// unchanged, for scripts. Admin changes and pa approve print their plan and commit only
// with -yes (pa chat's y/n answer is the confirmation). An unreachable server or a wrong
// password is said plainly.
//
// Settings: PA_URL (the web origin), APPWRITE_ENDPOINT, APPWRITE_PROJECT_ID (environment,
// then .env). The session and the current JWT are kept, readable by the owner only, in
// $PA_CONFIG_DIR (default ~/.config/privateassistant).
//
// Exit codes: 0 ok, 1 error, 2 usage, 3 not signed in, 4 not found, 5 conflict, 6 the run
// did not complete.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"privateassistant/internal/dotenv"
)

// Exit codes.
const (
	exitOK         = 0
	exitError      = 1
	exitUsage      = 2
	exitSignedOut  = 3
	exitNotFound   = 4
	exitConflict   = 5
	exitIncomplete = 6
)

// exitErr is an error with the process exit code it stands for.
type exitErr struct {
	code int
	msg  string
}

func (e *exitErr) Error() string { return e.msg }

func fail(code int, format string, args ...any) error {
	return &exitErr{code, fmt.Sprintf(format, args...)}
}

func main() {
	_ = dotenv.Load(".env")
	ctx, cancel := context.WithCancel(context.Background())
	c := newCLI(os.Stdin, os.Stdout, os.Stderr)
	// SIGTERM, and Ctrl-C outside pa chat, end the command; pa chat takes Ctrl-C itself
	// (the first cancels the run, the second quits).
	interrupts := make(chan struct{}, 1)
	c.interrupts, c.ownInterrupts = interrupts, new(atomic.Bool)
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	go func() {
		for s := range sigs {
			if s == os.Interrupt && c.ownInterrupts.Load() {
				select {
				case interrupts <- struct{}{}:
				default:
				}
				continue
			}
			cancel()
		}
	}()
	code := c.exec(ctx, os.Args[1:])
	signal.Stop(sigs)
	cancel()
	os.Exit(code)
}

// cli is one invocation: its settings, streams and the HTTP client.
type cli struct {
	out, errw io.Writer
	in        io.Reader
	base      string // the web origin the functions are served on
	endpoint  string // Appwrite's API endpoint
	project   string
	dir       string // where the session is kept
	http      *http.Client
	// token returns the bearer token of a call (the kept JWT, or one minted from the
	// session: jwtcache.go; tests replace it); dropToken forgets it after a 401 (nil: no
	// retry).
	token     func(ctx context.Context) (string, error)
	dropToken func()
	clock     func() time.Time
	// tailTiming is pa tail's fallback and idle timing (zero: defaultTailTiming).
	tailTiming tailTiming
	// interrupts delivers Ctrl-C to pa chat while ownInterrupts is set (nil: none).
	interrupts    <-chan struct{}
	ownInterrupts *atomic.Bool
}

func newCLI(in io.Reader, out, errw io.Writer) *cli {
	c := &cli{out: out, errw: errw, in: in, base: strings.TrimRight(os.Getenv("PA_URL"), "/"),
		endpoint: os.Getenv("APPWRITE_ENDPOINT"), project: os.Getenv("APPWRITE_PROJECT_ID"), http: &http.Client{Timeout: 40 * time.Second}}
	if c.base == "" {
		c.base = "http://127.0.0.1:8080"
	}
	if c.endpoint == "" {
		c.endpoint = c.base + "/v1"
	}
	if c.project == "" {
		c.project = "privateassistant"
	}
	c.dir = os.Getenv("PA_CONFIG_DIR")
	if c.dir == "" {
		home, _ := os.UserHomeDir()
		c.dir = filepath.Join(home, ".config", "privateassistant")
	}
	c.token, c.dropToken, c.clock = c.jwt, c.dropJWT, time.Now
	return c
}

// run executes one command line and returns the exit code.
func run(ctx context.Context, args []string, in io.Reader, out, errw io.Writer) int {
	return newCLI(in, out, errw).exec(ctx, args)
}

func (c *cli) exec(ctx context.Context, args []string) int {
	err := dispatch(ctx, c, topCommands, "", args)
	var ee *exitErr
	switch {
	case err == nil:
		return exitOK
	case errors.As(err, &ee):
		if ee.msg != "" {
			fmt.Fprintln(c.errw, "pa:", ee.msg)
		}
		return ee.code
	default:
		fmt.Fprintln(c.errw, "pa:", err)
		return exitError
	}
}
