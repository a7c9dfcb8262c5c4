package hermesreal

import (
	"context"
	"fmt"
	"os"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
)

// shared is the package's one Hermes (its start costs seconds); tests that need other
// settings start their own. TestMain stops it before the leak check.
var shared struct {
	once sync.Once
	srv  *Server
	err  error
	root string
}

// sharedServer returns the package's Hermes, starting it on first use.
func sharedServer(t *testing.T) *Server {
	t.Helper()
	venv := Require(t)
	shared.once.Do(func() {
		shared.root, shared.err = os.MkdirTemp("", "hermesreal-")
		if shared.err == nil {
			shared.srv, shared.err = Launch(context.Background(), venv, shared.root, Options{})
		}
		if shared.err == nil {
			t.Logf("real Hermes %s started in %v at %s", shared.srv.Version, shared.srv.StartTime, shared.srv.URL)
		}
	})
	if shared.err != nil {
		t.Fatalf("starting real Hermes: %v", shared.err)
	}
	return shared.srv
}

func TestMain(m *testing.M) {
	code := m.Run()
	if shared.srv != nil {
		start := time.Now()
		err := shared.srv.Close()
		fmt.Fprintf(os.Stderr, "hermesreal: shared Hermes stopped in %v (killed after SIGTERM grace: %v)\n",
			time.Since(start).Round(time.Millisecond), shared.srv.Killed)
		if err != nil {
			fmt.Fprintln(os.Stderr, "stopping Hermes:", err)
			code = 1
		}
		if code != 0 {
			fmt.Fprintf(os.Stderr, "--- shared Hermes log (tail) ---\n%s\n", shared.srv.LogTail(80))
		}
	}
	if shared.root != "" {
		_ = os.RemoveAll(shared.root)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}
