package gpu

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"privateassistant/runconfig"
)

// StatusQualifying is the holder status of a qualification's grant: other users' waiting
// reasons say "the device is held by a GPU qualification".
const StatusQualifying = "qualifying"

// QualifyRequest is what a qualification measures: a route's backend model at its context
// budget and maximum output.
type QualifyRequest struct {
	Route         string
	RouteRevision int64
	Model         string
	Budget        int64 // the route's context budget
	MaxOutput     int64 // the route's maximum output (0: DefaultQualifyOutput)
	// Timeout bounds the qualification once it holds the device (0: only ctx); running
	// out of it fails the qualification, saying so.
	Timeout time.Duration
	// OnStart, when set, is called once the qualification holds the device.
	OnStart func()
	// OnStep, when set, hears each step as it starts and ends (issue 32 item 6): its
	// name (QualifyStep*) and what it does or measured, in words.
	OnStep func(step, detail string)
}

// The steps of a qualification, in order.
const (
	QualifyStepLoad     = "load"     // the model loaded with its context; the served context read back
	QualifyStepFill     = "fill"     // a prompt fills the KV cache to the budget
	QualifyStepGenerate = "generate" // one generation at the route's maximum output
	QualifyStepSlots    = "slots"    // every slot at once
	QualifyStepThermal  = "thermal"  // the memory coming back after the stress; the peaks judged
)

func (r QualifyRequest) step(step, format string, a ...any) {
	if r.OnStep != nil {
		r.OnStep(step, fmt.Sprintf(format, a...))
	}
}

// DefaultQualifyOutput is the sustained generation's length when the route sets no
// maximum output.
const DefaultQualifyOutput = 1024

// concurrentOutput bounds each concurrent request's generation (the concurrency phase
// measures that every slot serves, not endurance).
const concurrentOutput = 256

// AcquireExclusive waits in the device's queue, like a job, for the whole device with
// model loaded: it is granted once no grant is live, and nothing is granted while it is
// held. onWait sees the position and the reason while it waits.
func (m *Manager) AcquireExclusive(ctx context.Context, model string, onWait func(pos int, reason string)) (*Grant, error) {
	return m.wait(ctx, &waiter{Waiter: Waiter{Model: model, Exclusive: true}, reply: make(chan result, 1), onWait: onWait})
}

// BackendKind names a backend for the record.
func BackendKind(b Backend) string {
	switch b.(type) {
	case *ProcessBackend:
		return "process"
	case *RouterBackend:
		return "router"
	case *OllamaBackend:
		return "ollama"
	case *UpstreamBackend:
		return "upstream"
	}
	return fmt.Sprintf("%T", b)
}

// Qualify measures the route's model on this device and judges it against the limits. It
// queues like a job (onWait sees the position and reason; it never runs while a user's
// job holds the device), then holds the whole device: the model loads with its context
// (readiness checks the budget), the served context is read back from the backend, a
// prompt fills the KV cache to the budget, one generation runs at the route's maximum
// output, and the device's slots serve concurrent requests; telemetry is sampled
// throughout (VRAM idle and at full context, peak temperature and power) and, after the
// stress, the memory must come back to its idle figure. A stress step that overheats the
// device past the limit is cut at once.
//
// The error is only for the qualification not having run to a verdict (the manager
// stopped, ctx ended); a model that fails to load, or any limit missed, is a
// qualification that did not pass, with the reasons.
func (m *Manager) Qualify(ctx context.Context, req QualifyRequest, lim runconfig.QualificationLimits, onWait func(pos int, reason string)) (runconfig.Qualification, error) {
	q := runconfig.Qualification{Route: req.Route, RouteRevision: req.RouteRevision, Device: m.dev.Name, Model: req.Model,
		ContextBudget: req.Budget, MaxOutput: req.MaxOutput, Backend: BackendKind(m.dev.Backend), Limits: lim,
		StartedAt: time.Now().UTC().Format(time.RFC3339Nano)}
	fail := func(format string, a ...any) { q.Reasons = append(q.Reasons, fmt.Sprintf(format, a...)) }
	done := func() (runconfig.Qualification, error) {
		q.Passed = len(q.Reasons) == 0
		q.FinishedAt = time.Now().UTC().Format(time.RFC3339Nano)
		return q, nil
	}
	t0 := time.Now()
	g, err := m.AcquireExclusive(ctx, req.Model, onWait)
	q.WaitedSeconds = time.Since(t0).Round(time.Millisecond).Seconds()
	if errors.Is(err, ErrLoadFailed) {
		fail("the model could not be made ready: %v", err)
		return done()
	}
	if err != nil {
		return q, err
	}
	defer g.Release()
	if req.OnStart != nil {
		req.OnStart()
	}
	// The stress runs under the grant: a crash or a lost control lease ends it.
	sctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	if req.Timeout > 0 {
		t := time.AfterFunc(req.Timeout, func() {
			cancel(fmt.Errorf("the qualification ran out of its time (%s) before it finished", req.Timeout))
		})
		defer t.Stop()
	}
	go func() {
		select {
		case <-g.Done():
			cancel(fmt.Errorf("the device was taken back: %s", g.Reason()))
		case <-sctx.Done():
		}
	}()

	smp := &sampler{m: m, maxTemp: lim.MaxTemperatureC, overheat: func(c float64) {
		cancel(fmt.Errorf("the device overheated: %.1f °C, above the limit of %.0f °C", c, lim.MaxTemperatureC))
	}}
	idle, haveIdle := smp.fresh(sctx)
	if haveIdle {
		q.VRAMIdleBytes, q.VRAMTotalBytes = idle.MemUsed, idle.MemTotal
	}
	smp.start(sctx)

	req.step(QualifyStepLoad, "%s is loaded; reading the context it serves", req.Model)
	rep, err := ContextOf(sctx, m.dev.Backend, g.Endpoint, req.Model)
	q.ContextServed, q.ContextTrained, q.ContextSource = rep.Served, rep.Trained, rep.Source
	switch {
	case err != nil:
		fail("the served context could not be read: %v", err)
	case rep.Check(req.Budget) != nil:
		fail("%v", rep.Check(req.Budget))
	}
	c := &client{endpoint: g.Endpoint, model: req.Model, key: m.dev.Backend.Key()}
	var ran stressed
	if len(q.Reasons) == 0 {
		ran = m.stress(sctx, c, smp, req, &q, fail)
	}
	smp.stop()
	if cause := context.Cause(sctx); cause != nil && ctx.Err() == nil && !errors.Is(cause, context.Canceled) {
		fail("%v", cause)
	}
	if ctx.Err() != nil {
		return q, ctx.Err()
	}
	peak := smp.result()
	q.PeakTempC, q.PeakPowerW = peak.temp, peak.power
	if peak.used > 0 {
		q.VRAMFullBytes = peak.used
		if q.VRAMTotalBytes == 0 {
			q.VRAMTotalBytes = peak.total
		}
	}
	// After the stress the KV cache's memory must come back to the idle figure.
	req.step(QualifyStepThermal, "peak %.0f °C, %.0f W; waiting for the memory to come back", q.PeakTempC, q.PeakPowerW)
	if haveIdle {
		tol := lim.MemoryBackToleranceB
		if tol <= 0 {
			tol = 64 << 20
		}
		after, back := m.settle(ctx, idle.MemUsed+tol)
		q.VRAMAfterBytes = after.MemUsed
		if !back {
			fail("the device's memory did not come back after the stress: %d MiB used, %d MiB at idle (tolerance %d MiB, waited %s)",
				after.MemUsed>>20, idle.MemUsed>>20, tol>>20, m.dev.MemoryWait)
		}
	}
	m.judge(&q, lim, haveIdle, ran, fail)
	return done()
}

// stressed says which speed figures were measured (a cut stress measures fewer).
type stressed struct{ prompt, generation bool }

// stress runs the three load steps, recording figures and failures on q. The device is
// also read at the moments a step is known to load it (the fill's prompt processed, every
// slot streaming), not only on smp's ticks: a busy host
// may not run the ticker within a step, and VRAM at full context read from an idle device
// would pass a device without the headroom.
func (m *Manager) stress(ctx context.Context, c *client, smp *sampler, req QualifyRequest, q *runconfig.Qualification, fail func(string, ...any)) (ran stressed) {
	// 1. Fill the KV cache to the budget: a prompt of about the budget's tokens, less a
	// few generated and a margin. How many tokens a word makes (and what the chat template
	// adds) is measured first with two short prompts, from the server's own usage counts.
	target := req.Budget - 16 - max(64, req.Budget/50)
	perWord, overhead, err := c.calibrate(ctx, req.Budget)
	if ctx.Err() != nil {
		return ran
	}
	if err != nil {
		fail("measuring the tokenizer failed: %v", err)
		return ran
	}
	words := int64(float64(target-overhead) / perWord)
	if words < 1 {
		words = 1
	}
	prompt := strings.TrimSpace(strings.Repeat(" the", int(words)))
	req.step(QualifyStepFill, "filling the context: 0 of %d tokens", target)
	// The first token comes once the prompt is processed: the KV cache holds the budget.
	r, err := c.streamWith(ctx, prompt, 16, func() { smp.read(ctx) })
	if ctx.Err() != nil {
		return ran // the cause (overheating, the grant taken back) is recorded once by Qualify
	}
	if err != nil {
		fail("filling the context to the budget failed: %v", err)
		return ran
	}
	q.FilledTokens, q.PromptTPS, ran.prompt = r.promptTokens, r.promptTPS(), true
	req.step(QualifyStepFill, "filled %d of %d tokens at %.0f tokens/s", r.promptTokens, target, q.PromptTPS)
	if r.promptTokens < target*9/10 {
		fail("the fill reached only %d prompt tokens of the %d aimed for", r.promptTokens, target)
	}
	// 2. A sustained generation at the route's maximum output.
	out := req.MaxOutput
	if out <= 0 {
		out = DefaultQualifyOutput
	}
	if q.ContextServed > 0 && out > q.ContextServed-64 {
		out = max(q.ContextServed-64, 1)
	}
	req.step(QualifyStepGenerate, "generating %d tokens", out)
	r, err = c.stream(ctx, "Write a long story about the sea.", out)
	if ctx.Err() != nil {
		return ran
	}
	if err != nil {
		fail("the sustained generation of %d tokens failed: %v", out, err)
		return ran
	}
	q.GenerationTPS, ran.generation = r.genTPS(), true
	req.step(QualifyStepGenerate, "generated %d of %d tokens at %.1f tokens/s", r.completion, out, q.GenerationTPS)
	if r.completion < out*9/10 {
		fail("the sustained generation stopped after %d of %d tokens", r.completion, out)
	}
	// 3. Every slot at once.
	n := m.dev.Slots
	q.Concurrency = n
	each := min(out, concurrentOutput)
	req.step(QualifyStepSlots, "%d requests at once, %d tokens each", n, each)
	var wg sync.WaitGroup
	errs := make([]error, n)
	toks := make([]int64, n)
	t0 := time.Now()
	var streaming atomic.Int64 // the requests that have had their first token
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			r, err := c.streamWith(ctx, fmt.Sprintf("Request %d of %d: tell a story.", i+1, n), each, func() {
				if streaming.Add(1) == int64(n) {
					smp.read(ctx) // every slot is generating
				}
			})
			errs[i], toks[i] = err, r.completion
		}(i)
	}
	wg.Wait()
	if ctx.Err() != nil {
		return ran
	}
	var total int64
	for i, err := range errs {
		if err != nil {
			fail("concurrent request %d of %d failed: %v", i+1, n, err)
			return ran
		}
		total += toks[i]
	}
	if s := time.Since(t0).Seconds(); s > 0 {
		q.ConcurrentTPS = round1(float64(total) / s)
	}
	req.step(QualifyStepSlots, "%d requests at once: %.1f tokens/s together", n, q.ConcurrentTPS)
	return ran
}

// judge compares the measured figures with the limits.
func (m *Manager) judge(q *runconfig.Qualification, lim runconfig.QualificationLimits, haveIdle bool, ran stressed, fail func(string, ...any)) {
	if lim.MaxTemperatureC > 0 && q.PeakTempC > lim.MaxTemperatureC && !strings.Contains(strings.Join(q.Reasons, ";"), "overheated") {
		fail("peak temperature %.1f °C is above the limit of %.0f °C", q.PeakTempC, lim.MaxTemperatureC)
	}
	if lim.MinFreeMemoryBytes > 0 {
		switch {
		case !haveIdle || q.VRAMTotalBytes == 0:
			fail("free memory cannot be measured: the device reports no memory figures (a headroom of %d MiB is required)", lim.MinFreeMemoryBytes>>20)
		case q.VRAMTotalBytes-q.VRAMFullBytes < lim.MinFreeMemoryBytes:
			fail("only %d MiB free at full context; the limit is %d MiB", (q.VRAMTotalBytes-q.VRAMFullBytes)>>20, lim.MinFreeMemoryBytes>>20)
		}
	}
	// Speeds are judged only when measured: a stress cut short already failed, saying why.
	if lim.MinPromptTPS > 0 && ran.prompt && q.PromptTPS < lim.MinPromptTPS {
		fail("prompt processing at %.1f tokens/s is below the limit of %.1f", q.PromptTPS, lim.MinPromptTPS)
	}
	if lim.MinGenerationTPS > 0 && ran.generation && q.GenerationTPS < lim.MinGenerationTPS {
		fail("generation at %.1f tokens/s is below the limit of %.1f", q.GenerationTPS, lim.MinGenerationTPS)
	}
}

// settle waits up to MemoryWait for a fresh reading with at most limit bytes used.
func (m *Manager) settle(ctx context.Context, limit int64) (Reading, bool) {
	deadline := time.Now().Add(m.dev.MemoryWait)
	var last Reading
	for {
		if r, err := m.dev.Telemetry.Read(ctx); err == nil && !r.Stale(time.Now(), 5*time.Second) {
			last = r
			if r.MemUsed <= limit {
				return r, true
			}
		}
		if time.Now().After(deadline) {
			return last, false
		}
		select {
		case <-ctx.Done():
			return last, false
		case <-time.After(m.dev.PollEvery):
		}
	}
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }

// sampler reads the device's telemetry every PollEvery while the stress runs: peak VRAM
// used, temperature and power; a temperature above maxTemp calls overheat once.
type sampler struct {
	m        *Manager
	maxTemp  float64
	overheat func(c float64)

	mu   sync.Mutex
	peak struct {
		used, total  int64
		temp, power  float64
		overheatOnce bool
	}
	cancel context.CancelFunc
	done   chan struct{}
}

func (s *sampler) fresh(ctx context.Context) (Reading, bool) {
	if s.m.dev.Telemetry == nil {
		return Reading{}, false
	}
	for try := 0; try < 3; try++ {
		r, err := s.m.dev.Telemetry.Read(ctx)
		if err == nil && r.MemTotal > 0 && !r.Stale(time.Now(), 5*time.Second) {
			s.add(r)
			return r, true
		}
		select {
		case <-ctx.Done():
			return Reading{}, false
		case <-time.After(s.m.dev.PollEvery):
		}
	}
	return Reading{}, false
}

// read takes one reading now (when it is fresh) into the peaks.
func (s *sampler) read(ctx context.Context) {
	if s.m.dev.Telemetry == nil {
		return
	}
	if r, err := s.m.dev.Telemetry.Read(ctx); err == nil && !r.Stale(time.Now(), 5*time.Second) {
		s.add(r)
	}
}

func (s *sampler) add(r Reading) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r.MemUsed > s.peak.used {
		s.peak.used, s.peak.total = r.MemUsed, r.MemTotal
	}
	s.peak.temp = max(s.peak.temp, r.TempC)
	s.peak.power = max(s.peak.power, r.PowerW)
	if s.maxTemp > 0 && r.TempC > s.maxTemp && !s.peak.overheatOnce {
		s.peak.overheatOnce = true
		s.overheat(r.TempC)
	}
}

func (s *sampler) start(ctx context.Context) {
	ctx, s.cancel = context.WithCancel(ctx)
	s.done = make(chan struct{})
	if s.m.dev.Telemetry == nil {
		close(s.done)
		return
	}
	go func() {
		defer close(s.done)
		t := time.NewTicker(s.m.dev.PollEvery)
		defer t.Stop()
		for {
			s.read(ctx)
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
}

func (s *sampler) stop() {
	if s.cancel != nil {
		s.cancel()
		<-s.done
	}
}

type peakFigures struct {
	used, total int64
	temp, power float64
}

func (s *sampler) result() peakFigures {
	s.mu.Lock()
	defer s.mu.Unlock()
	return peakFigures{used: s.peak.used, total: s.peak.total, temp: s.peak.temp, power: s.peak.power}
}

// calibrate measures the tokenizer with two prompts of a few and of more words (at most
// an eighth of the budget, so that even four tokens a word fit): the prompt tokens a word
// makes and what the chat template adds, from the server's usage counts.
func (c *client) calibrate(ctx context.Context, budget int64) (perWord float64, overhead int64, err error) {
	long := min(320, max(budget/8, 10))
	short := long / 5
	a, err := c.stream(ctx, strings.TrimSpace(strings.Repeat(" the", int(short))), 1)
	if err != nil {
		return 0, 0, err
	}
	b, err := c.stream(ctx, strings.TrimSpace(strings.Repeat(" the", int(long))), 1)
	if err != nil {
		return 0, 0, err
	}
	if a.promptTokens <= 0 || b.promptTokens <= a.promptTokens {
		return 0, 0, fmt.Errorf("the server reports no usable prompt token counts (%d and %d for %d and %d words)", a.promptTokens, b.promptTokens, short, long)
	}
	perWord = float64(b.promptTokens-a.promptTokens) / float64(long-short)
	return perWord, max(0, a.promptTokens-int64(float64(short)*perWord+0.5)), nil
}

// client streams chat completions from the granted endpoint and times them.
type client struct {
	endpoint, model, key string
}

type timed struct {
	promptTokens, completion int64
	start, first, last       time.Time
	chunks                   int64
	// llama-server's own figures when it sends them (timings in the last chunk).
	serverPromptTPS, serverGenTPS float64
}

func (t timed) promptTPS() float64 {
	if t.serverPromptTPS > 0 {
		return round1(t.serverPromptTPS)
	}
	if t.promptTokens == 0 || t.first.IsZero() {
		return 0
	}
	s := t.first.Sub(t.start).Seconds()
	if s <= 0 {
		return 0
	}
	return round1(float64(t.promptTokens) / s)
}

func (t timed) genTPS() float64 {
	if t.serverGenTPS > 0 {
		return round1(t.serverGenTPS)
	}
	n := t.completion
	if n == 0 {
		n = t.chunks
	}
	s := t.last.Sub(t.first).Seconds()
	if n < 2 || s <= 0 {
		return 0
	}
	return round1(float64(n-1) / s)
}

// stream sends one streamed chat completion of up to maxTokens (ignore_eos: a server
// that honours it generates all of them) and times the first and last content chunks.
func (c *client) stream(ctx context.Context, prompt string, maxTokens int64) (timed, error) {
	return c.streamWith(ctx, prompt, maxTokens, nil)
}

// streamWith is stream calling onFirst (when set) as the first content chunk arrives,
// before reading on.
func (c *client) streamWith(ctx context.Context, prompt string, maxTokens int64, onFirst func()) (timed, error) {
	body, _ := json.Marshal(map[string]any{"model": c.model, "stream": true, "max_tokens": maxTokens, "ignore_eos": true,
		"temperature": 0, "stream_options": map[string]any{"include_usage": true},
		"messages": []any{map[string]any{"role": "user", "content": prompt}}})
	req, err := http.NewRequestWithContext(ctx, "POST", strings.TrimRight(c.endpoint, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return timed{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if c.key != "" {
		req.Header.Set("Authorization", "Bearer "+c.key)
	}
	t := timed{start: time.Now()}
	resp, err := streamc.Do(req)
	if err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			return t, cause
		}
		return t, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return t, fmt.Errorf("answered %d %s", resp.StatusCode, strings.TrimSpace(string(msg)))
	}
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 4<<20)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		if line == "[DONE]" {
			return t, nil
		}
		var ch struct {
			Choices []struct {
				Delta struct {
					Content          string `json:"content"`
					ReasoningContent string `json:"reasoning_content"`
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				PromptTokens     int64 `json:"prompt_tokens"`
				CompletionTokens int64 `json:"completion_tokens"`
			} `json:"usage"`
			Timings *struct {
				PromptPerSecond    float64 `json:"prompt_per_second"`
				PredictedPerSecond float64 `json:"predicted_per_second"`
			} `json:"timings"`
		}
		if json.Unmarshal([]byte(line), &ch) != nil {
			continue
		}
		for _, c := range ch.Choices {
			if c.Delta.Content != "" || c.Delta.ReasoningContent != "" {
				now := time.Now()
				if t.first.IsZero() {
					t.first = now
					if onFirst != nil {
						onFirst()
					}
				}
				t.last = now
				t.chunks++
			}
		}
		if ch.Usage != nil {
			t.promptTokens, t.completion = ch.Usage.PromptTokens, ch.Usage.CompletionTokens
		}
		if ch.Timings != nil {
			t.serverPromptTPS, t.serverGenTPS = ch.Timings.PromptPerSecond, ch.Timings.PredictedPerSecond
		}
	}
	if err := sc.Err(); err != nil {
		if cause := context.Cause(ctx); cause != nil && ctx.Err() != nil {
			return t, cause
		}
		return t, err
	}
	return t, errors.New("the stream ended without [DONE]")
}

// streamc has no overall timeout: a sustained generation may run for minutes; the
// qualification's context bounds it. Each request gets its own connection: a model server
// closing an idle keep-alive connection as the next POST reuses it ends that POST with
// EOF (llama-server does), and a POST is not retried.
var streamc = &http.Client{Transport: &http.Transport{DisableKeepAlives: true, Proxy: http.ProxyFromEnvironment}}
