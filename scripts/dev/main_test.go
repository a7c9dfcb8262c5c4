package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The dev stack starts servers, child processes and their waiters: every one ends when
// its test closes the stack. The xtx's model servers are this test binary run again
// (modelchild.go).
func TestMain(m *testing.M) {
	runModelServer()
	goleak.VerifyTestMain(m)
}
