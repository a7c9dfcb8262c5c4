package hostapp_test

import (
	"fmt"
	"net/http"
	"os"
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when any goroutine outlives the tests (the agent, the
// function host and the Redis clients all end with them).
func TestMain(m *testing.M) {
	code := m.Run()
	if code == 0 {
		// Idle keep-alive connections of the default transport are pools, not leaks.
		http.DefaultTransport.(*http.Transport).CloseIdleConnections()
		if err := goleak.Find(); err != nil {
			fmt.Fprintf(os.Stderr, "goleak: goroutines left after the tests:\n%v\n", err)
			code = 1
		}
	}
	os.Exit(code)
}
