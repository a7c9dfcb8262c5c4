package executor

import (
	"context"

	"encoding/json"
	"errors"
	"fmt"
	"github.com/appwrite/sdk-for-go/query"
	"strings"
	"sync"
	"time"

	"privateassistant/agent/eventlog"
	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/schema/plan"
)

// attempt is one execution of a run by this process.
type attempt struct {
	e     *Executor
	runID string
	lease *runLease

	run     *schema.Run
	bind    *schema.RunBinding
	profile *schema.HarnessProfile
	route   *schema.ModelRoute
	h       harness.Harness
	log     *eventlog.Log
	token   string

	nativeID, sessionID string
	status              string
	text                strings.Builder // assistant text streamed in this attempt
	deltas              strings.Builder // not yet emitted
	pending             *harness.Event  // outstanding approval request
	forwarded           map[string]bool
	announced           map[string]bool // approval requests already shown to the user
	cancelling          bool
	revoked             <-chan struct{} // closes when a managed GPU grant is taken back
	stopSent            bool
	stopDeadline        time.Time
	terminalSeen        bool // an earlier attempt already emitted the terminal event
	patchQ              map[string]any
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

func (a *attempt) runs() schema.Table[schema.Run] {
	return schema.For[schema.Run](a.e.Store, schema.CollRuns)
}

func (a *attempt) binds() schema.Table[schema.RunBinding] {
	return schema.For[schema.RunBinding](a.e.Store, schema.CollRunBindings)
}

// patch updates the run record, keeping what failed for the next heartbeat to retry.
func (a *attempt) patch(ctx context.Context, p map[string]any) {
	if a.patchQ == nil {
		a.patchQ = map[string]any{}
	}
	for k, v := range p {
		a.patchQ[k] = v
	}
	a.flushPatch(ctx)
}

func (a *attempt) flushPatch(ctx context.Context) bool {
	if len(a.patchQ) == 0 {
		return true
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	if _, err := a.runs().Update(cctx, a.runID, a.patchQ); err != nil {
		a.e.log().Warn("run update deferred", "run", a.runID, "err", err)
		return false
	}
	a.patchQ = nil
	return true
}

func (a *attempt) emit(ctx context.Context, typ string, data any, durableNow bool) error {
	_, err := a.log.Emit(ctx, typ, data, durableNow)
	if a.e.Metrics != nil {
		a.e.Metrics.EventEmitted(typ)
	}
	if errors.Is(err, eventlog.ErrFenced) {
		return err
	}
	if err != nil {
		a.e.log().Warn("event buffered", "run", a.runID, "type", typ, "err", err)
	}
	return nil
}

func (a *attempt) setStatus(ctx context.Context, status, phase string, extra map[string]any) error {
	a.status = status
	a.log.SetStatus(status, schema.IsTerminal(status))
	p := map[string]any{"status": status, "phase": phase, "heartbeatAt": now()}
	for k, v := range extra {
		p[k] = v
	}
	a.patch(ctx, p)
	if schema.IsTerminal(status) {
		return nil
	}
	return a.emit(ctx, queue.EventRunStatus, map[string]any{"status": status, "phase": phase, "queueReason": extra["queueReason"], "queuePosition": extra["queuePosition"]}, true)
}

func (a *attempt) execute(ctx context.Context) error {
	e := a.e
	run, err := a.runs().Get(ctx, a.runID)
	if errors.Is(err, schema.ErrNotFound) {
		return nil // nothing to do: the task outlived its run
	}
	if err != nil {
		return err
	}
	a.run, a.status = run, run.Status
	if schema.IsTerminal(run.Status) {
		return nil
	}
	bind, err := a.binds().Get(ctx, a.runID)
	if err != nil {
		return err
	}
	a.bind = bind
	if a.profile, err = plan.HarnessRevision(ctx, e.Store, bind.HarnessProfileID, bind.HarnessRevision); err != nil {
		return err
	}
	if a.route, err = plan.RouteRevision(ctx, e.Store, bind.RouteID, bind.RouteRevision); err != nil {
		return err
	}
	if a.h, err = e.Harness(a.profile); err != nil {
		return err
	}

	// Claim: the attempt token goes in before anything else touches the run.
	a.token = token()
	n := int64(1)
	if bind.Attempt != nil {
		n = *bind.Attempt + 1
	}
	if _, err := a.binds().Update(ctx, a.runID, map[string]any{"attempt": n, "attemptToken": a.token}); err != nil {
		return err
	}
	if a.log, err = eventlog.Open(ctx, e.RDB, e.Store, run, a.token); err != nil {
		return err
	}
	a.terminalSeen = a.lastEventTerminal(ctx)
	defer a.log.Release(context.WithoutCancel(ctx))
	a.forwarded, a.announced = map[string]bool{}, map[string]bool{}

	if run.CancelRequested && (bind.NativeRunID == nil || *bind.NativeRunID == "") {
		return a.finish(ctx, harness.Event{Kind: harness.KindCancelled}, "cancelled before it started")
	}

	// A slot on the device; waiting is visible to the user with its position.
	// Waiting notices may arrive from another goroutine (the GPU manager): they are
	// serialized with the attempt's own writes and none lands after the grant.
	var waitMu sync.Mutex
	granted := false
	wait := func(pos int, reason string) {
		waitMu.Lock()
		defer waitMu.Unlock()
		if granted {
			return
		}
		if reason == "" {
			reason = fmt.Sprintf("waiting for the %s GPU", a.route.Device)
		}
		_ = a.setStatus(ctx, schema.RunWaitingForResource, "waiting for resource", map[string]any{"queueReason": reason, "queuePosition": int64(pos)})
	}
	var release func()
	if e.GPU != nil && e.GPU.Manages(a.route.Device) {
		release, a.revoked, err = e.GPU.Acquire(ctx, a.route.Device, a.route.BackendModel, wait)
		waitMu.Lock()
		granted = true // no waiting notice after this point
		waitMu.Unlock()
		if err != nil && ctx.Err() == nil {
			// The model could not be made ready (load failure, context budget, Immich):
			// the run fails with the reason rather than retrying blindly.
			return a.finish(ctx, harness.Event{Kind: harness.KindFailed, Error: "the model could not be loaded: " + err.Error()}, "")
		}
	} else {
		release, err = e.Slots.Acquire(ctx, a.route.Device, func(pos int) { wait(pos, "") })
	}
	waitMu.Lock()
	granted = true
	waitMu.Unlock()
	if err != nil {
		return a.interrupted(ctx)
	}
	defer release()
	if e.Metrics != nil {
		e.Metrics.RunStarted(run.Role)
	}
	started := map[string]any{"queueReason": nil, "queuePosition": nil}
	if run.StartedAt == nil {
		started["startedAt"] = now()
	}
	if err := a.setStatus(ctx, schema.RunRunning, "starting", started); err != nil {
		return err
	}

	hbCtx, stopHB := context.WithCancel(ctx)
	defer stopHB()
	lost := make(chan struct{})
	go a.heartbeat(hbCtx, lost)

	if err := a.submit(ctx); err != nil {
		if ctx.Err() != nil {
			return a.interrupted(ctx)
		}
		if e.Metrics != nil {
			e.Metrics.HarnessError(a.h.Kind())
		}
		if errors.Is(err, harness.ErrUnavailable) {
			_ = a.log.Flush(context.WithoutCancel(ctx))
			return err // retried by asynq with backoff
		}
		return a.finish(ctx, harness.Event{Kind: harness.KindFailed, Error: "the agent could not start the run: " + err.Error()}, "")
	}
	return a.consume(ctx, lost)
}

// lastEventTerminal reports whether the run's event log already ends with a terminal
// event (an earlier attempt finished it but crashed before settling the record).
func (a *attempt) lastEventTerminal(ctx context.Context) bool {
	st, ok, err := queue.GetRunState(ctx, a.e.RDB, a.runID)
	if err == nil && ok && st.Terminal {
		return true
	}
	evs, _, err := queue.ReadEvents(ctx, a.e.RDB, a.runID, max(0, a.log.Last()-1), 0)
	if err == nil && len(evs) > 0 && queue.IsTerminalEvent(evs[len(evs)-1].Type) {
		return true
	}
	return false
}

func (a *attempt) heartbeat(ctx context.Context, lost chan<- struct{}) {
	t := time.NewTicker(a.e.HeartbeatEvery)
	defer t.Stop()
	for i := 1; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		ok, err := a.lease.renew(ctx)
		if err == nil && !ok {
			close(lost) // another executor owns the run now
			return
		}
		_ = a.e.RDB.HSet(ctx, queue.StateKey(a.runID), "heartbeatAt", now()).Err()
		if i%5 == 0 {
			a.patch(ctx, map[string]any{"heartbeatAt": now()})
			_ = a.log.Flush(ctx)
		}
	}
}

// submit materializes the context and submits (or re-attaches to) the native run.
func (a *attempt) submit(ctx context.Context) error {
	input, history, err := a.context(ctx)
	if err != nil {
		return err
	}
	seed := "pa-" + a.runID
	sub := harness.Submission{Key: a.runID, Input: input, Model: a.route.Alias, SessionSeed: seed}
	if a.route.MaxOutput != nil {
		sub.MaxTokens = int(*a.route.MaxOutput)
	}
	keepsSessions := a.h.Kind() != "direct" // the direct harness has no native memory
	if a.bind.NativeSessionID != nil && *a.bind.NativeSessionID != "" {
		sub.SessionID = *a.bind.NativeSessionID
	} else if s := a.compatibleSession(ctx); keepsSessions && s != "" {
		sub.SessionID = s
	} else {
		sub.SessionID = seed
	}
	if sub.SessionID == seed {
		sub.History = history // a fresh session starts from the portable context
	}
	if a.bind.NativeSessionID == nil || *a.bind.NativeSessionID != sub.SessionID {
		// Persisted before submitting, so every attempt sends the identical body.
		if _, err := a.binds().Update(ctx, a.runID, map[string]any{"nativeSessionId": sub.SessionID}); err != nil {
			return err
		}
	}
	if sub.SessionID == seed {
		sub.SessionID = "" // the harness creates it (idempotently) with the seed id
	}
	att, err := a.h.Submit(ctx, sub)
	if err != nil {
		return err
	}
	a.nativeID, a.sessionID = att.NativeRunID, att.SessionID
	prev := ""
	if a.bind.NativeRunID != nil {
		prev = *a.bind.NativeRunID
	}
	if prev != att.NativeRunID {
		if _, err := a.binds().Update(ctx, a.runID, map[string]any{"nativeRunId": att.NativeRunID}); err != nil {
			return err
		}
	}
	if prev != "" && !att.Replayed && a.log.Last() > 0 {
		// The harness lost the earlier run (the direct harness lives in the agent's
		// memory): its answer starts over, so the client drops the partial text.
		if err := a.emit(ctx, queue.EventMessageReset, map[string]any{"reason": "the answer restarted after an interruption"}, true); err != nil {
			return err
		}
	}
	return a.setStatus(ctx, schema.RunRunning, "thinking", nil)
}

// compatibleSession finds the native session of this conversation's latest run with the
// same harness revision and route: continuing it keeps the harness's own memory.
func (a *attempt) compatibleSession(ctx context.Context) string {
	page, err := a.binds().List(ctx, schema.ListQuery{Filters: []string{
		query.Equal("conversationId", a.bind.ConversationID), query.Equal("harnessProfileId", a.bind.HarnessProfileID),
		query.Equal("harnessRevision", a.bind.HarnessRevision), query.Equal("routeId", a.bind.RouteID),
		query.IsNotNull("nativeSessionId"),
	}, Order: []string{query.OrderDesc("$sequence")}, Limit: 20})
	if err != nil {
		return ""
	}
	for _, b := range page.Items {
		if b.RunID != a.runID && b.NativeSessionID != nil && *b.NativeSessionID != "" {
			return *b.NativeSessionID
		}
	}
	return ""
}

// context returns the user's message and the portable context before it, and makes sure
// the immutable context snapshot record exists.
func (a *attempt) context(ctx context.Context) (string, []harness.Message, error) {
	msgs := schema.For[schema.Message](a.e.Store, schema.CollMessages)
	orig, err := msgs.Get(ctx, a.bind.MessageID)
	if err != nil {
		return "", nil, err
	}
	all, err := msgs.All(ctx, schema.ListQuery{Owner: a.run.OwnerID,
		Filters: []string{query.Equal("conversationId", a.run.ConversationID), query.LessThan("sequence", orig.Sequence)},
		Order:   []string{query.OrderAsc("sequence")}, Limit: 100})
	if err != nil {
		return "", nil, err
	}
	var history []harness.Message
	for _, m := range all {
		if m.Text != nil && *m.Text != "" {
			history = append(history, harness.Message{Role: m.Role, Content: *m.Text})
		}
	}
	input := ""
	if orig.Text != nil {
		input = *orig.Text
	}
	if err := a.snapshot(ctx, orig.Sequence, append(history, harness.Message{Role: "user", Content: input})); err != nil {
		return "", nil, err
	}
	return input, history, nil
}

func (a *attempt) snapshot(ctx context.Context, through int64, msgs []harness.Message) error {
	b, _ := json.Marshal(msgs)
	sum := sumHex(b)
	rec := &schema.ContextSnapshot{OwnerID: a.run.OwnerID, ConversationID: a.run.ConversationID, ThroughSequence: through, Checksum: sum}
	if len([]rune(string(b))) <= schema.SizeSnapshot {
		s := string(b)
		rec.Context = &s
	} else {
		rec.Context = schema.Ptr(`{"truncated":true,"note":"the full context is the conversation's messages through throughSequence"}`)
	}
	_, err := schema.For[schema.ContextSnapshot](a.e.Store, schema.CollContextSnapshots).Create(ctx, a.bind.ContextSnapshotID, "", rec)
	if errors.Is(err, schema.ErrConflict) {
		return nil
	}
	return err
}
