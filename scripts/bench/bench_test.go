package main

import (
	"errors"
	"os"
	"path/filepath"
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestParseResult(t *testing.T) {
	r, ok := parseResult("BenchmarkUniqueWrites/mongodb/docs=1000-2         \t    2000\t    119371 ns/op\t        25.37 create-µs\t         7.201 delete-µs")
	require.True(t, ok)
	require.Equal(t, "BenchmarkUniqueWrites/mongodb/docs=1000", r.Name)
	require.Equal(t, 2000, r.N)
	require.Equal(t, map[string]float64{"ns/op": 119371, "create-µs": 25.37, "delete-µs": 7.201}, r.Metrics)
	require.Equal(t, []string{"ns/op", "create-µs", "delete-µs"}, r.Order)

	// A component's log line written just before the result, on the same line.
	r, ok = parseResult(`{"level":"INFO","msg":"request"}BenchmarkSwap-2   	     100	  57537867 ns/op	         3.389 overhead-ms	-0.23 added-ms`)
	require.True(t, ok)
	require.Equal(t, "BenchmarkSwap", r.Name)
	require.Equal(t, -0.23, r.Metrics["added-ms"])
	require.Equal(t, "BenchmarkSwap-2   	     100	  57537867 ns/op	         3.389 overhead-ms	-0.23 added-ms", r.Line)

	for _, line := range []string{"BenchmarkSwap", "BenchmarkSwap-2   \t{\"time\":1}", "--- SKIP: BenchmarkStart", "ok  \tx\t1.2s", "BenchmarkX-2 \t 3\t 12 ns/op\t abc unit"} {
		_, ok := parseResult(line)
		require.False(t, ok, line)
	}
}

func TestKeep(t *testing.T) {
	for _, line := range []string{
		"BenchmarkSwap-2   	     100	  57537867 ns/op	         3.389 overhead-ms",
		"--- SKIP: BenchmarkGatewayLlamaServer",
		"--- FAIL: BenchmarkFiftyConcurrentRuns-2",
		"    llama_bench_test.go:49: llama-server not available",
		"        a second line of that message",
		"pkg: privateassistant/agent/gpu", "PASS", "FAIL", "ok  \tprivateassistant/agent/gpu\t3.1s", "FAIL\tprivateassistant/agent/gpu\t3.1s",
		"# privateassistant/agent/gpu", "agent/gpu/x.go:12:3: undefined: y", "panic: boom",
	} {
		require.True(t, keep(line), line)
	}
	for _, line := range []string{
		`{"time":"2026-12-02T00:15:20Z","level":"INFO","msg":"request"}`,
		`        {"nested":"json"}`,
		"2026/12/02 00:15:25 INFO agent started component=agent",
		"BenchmarkSwap", "goos: linux", "",
	} {
		require.False(t, keep(line), line)
	}
}

func TestTopName(t *testing.T) {
	require.Equal(t, "BenchmarkSwap", topName("BenchmarkSwap-2"))
	require.Equal(t, "BenchmarkSwap", topName("BenchmarkSwap"))
	require.Equal(t, "BenchmarkUniqueWrites", topName("BenchmarkUniqueWrites/mongodb/docs=1000-2"))
	require.Equal(t, "BenchmarkA-b", topName("BenchmarkA-b"))
}

func write(t *testing.T, path, text string) {
	t.Helper()
	require.NoError(t, os.MkdirAll(filepath.Dir(path), 0o755))
	require.NoError(t, os.WriteFile(path, []byte(text), 0o644))
}

func TestDiscoverAndComplete(t *testing.T) {
	root := t.TempDir()
	write(t, filepath.Join(root, "go.mod"), "module x\n")
	write(t, filepath.Join(root, "a", "a_test.go"), `package a
import "testing"
func BenchmarkOne(b *testing.B) {}
func BenchmarkTwo(b *testing.B) {}
func Benchmarklower(b *testing.B) {}
func BenchmarkHelper(b *testing.B, n int) {}
func TestOne(t *testing.T) {}
type T struct{}
func (T) BenchmarkMethod(b *testing.B) {}
`)
	write(t, filepath.Join(root, "a", "a.go"), "package a\nfunc BenchmarkNotATest(b *int) {}\n")
	write(t, filepath.Join(root, "a", "testdata", "x_test.go"), "package x\nimport \"testing\"\nfunc BenchmarkData(b *testing.B) {}\n")
	write(t, filepath.Join(root, ".cache", "y_test.go"), "package y\nimport \"testing\"\nfunc BenchmarkCache(b *testing.B) {}\n")
	write(t, filepath.Join(root, "b_test.go"), "package x\nimport \"testing\"\nfunc BenchmarkRoot(b *testing.B) {}\n")

	found, err := discover(root)
	require.NoError(t, err)
	require.Equal(t, []Found{{".", "BenchmarkRoot"}, {"./a", "BenchmarkOne"}, {"./a", "BenchmarkTwo"}}, found)

	plan := []Entry{{Pkg: "./a", Bench: "BenchmarkOne", Benchtime: "300x"}, {Pkg: "./a", Bench: "BenchmarkGone", Benchtime: "1x"}}
	all, missing, stale := complete(plan, found)
	require.Equal(t, []Found{{".", "BenchmarkRoot"}, {"./a", "BenchmarkTwo"}}, missing)
	require.Equal(t, []Found{{"./a", "BenchmarkGone"}}, stale)
	require.Len(t, all, 4)
	require.Equal(t, Entry{Pkg: ".", Bench: "BenchmarkRoot", Benchtime: DefaultBenchtime, Note: "not in scripts/bench/plan.go: run once"}, all[2])

	only := filterEntries(all, regexp.MustCompile("Two|Gone"))
	require.Len(t, only, 2)
	require.Equal(t, "BenchmarkGone", only[0].Bench)
	require.Equal(t, "BenchmarkTwo", only[1].Bench)
}

// The plan names every benchmark in this repository, in the package that holds it.
func TestPlanCoversTheRepository(t *testing.T) {
	found, err := discover(filepath.Join("..", ".."))
	require.NoError(t, err)
	require.NotEmpty(t, found)
	_, missing, stale := complete(Plan, found)
	require.Empty(t, missing, "give these a benchtime in scripts/bench/plan.go")
	require.Empty(t, stale, "plan.go names benchmarks that are gone")
}

func TestFigureLines(t *testing.T) {
	figs := []Figure{{Metric: "median-ratio", Goal: 1.2}, {Metric: "admit-µs/op", Floor: "floor-µs/op"}, {Metric: "gone"}}
	rs := []Result{{Name: "BenchmarkWarmAdmission", Metrics: map[string]float64{"median-ratio": 1.24, "admit-µs/op": 1361, "floor-µs/op": 1212.4}}}
	require.Equal(t, []string{
		"median-ratio 1.24 (goal ≤ 1.2: MISSED)",
		"admit-µs/op 1361 beside floor-µs/op 1212",
		"not reported (renamed? see scripts/bench/plan.go): gone",
	}, figureLines(figs, rs))

	rs = []Result{{Name: "BenchmarkVerify/hit", Metrics: map[string]float64{"ns/op": 216.9}}}
	require.Equal(t, []string{"hit: 217 ns/op"}, figureLines(nil, rs))
	require.Equal(t, []string{"median-ratio 1.1 (goal ≤ 1.2: met)"},
		figureLines(figs[:1], []Result{{Name: "BenchmarkX", Metrics: map[string]float64{"median-ratio": 1.1}}}))
}

func TestVerdict(t *testing.T) {
	e := Entry{Bench: "BenchmarkX", Figures: []Figure{{Metric: "ratio", Goal: 1.2}}}
	res := []Result{{Name: "BenchmarkX", Metrics: map[string]float64{"ratio": 1.1}}}
	lines, ok := verdict(outcome{entry: e, results: res})
	require.True(t, ok)
	require.Equal(t, []string{"ratio 1.1 (goal ≤ 1.2: met)"}, lines)

	lines, ok = verdict(outcome{entry: e, skipped: map[string]string{"BenchmarkX": "x_test.go:3: real Hermes not installed"}})
	require.True(t, ok, "a skip says why: not a failure")
	require.Equal(t, []string{"skipped: x_test.go:3: real Hermes not installed"}, lines)

	_, ok = verdict(outcome{entry: e, failed: map[string]bool{"BenchmarkX": true}, results: res})
	require.False(t, ok)
	lines, ok = verdict(outcome{entry: e})
	require.False(t, ok, "no figures and no reason")
	require.Equal(t, []string{"printed no figures"}, lines)
	lines, ok = verdict(outcome{entry: e, results: res, err: errors.New("exit status 1")})
	require.False(t, ok)
	require.Equal(t, "but go test failed: exit status 1", lines[1])
	// Another benchmark's figures are not this one's.
	_, ok = verdict(outcome{entry: e, results: []Result{{Name: "BenchmarkXY", Metrics: map[string]float64{"ratio": 1}}}})
	require.False(t, ok)
}
