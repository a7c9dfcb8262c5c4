package readiness_test

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain fails the package when a goroutine outlives the tests (Evaluate waits for
// every check it starts).
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
