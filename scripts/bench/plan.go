package main

// Entry is one benchmark and its `go test -bench` invocation. Benchtime is chosen from the
// time one iteration takes on the 2-core development box (Note), so that its figure is
// stable and the whole of `make bench` stays within about ten minutes.
type Entry struct {
	Pkg       string   // package directory, "./agent/daemon"
	Bench     string   // top-level benchmark name (its sub-benchmarks run too)
	Benchtime string   // -benchtime: "300x", or a duration for nanosecond-scale loops
	Timeout   string   // -timeout of the invocation (default 5m)
	Env       []string // extra environment, e.g. the switch of an opt-in benchmark
	Note      string   // what one iteration costs and why this benchtime
	Figures   []Figure // the headline figures the summary prints, beside their floors
}

// Figure names a reported metric the summary prints. Floor is the metric measured in the
// same run that it is set beside; Goal, when not zero, is the most the metric may be.
type Figure struct {
	Metric string
	Floor  string
	Goal   float64
}

// Plan is every benchmark in the repository with its benchtime. A benchmark found in the
// tree but missing here still runs, at DefaultBenchtime, and the summary says so.
var Plan = []Entry{
	{Pkg: "./admit", Bench: "BenchmarkWarmAdmission", Benchtime: "2000x",
		Note: "~3.7 ms an iteration (an admission, its floor, the reservation alone): ~8 s",
		Figures: []Figure{{Metric: "median-ratio", Goal: 1.2}, {Metric: "admit-µs/op", Floor: "floor-µs/op"},
			{Metric: "median-ratio-without-reservation"}, {Metric: "redis-roundtrips/op", Goal: 2}, {Metric: "appwrite-writes/op", Goal: 3}}},
	{Pkg: "./longpoll", Bench: "BenchmarkDeliveryLatency", Benchtime: "2000x",
		Note:    "~6.5 ms an iteration (two 2 ms head starts): ~13 s",
		Figures: []Figure{{Metric: "median-ratio", Goal: 1.3}, {Metric: "delivery-µs/op", Floor: "floor-µs/op"}}},
	{Pkg: "./stream", Bench: "BenchmarkSSEDelivery", Benchtime: "2000x",
		Note: "~6–8 ms an iteration (three 2 ms head starts: the stream service, the raw relay, the hand-over relay): ~20 s",
		Figures: []Figure{{Metric: "median-ratio", Goal: 1.1}, {Metric: "sse-µs/op", Floor: "floor-µs/op"},
			{Metric: "handoff-relay-µs/op", Floor: "floor-µs/op"}, {Metric: "median-ratio-to-handoff-relay"}}},
	{Pkg: "./functions/service", Bench: "BenchmarkSearchTenThousandMessages", Benchtime: "20x",
		Note:    "10,000 messages written once (~1 min on the emulator), then ~50 ms a search: ~2 min",
		Figures: []Figure{{Metric: "search-ms", Floor: "title-list-ms"}, {Metric: "ratio-to-title-list"}}},
	{Pkg: "./functions/httpapi", Bench: "BenchmarkVerify", Benchtime: "1s",
		Note: "nanoseconds (hit, floor) to ~80 µs (miss): time-based, ~4 s"},
	{Pkg: "./agent/gateway", Bench: "BenchmarkGateway", Benchtime: "2000x",
		Note: "~9.5 ms an iteration (3 targets × request and stream): ~20 s",
		// A backend that does no work: one more loopback hop alone is ~1.7× a direct call
		// (bare-hop-req-ratio-p50), so the per-request goal is the gateway's own work over
		// that hop here, and the ratio to a direct call against a real llama-server below.
		Figures: []Figure{{Metric: "token-ratio-p50", Goal: 1.15}, {Metric: "gateway-over-hop-req-p50", Goal: 1.15},
			{Metric: "req-ratio-p50", Floor: "bare-hop-req-ratio-p50"}, {Metric: "gateway-req-us", Floor: "direct-req-us"}, {Metric: "gateway-over-hop-token-p50"}}},
	{Pkg: "./agent/gateway", Bench: "BenchmarkGatewayLlamaServer", Benchtime: "200x",
		Note: "real llama-server (make deps; skipped without it): ~70 ms an iteration (four targets), at most llamaIterations (200) measured: ~16 s",
		Figures: []Figure{{Metric: "token-ratio", Goal: 1.15}, {Metric: "req-ratio", Goal: 1.15},
			{Metric: "gateway-req-us", Floor: "direct-req-us"}, {Metric: "gateway-token-us", Floor: "direct-token-us"},
			{Metric: "usage-in-path-us", Floor: "usage-send-us"}, {Metric: "usage-write-us"}, {Metric: "own-without-usage-req-us"}}},
	{Pkg: "./agent/gateway", Bench: "BenchmarkPipeStreamChunk", Benchtime: "1s",
		Note:    "in-memory, ~150 µs an iteration (200 chunks): time-based, ~3 s",
		Figures: []Figure{{Metric: "chunk-ns"}}},
	{Pkg: "./agent/gateway", Bench: "BenchmarkRequestBody", Benchtime: "1s",
		Note:    "in-memory, 0.5–1.7 ms an iteration: time-based, ~4 s",
		Figures: []Figure{{Metric: "body-us", Floor: "json-valid-us"}, {Metric: "decode-us"}}},
	{Pkg: "./agent/daemon", Bench: "BenchmarkEventLatencyRealHermes", Benchtime: "240x",
		Note: "real Hermes (make deps; skipped without it): ~0.3 s an iteration (an agent run, a direct one, a round of hops) plus two Hermes starts: ~90 s. " +
			"240, not 100: the goal's figure comes from the 180 unobserved iterations, and at 75 two Hermes runs' jitter moved its median by ±0.06 ms",
		// The goal's figure is the median of per-iteration differences (an iteration's agent
		// run beside its own direct run); the difference of the two medians beside it moves
		// with either run's jitter (0.25–0.38 where the paired one read 0.22–0.31).
		Figures: []Figure{{Metric: "added-beyond-hops-pairs-p50-ms", Goal: 0.3}, {Metric: "added-beyond-hops-ms"},
			{Metric: "agent-path-p50-ms", Floor: "hermes-sse-p50-ms"}, {Metric: "relay-p50-ms", Floor: "hermes-sse-p50-ms"},
			{Metric: "c-hub-wake-p50-ms", Floor: "c-floor-redis-handoff-ms"}, {Metric: "fn-path-p50-ms", Floor: "f-floor-rt-relay-p50-ms"},
			{Metric: "f-floor-rt-relay-p50-ms", Floor: "f-floor-relay-p50-ms"}}},
	{Pkg: "./agent/daemon", Bench: "BenchmarkQueuePickup", Benchtime: "100x",
		Note:    "~110 ms an iteration (a whole run): ~12 s",
		Figures: []Figure{{Metric: "p50-ms", Goal: 50}, {Metric: "p95-ms"}}},
	{Pkg: "./agent/daemon", Bench: "BenchmarkEventLatency", Benchtime: "50x",
		Note:    "~220 ms an iteration (a run through the agent and one straight to the double): ~12 s",
		Figures: []Figure{{Metric: "agent-path-ms", Floor: "double-sse-ms"}, {Metric: "ratio-to-floor"}}},
	{Pkg: "./agent/daemon", Bench: "BenchmarkAppwriteWritesPerStreamedSecond", Benchtime: "5x",
		Note:    "~2.3 s an iteration (a run streaming 100 tokens 20 ms apart): ~15 s",
		Figures: []Figure{{Metric: "appwrite-writes/s", Floor: "delta-flush-bound/s"}}},
	{Pkg: "./agent/daemon", Bench: "BenchmarkFiftyConcurrentRuns", Benchtime: "3x",
		Note:    "~7–8 s an iteration (50 runs streaming at once in the agent as a child process); 3 rounds show a later round starts (issue 15, item 4): ~40 s",
		Figures: []Figure{{Metric: "peak-rss-MiB", Floor: "idle-rss-MiB"}, {Metric: "cpu-s/s", Floor: "idle-cpu-s/s"}}},
	{Pkg: "./agent/gpu", Bench: "BenchmarkSwap", Benchtime: "100x",
		Note:    "~57 ms an iteration (a swap between two scripted child processes): ~6 s",
		Figures: []Figure{{Metric: "overhead-ms", Goal: 300}, {Metric: "swap-ms", Floor: "backend-unload+load-ms"}}},
	{Pkg: "./agent/gpu", Bench: "BenchmarkAcquireRelease", Benchtime: "10000x",
		Note:    "microseconds an iteration; 10,000 make the p99 a figure: ~1 s",
		Figures: []Figure{{Metric: "idle-acquire-p99-us", Goal: 1000}, {Metric: "hung-health-acquire-p99-us", Goal: 1000}}},
	{Pkg: "./agent/gpu", Bench: "BenchmarkSwapPolicy", Benchtime: "1x",
		Note:    "a deterministic simulation of 1,000 seeded jobs: one iteration (~2 ms) is the figure",
		Figures: []Figure{{Metric: "ours-swaps", Floor: "fifo-swaps"}, {Metric: "ours-worst-wait-min", Floor: "fifo-worst-wait-min"}}},
	{Pkg: "./agent/gpu", Bench: "BenchmarkQualifyStress", Benchtime: "1x", Timeout: "30m", Env: []string{"PA_BENCH_QUALIFY=1"},
		Note:    "opt-in (PA_BENCH_QUALIFY): real llama-server filling 16,384 tokens, then the scripted device: ~50 s",
		Figures: []Figure{{Metric: "prompt-tok/s"}, {Metric: "gen-tok/s"}}},
	{Pkg: "./backup", Bench: "BenchmarkBackupRestore", Benchtime: "1x", Timeout: "30m", Env: []string{"PA_BENCH_BACKUP=1"},
		Note:    "opt-in (PA_BENCH_BACKUP): 10,000 documents and 100 files each way: ~12 s",
		Figures: []Figure{{Metric: "backup-docs/s"}, {Metric: "restore-docs/s"}}},
	{Pkg: "./hermes/hermesreal", Bench: "BenchmarkStart", Benchtime: "300x",
		Note:    "real Hermes (make deps; skipped without it): one start per call (~3 s), then /health round trips: ~13 s",
		Figures: []Figure{{Metric: "start-ms"}, {Metric: "health-us"}}},
	{Pkg: "./hermes/hermesreal", Bench: "BenchmarkRunEventLatency", Benchtime: "1000x",
		Note:    "real Hermes: one run of b.N tokens 2 ms apart plus a start per call: ~15 s",
		Figures: []Figure{{Metric: "hermes-p50-us", Floor: "model-p50-us"}, {Metric: "hermes-p95-us", Floor: "model-p95-us"}}},
	{Pkg: "./schema/appwritetest", Bench: "BenchmarkUniqueWrites", Benchtime: "2000x",
		Note:    "filling 3 × 21,000 documents (~5 s), then ~0.1–0.3 ms a write: ~12 s",
		Figures: []Figure{{Metric: "create-20k/1k"}, {Metric: "update-20k/1k"}, {Metric: "list-20k/1k"}}},
	{Pkg: "./scripts/dev", Bench: "BenchmarkSendToFirstCharacter", Benchtime: "20x",
		Note:    "Chromium against make dev's stack: ~0.4 s a send, plus a start (~5 s): ~15 s",
		Figures: []Figure{{Metric: "send-to-first-char-ms", Floor: "backend-first-token-ms"}, {Metric: "over-floor-ms", Goal: 30}}},
	{Pkg: "./scripts/dev", Bench: "BenchmarkStreamingRender", Benchtime: "1x",
		Note:    "one 20,000-token render pass in Chromium whatever b.N is (15–60 s); 1x runs it once",
		Figures: []Figure{{Metric: "markdown-stream-ms", Floor: "plain-text-floor-ms"}, {Metric: "ratio-to-floor"}}},
}

// DefaultBenchtime is what a benchmark missing from Plan runs at: once, so that a new
// slow benchmark cannot make `make bench` unbounded.
const DefaultBenchtime = "1x"
