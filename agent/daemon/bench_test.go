package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"

	"privateassistant/agent/daemon"
	"privateassistant/functions/service"
	"privateassistant/hermes"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema/schematest"
	"privateassistant/stacktest"
)

func percentile(ds []time.Duration, p float64) time.Duration {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	return ds[int(float64(len(ds)-1)*p)]
}

// BenchmarkQueuePickup: admission (the function returned 202) → the executor started the
// run (its first event is in the stream), on an idle chat queue. Target p50 ≤ 50 ms.
func BenchmarkQueuePickup(b *testing.B) {
	env := stacktest.New(b)
	env.StartAgent(b)
	_, jwt := env.SignUp(b, "pickup@example.com", "password-pickup")
	conv := env.Conversation(b, jwt)
	rdb := env.Redis.Client()
	defer rdb.Close()
	var lat []time.Duration
	for i := 0; i < b.N; i++ {
		a := env.Admit(b, jwt, conv, fmt.Sprintf("p%d", i), "hi", "")
		done := time.Now()
		evs, err := queue.WaitEvents(context.Background(), rdb, a.RunID, 0, 10*time.Second)
		if err != nil || len(evs) == 0 {
			b.Fatal("no first event", err)
		}
		lat = append(lat, time.Since(done))
		env.Follow(b, jwt, a.RunID, 30*time.Second, nil) // let it finish: the queue is idle again
	}
	b.ReportMetric(float64(percentile(lat, 0.5).Microseconds())/1000, "p50-ms")
	b.ReportMetric(float64(percentile(lat, 0.95).Microseconds())/1000, "p95-ms")
	b.ReportMetric(50, "target-p50-ms")
}

// BenchmarkEventLatency: an event emitted by the Hermes double → received by a long-poll
// client through the functions, as a ratio to the double's own SSE delivery to a direct
// consumer, measured in the same run (first delta of each run).
func BenchmarkEventLatency(b *testing.B) {
	var mu sync.Mutex
	firstEmit := map[string]time.Time{}
	// The long-poll's coalescing window is set to zero: this measures the mechanism (the
	// window, 30 ms by default, is added on purpose to batch bursts of deltas).
	env := stacktest.New(b, stacktest.Options{ChatHarness: "hermes", Functions: func(c *service.Config) { c.Coalesce = 0 }, OnEmit: func(run, ev string, _ map[string]any, at time.Time) {
		if ev == "message.delta" {
			mu.Lock()
			if _, ok := firstEmit[run]; !ok {
				firstEmit[run] = at
			}
			mu.Unlock()
		}
	}})
	env.Model.SetScript("#lat", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{"one", " two"}, FirstDelay: 50 * time.Millisecond}}})
	env.StartAgent(b)
	_, jwt := env.SignUp(b, "lat@example.com", "password-latency")
	conv := env.Conversation(b, jwt)
	var viaAgent, direct time.Duration
	for i := 0; i < b.N; i++ {
		a := env.Admit(b, jwt, conv, fmt.Sprintf("l%d", i), "measure #lat", "")
		var got time.Time
		env.Follow(b, jwt, a.RunID, 30*time.Second, func(ev queue.Event) bool {
			if ev.Type == queue.EventMessageDelta && got.IsZero() {
				got = time.Now()
			}
			return true
		})
		bind := mustBinding(b, env, a.RunID)
		mu.Lock()
		viaAgent += got.Sub(firstEmit[bind])
		mu.Unlock()
	}
	c := &hermes.Client{BaseURL: env.HermesURL, APIKey: stacktest.HermesKey}
	for i := 0; i < b.N; i++ {
		r, err := c.SubmitRun(context.Background(), fmt.Sprintf("floor-%d", i), hermes.RunRequest{Input: "measure #lat"})
		if err != nil {
			b.Fatal(err)
		}
		st, err := c.Events(context.Background(), r.RunID)
		if err != nil {
			b.Fatal(err)
		}
		for {
			ev, err := st.Next()
			if err != nil {
				b.Fatal(err)
			}
			if ev.Type == "message.delta" {
				at := time.Now()
				mu.Lock()
				direct += at.Sub(firstEmit[r.RunID])
				mu.Unlock()
				break
			}
		}
		st.Close()
	}
	b.ReportMetric(float64(viaAgent.Microseconds())/float64(b.N)/1000, "agent-path-ms")
	b.ReportMetric(float64(direct.Microseconds())/float64(b.N)/1000, "double-sse-ms")
	b.ReportMetric(float64(viaAgent)/float64(direct), "ratio-to-floor")
}

func mustBinding(b *testing.B, env *stacktest.Env, runID string) string {
	b.Helper()
	bind, err := schemaBinding(env, runID)
	if err != nil {
		b.Fatal(err)
	}
	return bind
}

// BenchmarkAppwriteWritesPerStreamedSecond counts the agent's Appwrite writes while a
// run streams steadily for a few seconds (text deltas are coalesced).
func BenchmarkAppwriteWritesPerStreamedSecond(b *testing.B) {
	// One user starts 50 conversations a round and follows all 50 runs: the per-user limits
	// on new conversations and concurrent follows are raised for it (a real user stays under them).
	env := stacktest.New(b, stacktest.Options{ChatHarness: "hermes", Functions: func(c *service.Config) {
		c.ConversationRate, c.FollowsPerUser = 1000, 100
	}})
	env.Model.SetScript("#steady", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 100)), TokenDelay: 20 * time.Millisecond}}})
	// The agent's Appwrite traffic goes through a counting transport.
	cnt := &schematest.Counter{}
	env.Settings.DeltaWindow = 100 * time.Millisecond
	a, err := daemon.New(env.Settings, nil)
	if err != nil {
		b.Fatal(err)
	}
	c := appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.RuntimeKey))
	c.Client = &http.Client{Transport: cnt}
	a.UseAppwriteClient(c)
	if err := a.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer a.Shutdown()
	_, jwt := env.SignUp(b, "writes@example.com", "password-writes")
	conv := env.Conversation(b, jwt)
	var writes int
	var streamed time.Duration
	for i := 0; i < b.N; i++ {
		cnt.Reset()
		r := env.Admit(b, jwt, conv, fmt.Sprintf("w%d", i), "go #steady", "")
		start := time.Now()
		env.Follow(b, jwt, r.RunID, time.Minute, nil)
		streamed += time.Since(start)
		writes += cnt.Writes()
	}
	b.ReportMetric(float64(writes)/streamed.Seconds(), "appwrite-writes/s")
	b.ReportMetric(float64(time.Second/env.Settings.DeltaWindow), "delta-flush-bound/s")
}

// BenchmarkFiftyConcurrentRuns measures the agent process (a child) while 50 runs stream
// at once, beside the same process idle, measured in the same run.
func BenchmarkFiftyConcurrentRuns(b *testing.B) {
	// One user starts 50 conversations a round and follows all 50 runs: the per-user limits
	// on new conversations and concurrent follows are raised for it (a real user stays under them).
	env := stacktest.New(b, stacktest.Options{ChatHarness: "hermes", Functions: func(c *service.Config) {
		c.ConversationRate, c.FollowsPerUser = 1000, 100
	}})
	env.Model.SetScript("#steady", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 100)), TokenDelay: 20 * time.Millisecond}}})
	bin := buildAgentB(b)
	cmd := exec.Command(bin)
	cmd.Env = append(agentEnv(env), "PA_AGENT_DEVICES=arc:50,xtx:1", "PA_AGENT_LEASE_TTL=6s", "PA_AGENT_HEARTBEAT=2s", "PA_AGENT_RESUME_EVERY=2s")
	cmd.Dir = b.TempDir()
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	time.Sleep(2 * time.Second)
	idleRSS, idleCPU := procStats(cmd.Process.Pid)
	time.Sleep(2 * time.Second)
	_, idleCPU2 := procStats(cmd.Process.Pid)
	idleCPUPerSec := (idleCPU2 - idleCPU) / 2
	_, jwt := env.SignUp(b, "fifty@example.com", "password-fifty")
	var peak int64
	var cpuPerSec float64
	for i := 0; i < b.N; i++ {
		_, cpu0 := procStats(cmd.Process.Pid)
		start := time.Now()
		var wg sync.WaitGroup
		for j := 0; j < 50; j++ {
			conv := env.Conversation(b, jwt)
			r := env.Admit(b, jwt, conv, fmt.Sprintf("f%d-%d", i, j), "go #steady", "")
			wg.Add(1)
			go func(id string) {
				defer wg.Done()
				env.Follow(b, jwt, id, 2*time.Minute, nil)
			}(r.RunID)
		}
		stop := make(chan struct{})
		go func() {
			for {
				select {
				case <-stop:
					return
				case <-time.After(100 * time.Millisecond):
					if rss, _ := procStats(cmd.Process.Pid); rss > peak {
						peak = rss
					}
				}
			}
		}()
		wg.Wait()
		close(stop)
		_, cpu1 := procStats(cmd.Process.Pid)
		cpuPerSec = (cpu1 - cpu0) / time.Since(start).Seconds()
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-rss-MiB")
	b.ReportMetric(float64(idleRSS)/(1<<20), "idle-rss-MiB")
	b.ReportMetric(cpuPerSec, "cpu-s/s")
	b.ReportMetric(idleCPUPerSec, "idle-cpu-s/s")
}

func buildAgentB(b *testing.B) string {
	b.Helper()
	bin := b.TempDir() + "/agent"
	out, err := exec.Command("go", "build", "-o", bin, "..").CombinedOutput()
	if err != nil {
		b.Fatal(string(out))
	}
	return bin
}

// procStats reads RSS (bytes) and user+system CPU seconds of a process.
func procStats(pid int) (int64, float64) {
	var rss int64
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid)); err == nil {
		for _, line := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(line, "VmRSS:") {
				f := strings.Fields(line)
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				rss = kb << 10
			}
		}
	}
	var cpu float64
	if b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid)); err == nil {
		s := string(b)
		f := strings.Fields(s[strings.LastIndex(s, ")")+2:])
		ut, _ := strconv.ParseFloat(f[11], 64)
		st, _ := strconv.ParseFloat(f[12], 64)
		cpu = (ut + st) / 100 // clock ticks (USER_HZ = 100)
	}
	return rss, cpu
}

var _ = json.Marshal

func schemaBinding(env *stacktest.Env, runID string) (string, error) {
	b, err := schemaFor(env, runID)
	if err != nil {
		return "", err
	}
	return b, nil
}
