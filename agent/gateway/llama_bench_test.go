package gateway

import (
	"bytes"
	"context"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/agent/gpu"
	"privateassistant/agent/gpu/llamatest"
	"privateassistant/queue/redistest"
	"privateassistant/runconfig"
)

// llamaIterations caps BenchmarkGatewayLlamaServer's measured iterations (a manual
// -benchtime 300x; make bench runs it at the count scripts/bench/plan.go gives): ~60 ms
// each on a 2-core box.
const llamaIterations = 200

// BenchmarkGatewayLlamaServer is the gateway's goal figure where it means something: the
// same requests straight to a real llama-server (the one the project installs,
// scripts/llama/fetch.sh; skipped when absent) and through the gateway, interleaved per
// iteration (which goes first alternates). The model is llamatest's tiny random-weight
// GGUF on the CPU, which answers far faster than any real model on a GPU (~0.1–0.3 ms per
// token), so the ratios here are an upper bound of what a real model sees. The gateway
// runs as the agent runs it: run-tagged model, pinned route, the run's tool policy on four
// tool definitions, tool-call reporting, and usage sent to a real Redis before the
// answer's end (UsageWriter: the answer waits for the record's bytes to leave, not for
// the round trip).
//
// Each iteration calls llama-server directly, through the gateway, through a bare
// reverse proxy (the hop alone) and through the same gateway recording no usage, in a
// rotating order. Figures, each the median over the
// iterations: req-ratio (a non-streamed answer of 8 tokens), token-ratio (a streamed answer
// of 48 tokens, per token, its request included), marginal-token-ratio (per streamed token
// beyond the unstreamed request's: (streamed − unstreamed) / (48 − 8)), each beside the
// direct floor in µs; then what the gateway adds in µs, split into the hop and its own
// work (usage-write-us: a usage record's Redis round trip, timed alone; usage-send-us:
// the writer's Record alone, what the answer waits for; usage-in-path-us: the gateway's
// request minus the no-usage gateway's, per iteration). At most llamaIterations
// iterations are measured whatever b.N is.
func BenchmarkGatewayLlamaServer(b *testing.B) {
	bin := llamatest.Server(b)
	dir := b.TempDir()
	model := filepath.Join(dir, "tiny.gguf")
	if err := (llamatest.TinyModel{Name: "tiny", Seed: 1}).Write(model); err != nil {
		b.Fatal(err)
	}
	base := startLlama(b, bin, model, dir)
	rs := redistest.Start(b)
	rdb := rs.Client()
	defer rdb.Close()

	mgr := gpu.NewManager(gpu.Device{Name: "d", Backend: &gpu.UpstreamBackend{URL: base + "/v1", APIKey: upstreamKey}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_ = mgr.Start(ctx)
	defer mgr.Stop()
	g, err := mgr.AcquireFor(ctx, "run-1", "tiny", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer g.Release()
	route := Route{Alias: "r", Device: "d", Model: "tiny", Budget: 8192, Revision: 1}
	newGateway := func(usage Sink) *httptest.Server {
		return httptest.NewServer(&Gateway{APIKey: gatewayKey,
			Routes:      func() map[string]Route { return map[string]Route{"r": route} },
			Devices:     map[string]Fence{"d": mgr},
			UpstreamKey: func(string) string { return upstreamKey },
			Usage:       usage,
			Tools: (&PolicyCache{Load: func(context.Context, string) (runconfig.ToolPolicy, error) {
				return runconfig.ToolPolicy{"file", "terminal", "web"}, nil
			}}).Policy,
			Pinned:    (&pinCache[Route]{load: func(context.Context, string) (Route, error) { return route, nil }}).get,
			ToolCalls: func(context.Context, string, []ToolCall) {}})
	}
	// Usage as the agent records it: a UsageWriter on a connection of its own (the answer
	// waits for the record's bytes to leave, not for Redis's acknowledgement).
	wrdb := redis.NewClient(&redis.Options{Addr: rs.Addr, Username: rs.Username, Password: rs.Password, PoolSize: 1})
	defer wrdb.Close()
	writer, err := NewUsageWriter(wrdb, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := writer.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer writer.Stop()
	gw := newGateway(writer)
	defer gw.Close()
	// The same gateway recording no usage: beside gw, the usage write's cost in the path
	// itself (its round trip and the wake-up after it), not only its round trip alone.
	gwNoUsage := newGateway(nil)
	defer gwNoUsage.Close()

	const short, long = 8, 48
	tools := benchTools(4, 1)
	// ignore_eos: every answer is exactly n tokens. Streams ask for usage, as the gateway
	// does for its callers, so both sides ask llama-server for the same work.
	body := func(model string, stream bool, n int) []byte {
		m := map[string]any{"model": model, "stream": stream, "tools": tools, "max_tokens": n, "ignore_eos": true,
			"messages": []any{map[string]any{"role": "user", "content": "Say something short."}}}
		if stream {
			m["stream_options"] = map[string]any{"include_usage": true}
		}
		return mustJSON(m)
	}
	// A bare reverse proxy in front of the same server: the cost of the hop alone.
	upURL, _ := url.Parse(base)
	rp := httputil.NewSingleHostReverseProxy(upURL)
	rp.FlushInterval = -1
	rp.ErrorLog = log.New(io.Discard, "", 0)
	// As the gateway does: a request the server closed a kept-alive connection on
	// unanswered is sent again (which needs the body at hand).
	director := rp.Director
	rp.Director = func(r *http.Request) {
		director(r)
		raw, _ := io.ReadAll(r.Body)
		r.Body = io.NopCloser(bytes.NewReader(raw))
		r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
		r.Header["X-Idempotency-Key"] = nil
	}
	bare := httptest.NewServer(rp)
	defer bare.Close()
	type target struct {
		base, key string
		req, str  []byte
	}
	const direct, via, hop, noUsage = 0, 1, 2, 3
	targets := [4]target{
		{base, upstreamKey, body("tiny", false, short), body("tiny", true, long)},
		{gw.URL, gatewayKey, body("r@run-1", false, short), body("r@run-1", true, long)},
		{bare.URL, upstreamKey, body("tiny", false, short), body("tiny", true, long)},
		{gwNoUsage.URL, gatewayKey, body("r@run-1", false, short), body("r@run-1", true, long)},
	}
	sink := RedisSink{RDB: rdb}
	// Warm both paths (the prompt cache, connections).
	for _, t := range targets {
		benchCall(b, t.base, t.key, t.req, false)
		benchCall(b, t.base, t.key, t.str, true)
	}
	n := min(b.N, llamaIterations)
	// Per iteration: each call's time (µs), the ratios, and the usage write alone.
	var nReq []float64
	var dReq, vReq, hReq, dTok, vTok, hTok, dMarg, vMarg, hMarg, rec []float64
	var rReq, rTok, rMarg, oReq, oTok, inPath, sent []float64
	us := func(d time.Duration) float64 { return float64(d.Nanoseconds()) / 1000 }
	b.ResetTimer()
	for i := 0; i < n; i++ {
		var dr, ds [4]time.Duration
		for k := range 4 {
			v := (i + k) % 4
			t0 := time.Now()
			benchCall(b, targets[v].base, targets[v].key, targets[v].req, false)
			dr[v] = time.Since(t0)
		}
		for k := range 4 {
			v := (i + k) % 4
			t0 := time.Now()
			if benchCall(b, targets[v].base, targets[v].key, targets[v].str, true) == 0 {
				b.Fatalf("a stream carried no text")
			}
			ds[v] = time.Since(t0)
		}
		// The usage record's Redis round trip alone (what the gateway waited for until
		// 2026-12-02), and what the gateway waits for now: the writer sending it.
		u := Usage{Run: "run-2", Alias: "r", Device: "d", Generation: 1, EffectiveModel: "tiny", PromptTokens: 60, CompletionTokens: 8, Status: 200}
		t0 := time.Now()
		sink.Record(ctx, u)
		rec = append(rec, us(time.Since(t0)))
		t0 = time.Now()
		writer.Record(ctx, u)
		sent = append(sent, us(time.Since(t0)))
		_ = writer.Settle(ctx, "run-2")
		inPath = append(inPath, us(dr[via]-dr[noUsage]))
		// ignore_eos: every answer is exactly its max_tokens (text chunks undercount them:
		// llama-server holds back a token that ends inside a UTF-8 sequence).
		dReq, vReq, hReq = append(dReq, us(dr[direct])), append(vReq, us(dr[via])), append(hReq, us(dr[hop]))
		nReq = append(nReq, us(dr[noUsage]))
		dTok, vTok, hTok = append(dTok, us(ds[direct])/long), append(vTok, us(ds[via])/long), append(hTok, us(ds[hop])/long)
		m := func(v int) float64 { return us(ds[v]-dr[v]) / (long - short) }
		dMarg, vMarg, hMarg = append(dMarg, m(direct)), append(vMarg, m(via)), append(hMarg, m(hop))
		rReq, oReq = append(rReq, float64(dr[via])/float64(dr[direct])), append(oReq, float64(dr[via])/float64(dr[hop]))
		rTok, oTok = append(rTok, float64(ds[via])/float64(ds[direct])), append(oTok, float64(ds[via])/float64(ds[hop]))
		rMarg = append(rMarg, m(via)/m(direct))
	}
	b.StopTimer()
	// Every figure is the median over the iterations.
	b.ReportMetric(float64(n), "iterations")
	b.ReportMetric(median(dReq), "direct-req-us")
	b.ReportMetric(median(vReq), "gateway-req-us")
	b.ReportMetric(median(rReq), "req-ratio")
	b.ReportMetric(median(dTok), "direct-token-us")
	b.ReportMetric(median(vTok), "gateway-token-us")
	b.ReportMetric(median(rTok), "token-ratio")
	b.ReportMetric(median(dMarg), "direct-marginal-token-us")
	b.ReportMetric(median(rMarg), "marginal-token-ratio")
	// The decomposition of what the gateway adds (µs): the hop (a bare reverse proxy over
	// the direct call), the gateway's own work over that hop, and within it the usage
	// write to Redis (measured alone).
	b.ReportMetric(median(vReq)-median(dReq), "added-req-us")
	b.ReportMetric(median(hReq)-median(dReq), "hop-req-us")
	b.ReportMetric(median(vReq)-median(hReq), "own-req-us")
	b.ReportMetric(median(rec), "usage-write-us")
	b.ReportMetric(median(sent), "usage-send-us")
	// The usage write where it happens (median of per-iteration gateway − the same gateway
	// without usage), and the gateway's own work over the hop without it.
	b.ReportMetric(median(inPath), "usage-in-path-us")
	b.ReportMetric(median(nReq)-median(hReq), "own-without-usage-req-us")
	b.ReportMetric(median(oReq), "gateway-over-hop-req")
	b.ReportMetric(median(oTok), "gateway-over-hop-token")
	b.ReportMetric(median(vMarg)-median(dMarg), "added-marginal-token-us")
	b.ReportMetric(median(hMarg)-median(dMarg), "hop-marginal-token-us")
}

// startLlama runs llama-server on model (chat template with tools: --jinja) on a free
// loopback port until the benchmark ends, and returns its base URL once it is healthy.
func startLlama(b testing.TB, bin, model, dir string) string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		b.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	_ = l.Close()
	logf, err := os.Create(filepath.Join(dir, "llama-server.log"))
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(bin, "-m", model, "-a", "tiny", "--host", "127.0.0.1", "--port", strconv.Itoa(port),
		"-c", "8192", "-t", "2", "--no-webui", "--jinja", "--api-key", upstreamKey)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		_ = logf.Close()
	})
	base := "http://127.0.0.1:" + strconv.Itoa(port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		resp, err := http.Get(base + "/health")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return base
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "llama-server.log"))
			b.Fatalf("llama-server did not become healthy in 60 s: %v\n%s", err, log)
		}
		time.Sleep(50 * time.Millisecond) // polling a child process's readiness
	}
}
