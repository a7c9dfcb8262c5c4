package appwritetest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every emulator stops its snapshot writer on Close, which NewTestServer's cleanup calls.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
