package main

import (
	"regexp"
	"strconv"
	"strings"
)

// Result is one benchmark's result line: its name without the -GOMAXPROCS suffix, the
// iterations and every reported metric by unit ("ns/op", "median-ratio", ...).
type Result struct {
	Name    string
	N       int
	Metrics map[string]float64
	Order   []string // the units in the order printed
	Line    string
}

// resultRe finds a result line anywhere in a line (another process's log may precede it
// on the same line): "BenchmarkX/sub-2   \t  300\t  123 ns/op\t  1.2 median-ratio".
var resultRe = regexp.MustCompile(`(Benchmark\S+?)(-\d+)?\s+(\d+)\s+(\S+ ns/op.*)$`)

// parseResult reads a result line; ok is false for any other line.
func parseResult(line string) (Result, bool) {
	m := resultRe.FindStringSubmatch(line)
	if m == nil {
		return Result{}, false
	}
	n, err := strconv.Atoi(m[3])
	if err != nil {
		return Result{}, false
	}
	r := Result{Name: m[1], N: n, Metrics: map[string]float64{}, Line: strings.TrimSpace(line[strings.Index(line, m[1]):])}
	f := strings.Fields(m[4])
	for i := 0; i+1 < len(f); i += 2 {
		v, err := strconv.ParseFloat(f[i], 64)
		if err != nil {
			return Result{}, false
		}
		r.Metrics[f[i+1]] = v
		r.Order = append(r.Order, f[i+1])
	}
	return r, true
}

var (
	skipRe = regexp.MustCompile(`^--- SKIP: (Benchmark\S+)`)
	failRe = regexp.MustCompile(`^--- FAIL: (Benchmark\S+)`)
	// A log line of testing (t.Log, a skip or fatal reason): "    file_test.go:12: ...".
	logRe = regexp.MustCompile(`^ {4}\S+\.go:\d+: `)
	// A compiler's error: "agent/x.go:12:3: undefined: y".
	buildErrRe = regexp.MustCompile(`^\S+\.go:\d+:\d+: `)
)

// keep says whether a line of `go test -v -bench` output belongs in the clean report:
// results, skip and failure lines with their reasons, the benchmarks' own log lines, the
// package verdicts and build errors. The components' logs (JSON, log.Printf) stay in the
// raw log only.
func keep(line string) bool {
	switch {
	case resultRe.MatchString(line), logRe.MatchString(line), buildErrRe.MatchString(line):
		return true
	case strings.HasPrefix(line, "--- "), strings.HasPrefix(line, "pkg: "), strings.HasPrefix(line, "cpu: "):
		return true
	case line == "PASS", line == "FAIL", strings.HasPrefix(line, "ok  "), strings.HasPrefix(line, "FAIL\t"):
		return true
	case strings.HasPrefix(line, "# "), strings.HasPrefix(line, "panic: "), strings.HasPrefix(line, "fatal error: "):
		return true
	case strings.HasPrefix(line, "        ") && !strings.HasPrefix(strings.TrimSpace(line), "{"):
		return true // a continuation of a multi-line log message
	}
	return false
}

// noise is a line the fallback tail of a failed invocation leaves out: component logs.
func noise(line string) bool {
	t := strings.TrimSpace(line)
	return strings.HasPrefix(t, "{") || t == ""
}
