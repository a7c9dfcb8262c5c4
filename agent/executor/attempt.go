package executor

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"privateassistant/agent/harness"
	"privateassistant/internal/startstop"
	"privateassistant/queue/eventlog"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// attempt is one execution of a run by this process. All of its fields are owned by the
// goroutine that runs execute (the attempt's loop): the heartbeat, the native stream pump,
// the control reader and the device acquisition run in goroutines of their own, but they
// only post to channels; every write (events, the run record, bindings) happens here.
type attempt struct {
	e     *Executor
	runID string
	lease *runLease
	bg    startstop.Runner // the attempt's goroutines; Stop waits for them
	hb    heartbeat

	run     *schema.Run      // as read at the start (owner, conversation, role)
	rec     *runstate.Record // the run record as this attempt last saw it: every write is conditional on it
	bind    *schema.RunBinding
	profile *schema.HarnessProfile
	route   *schema.ModelRoute
	h       harness.Harness
	// workDir and cwd are the harness's work folder as this host sees it and as the
	// harness names it: the run owner's own (MemberHome), else the executor's.
	workDir, cwd string
	ownFolder    bool // the harness makes each run's folder its working directory (a member's Hermes: agent/homes RunFolderPlugin)
	log          *eventlog.Log
	token        string

	nativeID, sessionID string
	input               string // the run's input as submitted: its turn in the native session
	status              schema.RunStatus
	text                strings.Builder // assistant text streamed in this attempt
	turnBreak           bool            // a tool call or an approval since the last delta: the next text is a new turn
	breaks              []int           // offsets in text where a new model turn begins (answer.go)
	deltas              strings.Builder // not yet emitted
	pending             *harness.Event  // outstanding approval request
	forwarded           map[string]bool
	announced           map[string]bool // approval requests already shown to the user
	expired             map[string]bool // approval requests that expired unanswered: never shown again
	m                   state           // the attempt's control: phase and its facts (machine.go), moved only by drive
	items               chan item       // the native stream's events while it is read; nil when the status poll follows the run
	revoked             <-chan struct{} // closes when a managed GPU grant is taken back
	release             func()          // gives the device back (nil once given)
	yield               <-chan struct{} // closes when the grant's holder is asked to pause (preempt.go)
	pauses              int             // pauses recorded for the run (PauseKey)
	checkpointed        string          // the last pause's checkpoint record (checkpoint.go), "" for none
	carryPublished      bool            // a handoff submitted by a new attempt: the published text starts the answer
	terminalSeen        bool            // an earlier attempt already emitted the terminal event
	ctrlLast            string          // the control stream id read so far
	reattached          bool            // the submission re-attached to the native run an earlier attempt started
	todoCalls           int             // todo tool calls seen completing in this attempt (progress.go)
	retentionReason     string          // set when the run was not resubmitted because it is past the harness's retention
	seenSeq, savedSeq   int64           // native seq handled by this attempt / recorded as published (seq.go)
	gap                 bool            // the resumed native stream skipped events (replay.truncated; published.go)

	// The run-record patch not yet written (Appwrite refused it): retried on a beat.
	patchStatus schema.RunStatus
	patchFields runstate.Patch
}

func now() time.Time { return time.Now() }

func (a *attempt) runs() schema.Table[schema.Run] {
	return schema.For[schema.Run](a.e.Store, schema.CollRuns)
}

func (a *attempt) binds() schema.Table[schema.RunBinding] {
	return schema.For[schema.RunBinding](a.e.Store, schema.CollRunBindings)
}

// errSettled: somebody else settled the run (a cancel of a run whose task was still
// queued, or an earlier attempt): this attempt has nothing left to write.
var errSettled = errors.New("executor: the run was settled elsewhere")

// execute is the attempt's lifecycle: load, claim, acquire the device, submit, consume.
func (a *attempt) execute(ctx context.Context) error {
	e := a.e
	// The reads before the claim go two at a time (each pair independent; nothing is
	// written until the claim): the model call waits for two round trips fewer.
	var (
		bind    *schema.RunBinding
		bindErr error
		read    = make(chan struct{})
	)
	go func() { defer close(read); bind, bindErr = a.binds().Get(ctx, a.runID) }()
	run, err := a.runs().Get(ctx, a.runID)
	<-read
	if errors.Is(err, schema.ErrNotFound) {
		return nil // nothing to do: the task outlived its run
	}
	if err != nil {
		return err
	}
	a.run, a.status = run, run.Status
	if run.Status.Terminal() {
		return nil
	}
	if bindErr != nil {
		return bindErr
	}
	a.bind = bind
	var (
		route    *schema.ModelRoute
		routeErr error
	)
	read = make(chan struct{})
	go func() {
		defer close(read)
		route, routeErr = runconfig.RouteRevision(ctx, e.Store, bind.RouteID, bind.RouteRevision)
	}()
	a.profile, err = runconfig.HarnessRevision(ctx, e.Store, bind.HarnessProfileID, bind.HarnessRevision)
	<-read
	if err != nil {
		return err
	}
	if a.route, err = route, routeErr; err != nil {
		return err
	}
	if a.h, err = e.Harness(a.profile); err != nil {
		return err
	}
	a.workDir, a.cwd = e.HermesWorkDir, e.HermesCwd

	if err := a.bg.Start(ctx, nil); err != nil {
		return err
	}
	defer a.bg.Stop()
	a.startHeartbeat()

	if err := a.claim(ctx); err != nil {
		if errors.Is(err, errSettled) {
			return nil
		}
		return err
	}
	defer a.log.Release(context.WithoutCancel(ctx))
	if e.MemberHome != nil && a.h.Kind() == harness.HermesKind {
		// The run owner's own Hermes (started on first use: it may take a while; the lease
		// is renewed meanwhile). The owner is the run record's, written by admission from
		// the verified JWT: nothing the request or the model says chooses it.
		home, err := e.MemberHome(ctx, a.profile, run.OwnerID)
		if err != nil {
			return fmt.Errorf("the run owner's hermes: %w", err)
		}
		defer home.Release()
		a.h, a.workDir, a.cwd, a.ownFolder = home.Harness, home.WorkDir, home.Cwd, true
	}
	a.forwarded, a.announced, a.expired = map[string]bool{}, map[string]bool{}, map[string]bool{}
	run = a.rec.Run() // the version the claim wrote: a cancel requested meanwhile is in it
	a.run = run
	// (waiting_for_resource: approved, it was re-acquiring its device before forwarding the
	// decision, park.go.)
	if (run.Status == schema.RunWaitingForApproval || run.Status == schema.RunWaitingForResource) &&
		bind.PendingApprovalID != nil && *bind.PendingApprovalID != "" {
		// An earlier attempt showed this request and the user has not answered it: the
		// resumed stream will not repeat it, but its expiry must still be noticed.
		a.pending = &harness.Event{Kind: harness.KindApprovalRequest, RequestID: *bind.PendingApprovalID}
		a.announced[*bind.PendingApprovalID] = true
	}

	if run.CancelRequested && (bind.NativeRunID == nil || *bind.NativeRunID == "") {
		return a.settled(a.finish(ctx, harness.Event{Kind: harness.KindCancelled}, "cancelled before it started"))
	}

	defer func() {
		if a.release != nil {
			a.release()
		}
	}()
	// A run still waiting for its owner's decision re-attaches without the device: it
	// acquires it when the decision comes (park.go).
	if a.stillParked(ctx) {
		_, _ = a.drive(ctx, input{kind: inParkedAtStart}) // no actions
	} else {
		g := a.acquire(ctx)
		switch {
		case errors.Is(g.err, errCancelledWaiting):
			return a.settled(a.cancelledWaiting(ctx))
		case errors.Is(g.err, eventlog.ErrFenced), errors.Is(g.err, errSettled):
			return a.settled(g.err)
		case g.err != nil && g.managed && ctx.Err() == nil:
			// The model could not be made ready (load failure, context budget, Immich):
			// the run fails with the reason rather than retrying blindly.
			return a.settled(a.finish(ctx, harness.Event{Kind: harness.KindFailed, Error: "the model could not be loaded: " + g.err.Error()}, ""))
		case g.err != nil:
			return a.settled(a.interrupted(ctx))
		}
		a.release, a.revoked, a.yield = g.release, g.revoked, g.yield
	}
	a.pauses = a.loadPauses(ctx)
	if e.Metrics != nil {
		e.Metrics.RunStarted(run.Role)
	}
	if !a.m.parked() {
		started := runstate.ClearQueue()
		if run.StartedAt == nil {
			started.StartedAt = runstate.Set(now())
		}
		if err := a.setStatus(ctx, schema.RunRunning, "starting", started); err != nil {
			return a.settled(err)
		}
	}

	if err := a.submit(ctx); err != nil {
		if errors.Is(err, eventlog.ErrFenced) || errors.Is(err, errSettled) {
			return a.settled(err)
		}
		if ctx.Err() != nil {
			return a.settled(a.interrupted(ctx))
		}
		if e.Metrics != nil {
			e.Metrics.HarnessError(string(a.h.Kind()))
		}
		if errors.Is(err, harness.ErrUnavailable) {
			_ = a.log.Flush(context.WithoutCancel(ctx))
			return err // retried by asynq with backoff
		}
		return a.settled(a.finish(ctx, harness.Event{Kind: harness.KindFailed, Error: "the agent could not start the run: " + err.Error()}, ""))
	}
	err = a.consume(ctx)
	for errors.Is(err, errPaused) {
		err = a.resumePaused(ctx)
	}
	return a.settled(err)
}

// claim writes the attempt token before anything else touches the run: in the bindings,
// in the event log's fence (Redis), and then one conditional write of the run record.
// That write is what fences Appwrite: every older attempt writes the record conditionally
// on a version it saw before this write, so Appwrite refuses it from here on.
func (a *attempt) claim(ctx context.Context) error {
	a.token = eventlog.NewToken()
	n := int64(1)
	if a.bind.Attempt != nil {
		n = *a.bind.Attempt + 1
	}
	if _, err := a.binds().Update(ctx, a.runID, map[string]any{"attempt": n, "attemptToken": a.token}); err != nil {
		return err
	}
	var err error
	if a.log, err = eventlog.Open(ctx, a.e.RDB, a.e.Store, a.run, a.token); err != nil {
		return err
	}
	a.rec = runstate.Track(a.runs(), a.run, a.log.Check)
	if err := a.rec.Change(ctx, "", runstate.Patch{HeartbeatAt: runstate.Set(now())}); err != nil {
		a.log.Release(context.WithoutCancel(ctx))
		if errors.Is(err, runstate.ErrTerminal) {
			return errSettled
		}
		return err
	}
	a.terminalSeen = a.lastEventTerminal(ctx)
	return nil
}

// settled maps the end of an attempt: a run settled elsewhere is done (nil), and its
// native run, if this attempt started one, is asked to stop.
func (a *attempt) settled(err error) error {
	if !errors.Is(err, errSettled) {
		return err
	}
	if a.rec != nil && a.rec.Status() == schema.RunCancelled {
		a.stop(context.Background())
	}
	return nil
}
