//go:build race

package outbox_test

// raceEnabled: the race detector slows the Appwrite emulator by two orders of magnitude,
// so the 5,000-run retention test writes fewer runs under -race (see retentionRuns).
const raceEnabled = true
