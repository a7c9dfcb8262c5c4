package daemon_test

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when any goroutine outlives the tests: the agent's own
// (every component's Stop waits for what it started) and the test doubles' alike.
func TestMain(m *testing.M) {
	code := m.Run()
	stopSharedHermes() // the real Hermes the two-backend suite shares (backends_test.go)
	if code == 0 {
		// Keep-alive connections of clients that use the default transport (tests'
		// http.Get, SDK clients) are idle pools, not leaks: close them first.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests:\n%v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
