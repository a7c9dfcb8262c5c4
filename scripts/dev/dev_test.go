package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestWebChatInARealBrowser brings the make-dev stack up on free ports and runs the web
// chat's unit tests (node's test runner) and browser tests (playwright-core driving
// Debian's Chromium) against it. The browser test files are split between
// PA_WEB_E2E_STACKS stacks (default 2), each with its own Redis, emulator, agent, devices
// and Hermes, that run side by side: a file still has its stack to itself apart from the
// files before and after it on the same stack, which is what its timing checks (the
// System panel, function executions counted while watching, "within a second") assume.
func TestWebChatInARealBrowser(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	for _, need := range []string{filepath.Join(root, "web", "node_modules", "playwright-core"), chromium()} {
		_, err := os.Stat(need)
		require.NoError(t, err, "missing %s: run `make deps` (npm packages, Debian chromium)", need)
	}
	// PA_WEB_E2E names browser test files to run instead of all (while working on one).
	files := strings.Fields(os.Getenv("PA_WEB_E2E"))
	if len(files) == 0 {
		all, err := filepath.Glob(filepath.Join(root, "web", "test", "e2e", "*.test.js"))
		require.NoError(t, err)
		require.NotEmpty(t, all)
		for _, f := range all {
			files = append(files, filepath.Join("test", "e2e", filepath.Base(f)))
		}
	}
	n := 2
	if v := os.Getenv("PA_WEB_E2E_STACKS"); v != "" {
		n, err = strconv.Atoi(v)
		require.NoError(t, err, "PA_WEB_E2E_STACKS")
		require.Positive(t, n, "PA_WEB_E2E_STACKS")
	}
	groups := splitE2E(files, n)

	// Each stack's log goes to a file; a failure prints its warnings and errors (a browser
	// test that times out says nothing of what the server did).
	// PA_STACK_LOG keeps the first stack's at that path, the others' beside it (-2, -3, …),
	// to read what the stacks warned of in a run that passed.
	stacks := make([]*Stack, len(groups))
	logs := make([]string, len(groups))
	errs := make([]error, len(groups))
	var wg sync.WaitGroup
	for i := range groups {
		logs[i] = filepath.Join(t.TempDir(), "stack.log")
		if p := os.Getenv("PA_STACK_LOG"); p != "" {
			logs[i] = p
			if i > 0 {
				logs[i] = p + "-" + strconv.Itoa(i+1)
			}
		}
		logFile, err := os.Create(logs[i])
		require.NoError(t, err)
		t.Cleanup(func() { _ = logFile.Close() })
		dataDir := t.TempDir()
		wg.Add(1)
		go func() {
			defer wg.Done()
			// As make dev: research and coding on the real Hermes, one per member (the approval
			// steps ask through its own approval patterns); with CI=true it must be installed.
			stacks[i], errs[i] = Start(context.Background(), Config{Root: root, DataDir: dataDir, TokenDelay: 15 * time.Millisecond, Hermes: HermesMembers,
				Log: slog.New(slog.NewTextHandler(logFile, &slog.HandlerOptions{Level: slog.LevelInfo}))})
		}()
	}
	wg.Wait()
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, p := range logs {
			b, _ := os.ReadFile(p)
			var keep []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "level=WARN") || strings.Contains(l, "level=ERROR") {
					keep = append(keep, l)
				}
			}
			if len(keep) > 300 {
				keep = keep[len(keep)-300:]
			}
			t.Logf("the stack's warnings and errors (%s):\n%s", p, strings.Join(keep, "\n"))
		}
	})
	for _, s := range stacks {
		if s != nil {
			defer s.Close()
		}
	}
	for _, err := range errs {
		require.NoError(t, err)
	}
	t.Logf("research and coding run on %s", stacks[0].HermesInfo)
	if os.Getenv("CI") == "true" {
		for _, s := range stacks {
			require.NotEmpty(t, s.HermesHomes, "the browser suite runs on the real Hermes in CI: %s", s.HermesInfo)
		}
	}

	run := func(s *Stack, args ...string) error {
		cmd := exec.Command("node", args...)
		cmd.Dir = filepath.Join(root, "web")
		// The product is closed by default: the browser tests admit their fresh accounts
		// through the dev administrator.
		cmd.Env = append(os.Environ(), "PA_BASE_URL="+s.URL, "PA_CHROMIUM="+chromium(), "PA_ADMIN_EMAIL="+s.AdminEmail, "PA_ADMIN_PASS="+s.AdminPass)
		start := time.Now()
		out, err := cmd.CombinedOutput()
		t.Logf("node %v on %s (%s):\n%s", args, s.URL, time.Since(start).Round(time.Second), out)
		if err != nil {
			// The failures again, last: a CI excerpt of the long output may leave them out.
			return fmt.Errorf("%w\n%s", err, failedTAP(string(out)))
		}
		return nil
	}
	if err := run(stacks[0], "--test", "test/unit/"); err != nil {
		t.Fatalf("web unit tests: %v", err)
	}
	for i, g := range groups {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = run(stacks[i], append([]string{"--test", "--test-concurrency=1"}, g...)...)
		}()
	}
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("browser tests %v: %v", groups[i], err)
		}
	}
}

// failedTAP is what node's test runner printed of its failed tests ("not ok" and the
// details under it, up to the next test), at most 60 lines each.
func failedTAP(out string) string {
	var b strings.Builder
	lines := strings.Split(out, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if !strings.HasPrefix(l, "not ok ") {
			continue
		}
		b.WriteString("failed: " + strings.TrimPrefix(l, "not ok ") + "\n")
		for j := i + 1; j < len(lines) && j <= i+60; j++ {
			n := strings.TrimSpace(lines[j])
			if strings.HasPrefix(n, "ok ") || strings.HasPrefix(n, "not ok ") || strings.HasPrefix(n, "# Subtest:") {
				break
			}
			b.WriteString("  " + lines[j] + "\n")
		}
	}
	if b.Len() == 0 {
		return "(no \"not ok\" line: the runner itself failed)"
	}
	return b.String()
}

// e2eSeconds is about how long each browser test file takes (runs on the loaded 2-core
// machine): splitE2E balances the stacks with it. A file not listed counts as 15 s.
var e2eSeconds = map[string]float64{
	"sse.test.js": 120, "bugs.test.js": 85, "chat.test.js": 52, "states.test.js": 48, "habits.test.js": 36,
	"stream.test.js": 31, "livepanel.test.js": 29, "attach.test.js": 29, "demo.test.js": 27, "admin.test.js": 26,
	"delegate.test.js": 19, "session.test.js": 13, "invite.test.js": 13, "live.test.js": 10, "progress.test.js": 3,
	"expired.test.js": 3, "usage.test.js": 2,
}

// splitE2E deals the files into at most n groups of about equal time (the longest first,
// each to the group with the least so far); each group keeps the files' own order.
func splitE2E(files []string, n int) [][]string {
	n = min(n, len(files))
	if n <= 1 {
		return [][]string{files}
	}
	secs := func(f string) float64 {
		if s, ok := e2eSeconds[filepath.Base(f)]; ok {
			return s
		}
		return 15
	}
	order := slices.Clone(files)
	slices.SortStableFunc(order, func(a, b string) int { return cmp.Compare(secs(b), secs(a)) })
	load := make([]float64, n)
	in := map[string]int{}
	for _, f := range order {
		g := slices.Index(load, slices.Min(load))
		in[f] = g
		load[g] += secs(f)
	}
	groups := make([][]string, n)
	for _, f := range files {
		groups[in[f]] = append(groups[in[f]], f)
	}
	return groups
}

func chromium() string {
	if p := os.Getenv("PA_CHROMIUM"); p != "" {
		return p
	}
	return "/usr/bin/chromium"
}

// BenchmarkSendToFirstCharacter: pressing Send → the first streamed character on screen,
// as a ratio to the scripted backend's own time to first token, in the same run.
func BenchmarkSendToFirstCharacter(b *testing.B) {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	s, err := Start(context.Background(), Config{Root: root, DataDir: b.TempDir(), TokenDelay: 10 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	cmd := exec.Command("node", "test/bench/first-char.mjs")
	cmd.Dir = filepath.Join(root, "web")
	cmd.Env = append(os.Environ(), "PA_BASE_URL="+s.URL, "PA_CHROMIUM="+chromium(), "PA_BENCH_N="+strconv.Itoa(max(b.N, 3)),
		"PA_ADMIN_EMAIL="+s.AdminEmail, "PA_ADMIN_PASS="+s.AdminPass, "PA_MODEL_KEY="+s.Model.APIKey)
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	var r struct{ UIMs, BackendMs float64 }
	if err := json.Unmarshal(bytes.TrimSpace(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:]), &r); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	b.ReportMetric(r.UIMs, "send-to-first-char-ms")
	b.ReportMetric(r.BackendMs, "backend-first-token-ms")
	b.ReportMetric(r.UIMs/r.BackendMs, "ratio-to-floor")
	// The goal (issue 29): at most the model's own first-token delay + 30 ms.
	b.ReportMetric(r.UIMs-r.BackendMs, "over-floor-ms")
	// The medians of its parts (web/test/bench/first-char.mjs), for the record.
	if lines := bytes.Split(bytes.TrimSpace(out), []byte("\n")); len(lines) > 1 {
		b.Log(string(lines[len(lines)-2]))
	}
}

// BenchmarkStreamingRender: main-thread time to render a streamed 20,000-token Markdown
// answer in Chromium, as a ratio to a plain-text floor measured in the same run
// (web/test/bench/render.mjs; one pass, whatever b.N is: a pass takes about a minute).
func BenchmarkStreamingRender(b *testing.B) {
	root, _ := filepath.Abs(filepath.Join("..", ".."))
	s, err := Start(context.Background(), Config{Root: root, DataDir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	cmd := exec.Command("node", "test/bench/render.mjs")
	cmd.Dir = filepath.Join(root, "web")
	cmd.Env = append(os.Environ(), "PA_BASE_URL="+s.URL, "PA_CHROMIUM="+chromium(), "PA_BENCH_RUNS=1")
	out, err := cmd.Output()
	if err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	var r struct{ StreamMs, FinishMs, PlainMs, Naive2kMs, Stream2kMs, Ratio float64 }
	if err := json.Unmarshal(bytes.TrimSpace(out[bytes.LastIndexByte(bytes.TrimSpace(out), '\n')+1:]), &r); err != nil {
		b.Fatalf("%v: %s", err, out)
	}
	b.ReportMetric(r.StreamMs+r.FinishMs, "markdown-stream-ms")
	b.ReportMetric(r.PlainMs, "plain-text-floor-ms")
	b.ReportMetric(r.Ratio, "ratio-to-floor")
	b.ReportMetric(r.Naive2kMs/r.Stream2kMs, "old-per-frame-rerender-x-at-2k")
}

// TestSplitE2E: every browser test file runs once, on one stack, in its own order there,
// and the stacks' shares of the time are close.
func TestSplitE2E(t *testing.T) {
	files := []string{"test/e2e/admin.test.js", "test/e2e/bugs.test.js", "test/e2e/chat.test.js", "test/e2e/new.test.js",
		"test/e2e/sse.test.js", "test/e2e/states.test.js", "test/e2e/usage.test.js"}
	require.Equal(t, [][]string{files}, splitE2E(files, 1))
	require.Equal(t, [][]string{{"a.test.js"}}, splitE2E([]string{"a.test.js"}, 3))
	g := splitE2E(files, 2)
	require.Len(t, g, 2)
	require.ElementsMatch(t, files, append(slices.Clone(g[0]), g[1]...))
	sum := func(fs []string) (s float64) {
		for _, f := range fs {
			if v, ok := e2eSeconds[filepath.Base(f)]; ok {
				s += v
			} else {
				s += 15
			}
		}
		return s
	}
	for _, fs := range g {
		require.True(t, slices.IsSortedFunc(fs, strings.Compare), "a stack keeps the files' order: %v", fs)
	}
	require.InDelta(t, sum(g[0]), sum(g[1]), 40, "%v", g)
}

// TestFailedTAPNamesTheFailures: a failed browser run ends with the failed tests' names and
// details, whatever the length of the output before.
func TestFailedTAPNamesTheFailures(t *testing.T) {
	out := `TAP version 13
# Subtest: fine
ok 1 - fine
  ---
  duration_ms: 3
  ...
# Subtest: broken
not ok 2 - broken
  ---
  duration_ms: 4
  error: 'the panel changed 1200 ms after the admission'
  ...
# Subtest: later
ok 3 - later
1..3`
	got := failedTAP(out)
	require.Contains(t, got, "failed: 2 - broken\n")
	require.Contains(t, got, "the panel changed 1200 ms after the admission")
	require.NotContains(t, got, "fine")
	require.NotContains(t, got, "later")
	require.Contains(t, failedTAP("node: bad option"), "runner itself failed")
}
