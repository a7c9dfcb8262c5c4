//go:build race

package executor_test

// raceEnabled: the race detector slows the emulator and the executor about tenfold, so
// the stress test runs fewer iterations by default under it.
const raceEnabled = true
