package main

import (
	"testing"

	"go.uber.org/goleak"
)

// The dev stack starts servers, child processes and their waiters: every one ends when
// its test closes the stack.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
