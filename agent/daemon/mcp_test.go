package daemon

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// The MCP job server admits jobs for runs: it listens on loopback or a private address only.
func TestMCPAddrIsLoopbackOrPrivate(t *testing.T) {
	for _, ok := range []string{"127.0.0.1:8092", "localhost:8092", "[::1]:8092", "10.0.0.12:8092", "192.168.1.5:0"} {
		require.NoError(t, checkMCPAddr(ok), ok)
	}
	for _, bad := range []string{"0.0.0.0:8092", ":8092", "203.0.113.7:8092", "example.org:8092", "127.0.0.1"} {
		require.Error(t, checkMCPAddr(bad), bad)
	}
}
