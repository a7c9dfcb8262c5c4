package executor

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/hibiken/asynq"

	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// ProbePrompt is what a release's probe run asks (a fixed short prompt), and
// ProbeMaxTokens its output bound.
const (
	ProbePrompt    = "This is a configuration check. Answer with one short sentence."
	ProbeMaxTokens = 32
	// probeBound bounds one probe run (the device wait included).
	probeBound = 2 * time.Minute
)

// ProbeOutcome is what a probe run found (written to queue.ProbeKey).
type ProbeOutcome struct {
	OK      bool
	Detail  string
	Model   string
	Tokens  int
	Latency time.Duration
}

// HandleProbe is the asynq handler of queue.TypeProbe (issue 33): one short real run of
// a release role's plan — its harness revision and route revision, under the device's
// grant like a job (the run lease, then the GPU manager's grant or a device slot), the
// model calls naming the probe's run id so the inference gateway serves them on the
// pinned route with no tool (ProbeBinding) — and its outcome written where the
// functions' reconciler reads it (queue.ProbeKey). A probe already answered is not run
// again. Only a Redis write that fails is an error (asynq retries the task).
func (e *Executor) HandleProbe(ctx context.Context, t *asynq.Task) error {
	p, err := queue.Decode[queue.ProbeTask](t)
	if err != nil {
		return fmt.Errorf("probe task: %w", err)
	}
	e.defaults()
	key := queue.ProbeKey(p.Fingerprint, p.Role)
	if n, err := e.RDB.HExists(ctx, key, "ok").Result(); err != nil {
		return fmt.Errorf("probe %s: %w", key, err)
	} else if n {
		return nil
	}
	out, err := e.Probe(ctx, p)
	if err != nil {
		return err // ErrBusy: another delivery of it is running (retried, not a failure)
	}
	if ctx.Err() != nil {
		return ctx.Err() // aborted: the task is offered again
	}
	ok := "0"
	if out.OK {
		ok = "1"
	}
	pipe := e.RDB.TxPipeline()
	pipe.HSet(ctx, key, "ok", ok, "detail", out.Detail, "model", out.Model, "tokens", strconv.Itoa(out.Tokens),
		"latencyMs", strconv.FormatInt(out.Latency.Milliseconds(), 10), "agent", e.AgentID, "at", time.Now().UTC().Format(time.RFC3339Nano))
	pipe.Expire(ctx, key, queue.ProbeKeyTTL)
	if _, err := pipe.Exec(ctx); err != nil {
		return fmt.Errorf("probe %s: record: %w", key, err)
	}
	e.log().Info("release probe", "role", p.Role, "ok", out.OK, "detail", out.Detail)
	return nil
}

// Probe runs p once and says what answered; every failure is an outcome, except ErrBusy:
// another delivery of the probe holds its run lease.
func (e *Executor) Probe(ctx context.Context, p queue.ProbeTask) (ProbeOutcome, error) {
	e.defaults()
	ctx, cancel := context.WithTimeout(ctx, probeBound)
	defer cancel()
	fail := func(format string, a ...any) (ProbeOutcome, error) {
		return ProbeOutcome{Detail: fmt.Sprintf(format, a...)}, nil
	}
	hp, err := runconfig.HarnessRevision(ctx, e.Store, p.Harness, p.HarnessRevision)
	if err != nil {
		return fail("harness %s revision %d: %v", p.Harness, p.HarnessRevision, err)
	}
	rt, err := runconfig.RouteRevision(ctx, e.Store, p.Route, p.RouteRevision)
	if err != nil {
		return fail("route %s revision %d: %v", p.Route, p.RouteRevision, err)
	}
	h, err := e.Harness(hp)
	if err != nil {
		return fail("harness %s revision %d: %v", p.Harness, p.HarnessRevision, err)
	}
	if hp.Kind == "hermes" && e.MemberHome != nil && e.ProbeHome != nil {
		var out ProbeOutcome
		var perr error
		if err := e.ProbeHome(ctx, func(mh harness.Harness) error {
			out, perr = e.probeOn(ctx, p, hp, rt, mh)
			return nil
		}); err != nil {
			return fail("harness %s revision %d: a Hermes for the probe: %v", p.Harness, p.HarnessRevision, err)
		}
		return out, perr
	}
	return e.probeOn(ctx, p, hp, rt, h)
}

// probeOn is Probe on harness h.
func (e *Executor) probeOn(ctx context.Context, p queue.ProbeTask, hp *schema.HarnessProfile, rt *schema.ModelRoute, h harness.Harness) (ProbeOutcome, error) {
	run := p.ProbeRunID()
	fail := func(format string, a ...any) (ProbeOutcome, error) {
		return ProbeOutcome{Detail: fmt.Sprintf(format, a...)}, nil
	}
	if c, ok := h.(harness.Checker); ok {
		if _, err := c.Check(ctx); err != nil {
			return fail("harness %s revision %d refused: %v", p.Harness, p.HarnessRevision, err)
		}
	}
	lease, err := acquireLease(ctx, e.RDB, run, "", e.AgentID, e.LeaseTTL) // not indexed: a probe is never resumed
	if errors.Is(err, ErrBusy) {
		return ProbeOutcome{}, err
	}
	if err != nil {
		return fail("the probe's run lease: %v", err)
	}
	defer lease.release(context.WithoutCancel(ctx), true)
	var wg sync.WaitGroup
	beat, stopBeat := context.WithCancel(ctx)
	wg.Add(1)
	go func() { // the lease lives while the probe does (the GPU grant follows it)
		defer wg.Done()
		tk := time.NewTicker(e.HeartbeatEvery)
		defer tk.Stop()
		for {
			select {
			case <-beat.Done():
				return
			case <-tk.C:
				_, _ = lease.renew(beat)
			}
		}
	}()
	defer func() { stopBeat(); wg.Wait() }()

	var release func()
	var revoked <-chan struct{}
	if e.GPU != nil && e.GPU.Manages(rt.Device) {
		release, revoked, err = e.GPU.AcquireRun(ctx, rt.Device, run, rt.BackendModel, nil)
	} else {
		release, err = e.Slots.Acquire(ctx, rt.Device, nil)
	}
	if err != nil {
		return fail("device %s: %v", rt.Device, err)
	}
	defer release()
	if e.ProbeBinding != nil {
		defer e.ProbeBinding(run, rt)()
	}
	start := time.Now()
	att, err := h.Submit(ctx, harness.Submission{Key: run, Input: ProbePrompt, SessionSeed: run, Model: rt.Alias, // each harness names the run itself (harness.TagModel, X-PA-Run)
		MaxTokens: ProbeMaxTokens})
	if err != nil {
		return fail("%s harness %s revision %d: submit: %v", hp.Kind, p.Harness, p.HarnessRevision, err)
	}
	text, usage, err := probeStream(ctx, h, att.NativeRunID, revoked)
	lat := time.Since(start)
	if err != nil {
		return ProbeOutcome{Detail: fmt.Sprintf("%s harness %s revision %d on route %s revision %d: %v", hp.Kind, p.Harness, p.HarnessRevision, p.Route, p.RouteRevision, err), Latency: lat}, nil
	}
	out := ProbeOutcome{OK: true, Model: rt.BackendModel, Latency: lat}
	if usage != nil {
		out.Tokens = usage.TotalTokens
	}
	out.Detail = fmt.Sprintf("answered by %s on device %s through %s harness %s revision %d in %d ms, %d tokens: %q",
		rt.BackendModel, rt.Device, hp.Kind, p.Harness, p.HarnessRevision, lat.Milliseconds(), out.Tokens, truncateRunes(text, 80))
	return out, nil
}

// probeStream reads the probe's native stream to its terminal event: the answer's text
// and usage, or why it did not complete.
func probeStream(ctx context.Context, h harness.Harness, native string, revoked <-chan struct{}) (string, *harness.Usage, error) {
	st, err := h.Stream(ctx, native, -1)
	if err != nil {
		return "", nil, fmt.Errorf("stream: %w", err)
	}
	defer st.Close()
	var b strings.Builder
	for {
		select {
		case <-revoked:
			return "", nil, errors.New("the device's grant was taken back")
		default:
		}
		ev, err := st.Next()
		if err != nil {
			return "", nil, fmt.Errorf("stream: %w", err)
		}
		switch ev.Kind {
		case harness.KindDelta:
			b.WriteString(ev.Text)
		case harness.KindCompleted:
			if ev.Text != "" {
				b.Reset()
				b.WriteString(ev.Text)
			}
			if strings.TrimSpace(b.String()) == "" {
				return "", ev.Usage, errors.New("the run completed with an empty answer")
			}
			return b.String(), ev.Usage, nil
		case harness.KindFailed, harness.KindCancelled, harness.KindInterrupted:
			msg := ev.Error
			if msg == "" {
				msg = string(ev.Kind)
			}
			return "", nil, fmt.Errorf("the run %s: %s", ev.Kind, msg)
		case harness.KindApprovalRequest, harness.KindToolStarted:
			return "", nil, fmt.Errorf("the probe asked for a tool (%s): probes allow none", ev.Tool)
		}
	}
}

func truncateRunes(s string, n int) string {
	r := []rune(strings.TrimSpace(s))
	if len(r) <= n {
		return string(r)
	}
	return string(r[:n]) + "…"
}
