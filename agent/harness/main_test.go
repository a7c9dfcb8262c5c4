package harness_test

import (
	"testing"

	"go.uber.org/goleak"
)

// The direct harness runs each native run on a goroutine of its own.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
