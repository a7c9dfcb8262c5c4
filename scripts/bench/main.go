// Command bench is `make bench`: every benchmark of the repository, each at the benchtime
// chosen for it in plan.go (from what one iteration costs), one `go test -bench`
// invocation at a time. It prints each benchmark's result line (its figure beside the
// floor measured in the same run), skip reasons and failures, then a summary of the
// headline figures beside their floors and goals, and writes the same to build/bench.txt;
// everything the benchmarks printed (the components' logs too) goes to build/bench.log.
// It exits non-zero when a benchmark fails or prints nothing without saying why.
//
// A benchmark found in the tree but not named in plan.go runs once and the summary says
// so; -run REGEXP runs only the benchmarks whose names match (`make bench BENCH=Gateway`).
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

func main() {
	only := flag.String("run", "", "run only the benchmarks whose names match this regular expression")
	out := flag.String("out", "build/bench.txt", "the report: results, skips, failures and the summary")
	raw := flag.String("log", "build/bench.log", "everything the benchmarks printed")
	list := flag.Bool("list", false, "print the plan (benchmark, benchtime, why) and exit")
	flag.Parse()
	if err := run(*only, *out, *raw, *list); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// outcome is what one invocation produced.
type outcome struct {
	entry   Entry
	elapsed time.Duration
	err     error
	results []Result
	skipped map[string]string // benchmark → reason
	failed  map[string]bool
	tail    []string // the last lines of its raw output that are not component logs
}

func run(only, outPath, rawPath string, list bool) error {
	root, err := os.Getwd()
	if err != nil {
		return err
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		return fmt.Errorf("run from the module root (make bench does): %w", err)
	}
	found, err := discover(root)
	if err != nil {
		return fmt.Errorf("listing benchmarks: %w", err)
	}
	entries, missing, stale := complete(Plan, found)
	if only != "" {
		re, err := regexp.Compile(only)
		if err != nil {
			return fmt.Errorf("-run: %w", err)
		}
		entries = filterEntries(entries, re)
	}
	if list {
		for _, e := range entries {
			fmt.Printf("%-22s %-40s %-7s %s\n", e.Pkg, e.Bench, e.Benchtime, e.Note)
		}
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(outPath), 0o755); err != nil {
		return err
	}
	report, err := os.Create(outPath)
	if err != nil {
		return err
	}
	defer report.Close()
	rawLog, err := os.Create(rawPath)
	if err != nil {
		return err
	}
	defer rawLog.Close()
	w := io.MultiWriter(os.Stdout, report)
	start := time.Now()
	fmt.Fprintf(w, "make bench: %d invocations, started %s; uptime: %s\n", len(entries), start.UTC().Format(time.RFC3339), loadAvg())
	for _, f := range missing {
		fmt.Fprintf(w, "note: %s %s has no benchtime in scripts/bench/plan.go: it runs once (-benchtime %s)\n", f.Pkg, f.Name, DefaultBenchtime)
	}
	for _, f := range stale {
		fmt.Fprintf(w, "note: scripts/bench/plan.go names %s %s, which is not in the tree\n", f.Pkg, f.Name)
	}
	var outs []outcome
	for _, e := range entries {
		fmt.Fprintf(w, "\n== %s %s -benchtime %s  (%s)\n", e.Pkg, e.Bench, e.Benchtime, e.Note)
		o := invoke(e, w, rawLog)
		outs = append(outs, o)
		if o.err != nil {
			fmt.Fprintf(w, "!! %s: %v after %s; the last lines it printed (all of them in %s):\n", e.Pkg, o.err, o.elapsed.Round(time.Second), rawPath)
			for _, l := range o.tail {
				fmt.Fprintln(w, "   ", l)
			}
		}
	}
	bad := summarize(w, outs, time.Since(start))
	fmt.Fprintf(w, "\nreport: %s; everything the benchmarks printed: %s\n", outPath, rawPath)
	if bad > 0 {
		return fmt.Errorf("%d benchmark(s) failed or printed no figures (see the summary)", bad)
	}
	return nil
}

func filterEntries(entries []Entry, re *regexp.Regexp) []Entry {
	var out []Entry
	for _, e := range entries {
		if re.MatchString(e.Bench) {
			out = append(out, e)
		}
	}
	return out
}

// invoke runs one entry's `go test`, printing the lines keep selects to w and every line
// to rawLog.
func invoke(e Entry, w, rawLog io.Writer) outcome {
	o := outcome{entry: e, skipped: map[string]string{}, failed: map[string]bool{}}
	goBin := os.Getenv("GO")
	if goBin == "" {
		goBin = "go"
	}
	timeout := e.Timeout
	if timeout == "" {
		timeout = "5m" // 3–10× what any of them takes: a hung one cannot hold make bench for long
	}
	args := []string{"test", "-v", "-run", "^$", "-bench", "^" + e.Bench + "$",
		"-benchtime", e.Benchtime, "-timeout", timeout, e.Pkg}
	cmd := exec.Command(goBin, args...)
	cmd.Env = append(os.Environ(), e.Env...)
	fmt.Fprintf(rawLog, "\n$ %s %s %s\n", strings.Join(e.Env, " "), goBin, strings.Join(args, " "))
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	t0 := time.Now()
	if err := cmd.Start(); err != nil {
		o.err = err
		return o
	}
	done := make(chan error, 1)
	go func() {
		err := cmd.Wait()
		pw.Close()
		done <- err
	}()
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 64<<10), 16<<20)
	var lastLog string
	for sc.Scan() {
		line := sc.Text()
		fmt.Fprintln(rawLog, line)
		if !noise(line) {
			o.tail = append(o.tail, line)
			if len(o.tail) > 40 {
				o.tail = o.tail[1:]
			}
		}
		if logRe.MatchString(line) {
			lastLog = strings.TrimSpace(line)
		}
		if r, ok := parseResult(line); ok {
			o.results = append(o.results, r)
		} else if m := skipRe.FindStringSubmatch(line); m != nil {
			o.skipped[topName(m[1])] = lastLog
		} else if m := failRe.FindStringSubmatch(line); m != nil {
			o.failed[topName(m[1])] = true
		}
		if keep(line) {
			fmt.Fprintln(w, line)
		}
	}
	if err := sc.Err(); err != nil {
		_, _ = io.Copy(io.Discard, pr) // let the child finish writing
		o.err = err
	}
	if err := <-done; err != nil && o.err == nil {
		o.err = err
	}
	o.elapsed = time.Since(t0)
	fmt.Fprintf(w, "   (%s)\n", o.elapsed.Round(100*time.Millisecond))
	return o
}

// topName is a benchmark's top-level name: "BenchmarkX/sub-2" → "BenchmarkX".
func topName(s string) string {
	if i := strings.IndexByte(s, '/'); i >= 0 {
		s = s[:i]
	}
	if i := strings.LastIndexByte(s, '-'); i > 0 && strings.Trim(s[i+1:], "0123456789") == "" {
		s = s[:i]
	}
	return s
}

// summarize prints, per benchmark, its headline figures beside their floors and goals (or
// why it has none) and returns how many failed or printed nothing.
func summarize(w io.Writer, outs []outcome, wall time.Duration) int {
	bad := 0
	fmt.Fprintf(w, "\n== summary: %d benchmarks in %s; uptime: %s\n", len(outs), wall.Round(time.Second), loadAvg())
	for _, o := range outs {
		lines, ok := verdict(o)
		if !ok {
			bad++
		}
		fmt.Fprintf(w, "%-40s %6s %5s  %s\n", o.entry.Bench, o.entry.Benchtime, o.elapsed.Round(time.Second), lines[0])
		for _, l := range lines[1:] {
			fmt.Fprintf(w, "%54s  %s\n", "", l)
		}
	}
	return bad
}

// verdict is what the summary says of one benchmark; ok is false when it failed or
// printed no figures without saying why.
func verdict(o outcome) (lines []string, ok bool) {
	b := o.entry.Bench
	var rs []Result
	for _, r := range o.results {
		if topName(r.Name) == b {
			rs = append(rs, r)
		}
	}
	switch {
	case o.failed[b]:
		return []string{"FAILED (its output is above)"}, false
	case len(rs) == 0 && o.skipped[b] != "":
		return []string{"skipped: " + o.skipped[b]}, true
	case len(rs) == 0 && o.err != nil:
		return []string{"printed no figures: " + o.err.Error()}, false
	case len(rs) == 0:
		return []string{"printed no figures"}, false
	}
	lines = figureLines(o.entry.Figures, rs)
	if o.err != nil {
		return append(lines, "but go test failed: "+o.err.Error()), false
	}
	return lines, true
}

// figureLines formats the figures of a benchmark's results, one a line (prefixed by the
// sub-benchmark's name when there is one), or ns/op per result when the plan names none.
func figureLines(figs []Figure, rs []Result) []string {
	var lines []string
	seen := map[string]bool{}
	for _, r := range rs {
		prefix := ""
		if i := strings.IndexByte(r.Name, '/'); i >= 0 {
			prefix = r.Name[i+1:] + ": "
		}
		if len(figs) == 0 {
			lines = append(lines, fmt.Sprintf("%s%s ns/op", prefix, num(r.Metrics["ns/op"])))
		}
		for _, f := range figs {
			v, ok := r.Metrics[f.Metric]
			if !ok {
				continue
			}
			seen[f.Metric] = true
			l := fmt.Sprintf("%s%s %s", prefix, f.Metric, num(v))
			if fv, ok := r.Metrics[f.Floor]; ok && f.Floor != "" {
				l += fmt.Sprintf(" beside %s %s", f.Floor, num(fv))
			}
			if f.Goal != 0 {
				verdict := "met"
				if v > f.Goal {
					verdict = "MISSED"
				}
				l += fmt.Sprintf(" (goal ≤ %s: %s)", num(f.Goal), verdict)
			}
			lines = append(lines, l)
		}
	}
	var absent []string
	for _, f := range figs {
		if !seen[f.Metric] {
			absent = append(absent, f.Metric)
		}
	}
	if len(absent) > 0 {
		lines = append(lines, "not reported (renamed? see scripts/bench/plan.go): "+strings.Join(absent, ", "))
	}
	if len(lines) == 0 {
		lines = []string{"(no figures)"}
	}
	return lines
}

func num(v float64) string {
	switch {
	case v == float64(int64(v)) && v < 1e9 && v > -1e9:
		return fmt.Sprintf("%d", int64(v))
	case v >= 100 || v <= -100:
		return fmt.Sprintf("%.0f", v)
	default:
		return fmt.Sprintf("%.3g", v)
	}
}

// loadAvg is the machine's load average, which says how noisy the figures are.
func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return "load average " + strings.Join(f[:3], " ")
}
