package modeltest

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test here starts (servers, child-process waiters) ends with it.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
