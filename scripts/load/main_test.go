//go:build load

package load_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the run if a goroutine it started (followers, the hub, the host) outlives it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
