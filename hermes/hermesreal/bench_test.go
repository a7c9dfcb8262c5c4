package hermesreal

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"privateassistant/hermes"
	"privateassistant/modeltest"
)

// BenchmarkStart reports how long a real Hermes takes from exec to a healthy /health
// (start-ms, one start per benchmark call) and, as the floor beside it, one /health
// round trip on the running server (health-us, the loop).
func BenchmarkStart(b *testing.B) {
	venv := Require(b)
	s, err := Launch(context.Background(), venv, b.TempDir(), Options{})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	hc := &http.Client{Timeout: 5 * time.Second}
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < b.N; i++ {
		resp, err := hc.Get(s.URL + "/health")
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
	}
	b.StopTimer()
	b.ReportMetric(float64(s.StartTime.Milliseconds()), "start-ms")
	b.ReportMetric(float64(time.Since(start).Microseconds())/float64(b.N), "health-us")
	hc.CloseIdleConnections()
}

var stampRe = regexp.MustCompile(`\[(\d+)\]`)

// stamped is a script turn of n tokens, each " [<unix nanos when sent>]".
func stamped(n int) modeltest.Turn {
	return modeltest.Turn{Tokens: make([]string, n), TokenDelay: 2 * time.Millisecond,
		TokenText: func(int) string { return fmt.Sprintf(" [%d]", time.Now().UnixNano()) }}
}

// latencies appends, for every stamp in text, how long ago it was sent.
func latencies(out []time.Duration, text string) []time.Duration {
	now := time.Now().UnixNano()
	for _, m := range stampRe.FindAllStringSubmatch(text, -1) {
		ns, _ := strconv.ParseInt(m[1], 10, 64)
		out = append(out, time.Duration(now-ns))
	}
	return out
}

func pct(d []time.Duration, p float64) float64 {
	if len(d) == 0 {
		return 0
	}
	sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
	return float64(d[int(float64(len(d)-1)*p)].Microseconds())
}

// BenchmarkRunEventLatency is real Hermes's own event path: how long a model token takes
// from the scripted model's SSE through Hermes (agent loop, run queue, GET …/events) to a
// client's message.delta (hermes-p50-us, hermes-p95-us). Beside it, the floor: the same
// tokens read straight from the model's SSE (model-p50-us). One run of b.N tokens, 2 ms
// apart; the agent's own event-path benchmark compares against these numbers.
func BenchmarkRunEventLatency(b *testing.B) {
	venv := Require(b)
	model := modeltest.New("scripted")
	s, err := Launch(context.Background(), venv, b.TempDir(), Options{Model: model})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	c := clientFor(s)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	run := func(input string) []time.Duration {
		acc, err := c.SubmitRun(ctx, uniq("latency"), hermes.RunRequest{Input: input})
		if err != nil {
			b.Fatal(err)
		}
		st, err := c.Events(ctx, acc.RunID)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		var lat []time.Duration
		for {
			ev, err := st.Next()
			if err != nil {
				return lat
			}
			if ev.Type == "message.delta" {
				lat = latencies(lat, ev.String("delta"))
			}
		}
	}
	model.SetScript("#warmup", modeltest.Script{Turns: []modeltest.Turn{stamped(3)}})
	run(uniq("#warmup")) // past the post-start warm-up
	marker := uniq("#latency")
	model.SetScript(marker, modeltest.Script{Turns: []modeltest.Turn{stamped(b.N)}})

	b.ResetTimer()
	viaHermes := run(marker)
	b.StopTimer()
	direct := directLatencies(b, ctx, s.ModelURL, marker)
	if len(viaHermes) != b.N || len(direct) != b.N {
		b.Fatalf("got %d stamps through Hermes and %d direct, want %d", len(viaHermes), len(direct), b.N)
	}
	b.ReportMetric(pct(viaHermes, 0.5), "hermes-p50-us")
	b.ReportMetric(pct(viaHermes, 0.95), "hermes-p95-us")
	b.ReportMetric(pct(direct, 0.5), "model-p50-us")
	b.ReportMetric(pct(direct, 0.95), "model-p95-us")
}

// directLatencies streams the marker's script straight from the scripted model.
func directLatencies(b *testing.B, ctx context.Context, modelURL, marker string) []time.Duration {
	body := `{"model":"scripted","stream":true,"messages":[{"role":"user","content":"` + marker + `"}]}`
	req, _ := http.NewRequestWithContext(ctx, "POST", modelURL+"/chat/completions", strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	var lat []time.Duration
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if line := sc.Text(); strings.HasPrefix(line, "data: {") {
			lat = latencies(lat, line)
		}
	}
	return lat
}
