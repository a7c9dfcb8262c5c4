package functionhost_test

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-runtimes/types-for-go/v4/openruntimes"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionhost"
)

func TestWorkersFollowAppwritesDispatch(t *testing.T) {
	// app/http.php: cores × _APP_WORKER_PER_CORE workers; those numbered ≥ 80 % take
	// function domains (contracts/appwrite.md §9: 3 / 5 / 10 / 20 on 2 / 4 / 8 / 16 cores).
	for cores, want := range map[int]int{2: 3, 4: 5, 8: 10, 16: 20} {
		require.Equal(t, want, functionhost.WorkersFor(cores, 6, 80), "%d cores", cores)
	}
	require.Equal(t, functionhost.DefaultWorkers, functionhost.WorkersFor(4, 6, 80))
	require.Equal(t, 1, functionhost.WorkersFor(1, 1, 100), "at least one")
}

// TestSixLongPollsStallAnAdmission is today's failure mode on a host shaped like a
// 4-core Appwrite 1.9.6 (5 function workers, the 30 s cap counted from arrival): six
// browser tabs' 20 s long-polls hold every worker, and an admission that arrives next
// waits behind one of them — past the web's 12 s request timeout. This is why nothing
// that waits may be a synchronous execution (the stream service serves those).
func TestSixLongPollsStallAnAdmission(t *testing.T) {
	if testing.Short() {
		t.Skip("20 s of real time")
	}
	t.Parallel()
	stop := make(chan struct{})
	var running atomic.Int32
	defer func() {
		close(stop)
		require.Eventually(t, func() bool { return running.Load() == 0 }, 5*time.Second, 5*time.Millisecond)
	}()
	poll := func(c openruntimes.Context) openruntimes.Response {
		running.Add(1)
		defer running.Add(-1)
		select { // a long-poll that saw nothing new (one cut at 408 runs on, as in the runtime)
		case <-time.After(20 * time.Second):
		case <-stop:
		}
		return c.Res.Json(map[string]any{"events": []any{}})
	}
	admit := func(c openruntimes.Context) openruntimes.Response {
		return c.Res.Json(map[string]any{"runId": "r1"}, c.Res.WithStatusCode(201))
	}
	h := &functionhost.Host{Functions: []functionhost.Function{
		{Name: "runs", Prefixes: []string{"/api/runs"}, Main: poll},
		{Name: "conversations", Prefixes: []string{"/api/conversations"}, Main: admit},
	}}
	s := httptest.NewServer(h)
	defer s.Close()
	var wg sync.WaitGroup
	for i := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			resp, err := http.Get(fmt.Sprintf("%s/api/runs/r%d/events?after=0&wait=20", s.URL, i))
			if err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		}()
	}
	require.Eventually(t, func() bool { st := h.Stats(false); return st.Busy == 5 && st.Waiting == 1 }, 5*time.Second, 10*time.Millisecond)
	began := time.Now()
	resp, err := http.Post(s.URL+"/api/conversations/c1/messages", "application/json", strings.NewReader(`{"text":"hi"}`))
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	took := time.Since(began)
	require.Greater(t, took, 12*time.Second, "the admission waited behind a long-poll (answered %d)", resp.StatusCode)
	wg.Wait()
	st := h.Stats(true)
	require.EqualValues(t, 7, st.Executions, "one execution record per request")
	require.EqualValues(t, 6, st.PerFunction["runs"])
	var admission functionhost.Execution
	for _, e := range st.Recent {
		if e.Function == "conversations" {
			admission = e
		}
	}
	require.True(t, admission.Waited, "no worker was idle")
	t.Logf("admission answered %d after %s (waited %s for a worker)", resp.StatusCode, took.Round(time.Millisecond), admission.Queued.Round(time.Millisecond))
}

// TestTheBudgetCountsFromArrival: a request that waited for a worker has only what is
// left of the 30 s cap; past it, Appwrite's 408 page, and the worker it never got stays
// with the execution that holds it.
func TestTheBudgetCountsFromArrival(t *testing.T) {
	t.Parallel()
	release := make(chan struct{})
	var started sync.WaitGroup
	hold := func(c openruntimes.Context) openruntimes.Response {
		started.Done()
		<-release
		return c.Res.Text("done")
	}
	quick := func(c openruntimes.Context) openruntimes.Response {
		time.Sleep(300 * time.Millisecond)
		return c.Res.Text("quick")
	}
	h := &functionhost.Host{Workers: 1, Timeout: 600 * time.Millisecond, Functions: []functionhost.Function{
		{Name: "hold", Prefixes: []string{"/api/hold"}, Main: hold},
		{Name: "quick", Prefixes: []string{"/api/quick"}, Main: quick},
	}}
	s := httptest.NewServer(h)
	defer s.Close()
	started.Add(1)
	holdDone := make(chan int, 1)
	go func() {
		resp, err := http.Get(s.URL + "/api/hold")
		if err != nil {
			holdDone <- 0
			return
		}
		resp.Body.Close()
		holdDone <- resp.StatusCode
	}()
	started.Wait()
	// Waits 400 ms for the one worker, then has 200 ms left for a 300 ms execution.
	time.AfterFunc(400*time.Millisecond, func() { close(release) })
	resp, body := do(t, s.URL, "GET", "/api/quick")
	require.Equal(t, 408, resp.StatusCode, body)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html"))
	require.Contains(t, body, "function_synchronous_timeout")
	require.Equal(t, 200, <-holdDone)
	st := h.Stats(true)
	require.EqualValues(t, 1, st.Timeouts)
	require.EqualValues(t, 2, st.Executions)
	// Nobody free at all: the 408 comes without an execution ever starting.
	h2 := &functionhost.Host{Workers: 1, Timeout: 200 * time.Millisecond, Functions: h.Functions}
	s2 := httptest.NewServer(h2)
	defer s2.Close()
	release2 := make(chan struct{})
	h2.Functions[0].Main = func(c openruntimes.Context) openruntimes.Response { <-release2; return c.Res.Text("done") }
	go func() {
		if resp, err := http.Get(s2.URL + "/api/hold"); err == nil {
			resp.Body.Close()
		}
	}()
	require.Eventually(t, func() bool { return h2.Stats(false).Busy == 1 }, 2*time.Second, 5*time.Millisecond)
	resp, _ = do(t, s2.URL, "GET", "/api/quick")
	require.Equal(t, 408, resp.StatusCode)
	close(release2)
}

// TestStdoutOutsideAnExecutionIsLost: the Go runtime captures stdout and stderr per
// execution (types-for-go's OverrideNativeLogs / RevertNativeLogs); what an execution
// prints lands in its log, and after two overlapping executions the process's streams
// are the first one's closed pipe, so a background goroutine's line goes nowhere.
// Not parallel: it swaps os.Stdout and os.Stderr.
func TestStdoutOutsideAnExecutionIsLost(t *testing.T) {
	savedOut, savedErr := os.Stdout, os.Stderr
	t.Cleanup(func() { os.Stdout, os.Stderr = savedOut, savedErr })
	procOut, err := os.Create(filepath.Join(t.TempDir(), "process-stdout"))
	require.NoError(t, err)
	defer procOut.Close()
	os.Stdout, os.Stderr = procOut, procOut
	logs, err := os.Create(filepath.Join(t.TempDir(), "executions.log"))
	require.NoError(t, err)
	defer logs.Close()

	firstIn, firstOut := make(chan struct{}), make(chan struct{})
	first := func(c openruntimes.Context) openruntimes.Response {
		close(firstIn)
		<-firstOut
		fmt.Println("printed by the first execution")
		return c.Res.Text("1")
	}
	second := func(c openruntimes.Context) openruntimes.Response {
		fmt.Println("printed by the second execution")
		return c.Res.Text("2")
	}
	h := &functionhost.Host{Logs: logs, CaptureStdio: true, Functions: []functionhost.Function{
		{Name: "first", Prefixes: []string{"/api/first"}, Main: first},
		{Name: "second", Prefixes: []string{"/api/second"}, Main: second},
	}}
	s := httptest.NewServer(h)
	defer s.Close()
	// One execution alone: its print goes to its log, the process's stdout is given back.
	resp, _ := do(t, s.URL, "GET", "/api/second")
	require.Equal(t, 200, resp.StatusCode)
	require.Same(t, procOut, os.Stdout)

	// Overlapping: the first starts, the second starts inside it, the first ends, then the
	// second restores the stream it saw when it started: the first one's closed pipe.
	done := make(chan struct{})
	go func() { defer close(done); do(t, s.URL, "GET", "/api/first") }()
	<-firstIn
	secondIn := make(chan struct{})
	h.Functions[1].Main = func(c openruntimes.Context) openruntimes.Response {
		close(secondIn)
		<-done
		return c.Res.Text("2")
	}
	go func() { do(t, s.URL, "GET", "/api/second") }()
	<-secondIn
	close(firstOut)
	require.Eventually(t, func() bool { return h.Stats(false).Executions == 3 }, 5*time.Second, 5*time.Millisecond)
	_, werr := fmt.Println("a background goroutine's line")
	require.Error(t, werr, "the process's stdout is a closed pipe")

	os.Stdout, os.Stderr = savedOut, savedErr
	b, err := os.ReadFile(logs.Name())
	require.NoError(t, err)
	require.Contains(t, string(b), "printed by the second execution", "an execution's print is in its log")
	require.Contains(t, string(b), "printed by the first execution")
	require.NotContains(t, string(b), "background")
	pb, _ := os.ReadFile(procOut.Name())
	require.Empty(t, string(pb), "nothing reached the process's own stdout")
}
