package ops_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests (a listener that Stop
// did not wait for).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
