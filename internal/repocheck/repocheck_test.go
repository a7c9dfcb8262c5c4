package repocheck

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// protocols are the packages whose doc.go is a protocol document (issue 10): each lists
// its invariants and names the test that proves each.
var protocols = map[string]string{
	"admit":           "admission",
	"schema/runstate": "the run state machine",
	"queue/eventlog":  "the event-log fence",
	"agent/gpu":       "the GPU lease and swap",
	"agent/outbox":    "the outbox and resume",
}

// moduleRoot is the directory holding go.mod, above the test's working directory.
func moduleRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	require.NoError(t, err)
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		require.NotEqual(t, dir, parent, "no go.mod above the test")
		dir = parent
	}
}

func scanRepo(t *testing.T) *Repo {
	t.Helper()
	r, err := Scan(moduleRoot(t))
	require.NoError(t, err)
	require.Greater(t, len(r.Packages), 50, "the scan found the repository's packages")
	return r
}

// TestEveryPackageThatStartsGoroutinesChecksForLeaks keeps "goleak in every package that
// starts goroutines" true as packages are added.
func TestEveryPackageThatStartsGoroutinesChecksForLeaks(t *testing.T) {
	r := scanRepo(t)
	checked := 0
	for _, p := range r.Packages {
		if len(p.Starts) > 0 && p.LeakCheck {
			checked++
		}
	}
	t.Logf("%d packages start goroutines and check for leaks", checked)
	require.Greater(t, checked, 10)
	require.Empty(t, r.LeakGaps())
}

// TestDocsNameOnlyTestsThatExist: a doc.go that says "proven by TestX" must not outlive
// TestX's rename or removal.
func TestDocsNameOnlyTestsThatExist(t *testing.T) {
	r := scanRepo(t)
	docs := 0
	for _, p := range r.Packages {
		if p.DocGoFound {
			docs++
		}
	}
	require.GreaterOrEqual(t, docs, len(protocols))
	require.Empty(t, r.MissingNamedTests())
}

// TestProtocolInvariantsNameTheirTests: each protocol's doc.go has an Invariants section
// and every invariant in it names a test.
func TestProtocolInvariantsNameTheirTests(t *testing.T) {
	r := scanRepo(t)
	for dir, what := range protocols {
		p := r.Packages[dir]
		require.NotNil(t, p, "%s (%s)", dir, what)
		items := Invariants(p.Doc)
		t.Logf("%s (%s): %d invariants", dir, what, len(items))
		require.Empty(t, r.UnprovenInvariants(dir), "%s (%s)", dir, what)
	}
}

// The checks themselves, on a small fixture repository: each can fail.
func TestChecksFindTheirGaps(t *testing.T) {
	r, err := Scan(filepath.Join("testdata", "repo"))
	require.NoError(t, err)

	require.ElementsMatch(t, []string{
		"leaky starts goroutines (leaky.go:3 go) but its tests have no TestMain with goleak.VerifyTestMain (or goleak.Find)",
		"notests starts goroutines (notests.go:5 time.AfterFunc) but it has no tests, so nothing checks for leaks",
	}, r.LeakGaps(), "clean has goleak; cmd is a command; helpertest is a test helper")
	require.True(t, r.Packages["clean"].LeakCheck)

	require.Equal(t, []string{
		"proto/doc.go names TestNone*, which no test file defines",
		"proto/doc.go names TestMissing, which no test file defines",
	}, r.MissingNamedTests())

	items := Invariants(r.Packages["proto"].Doc)
	require.Len(t, items, 3, "the Limits bullet is not an invariant")
	require.Contains(t, items[1], "BenchmarkPresent", "a continuation line belongs to its item")
	require.Equal(t, []string{`proto/doc.go: invariant names no test: "3. Proven by nothing at all."`}, r.UnprovenInvariants("proto"))
	require.Equal(t, []string{"leaky has no doc.go"}, r.UnprovenInvariants("leaky"))
}
