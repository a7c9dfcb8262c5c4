package executor

import (
	"context"
	"fmt"
	"strconv"
	"time"

	"privateassistant/agent/harness"
	"privateassistant/queue/eventlog"
)

// drive moves the attempt's state by one input (step, machine.go) and runs the actions in
// order: the only place the attempt's control does I/O. done is true when an action ended
// the consume loop, err is then its result; an action's error always ends it.
func (a *attempt) drive(ctx context.Context, in input) (done bool, err error) {
	next, acts := a.m.step(in)
	a.m = next
	for _, act := range acts {
		if done, err := a.do(ctx, act, in); done || err != nil {
			return true, err
		}
	}
	return false, nil
}

// do runs one action.
func (a *attempt) do(ctx context.Context, act action, in input) (done bool, err error) {
	switch act {
	case actInterrupt:
		return true, a.interrupted(ctx)
	case actFenced:
		return true, eventlog.ErrFenced
	case actBeat:
		return false, a.onBeat(ctx)
	case actStop:
		a.sendStop(ctx)
		return false, nil
	case actFailRevoked:
		return true, a.finish(ctx, harness.Event{Kind: harness.KindFailed, Error: fmt.Sprintf("the %s GPU stopped serving this run "+
			"(another model needed it after the drain bound, its model server crashed, or another agent took the device)", a.route.Device)}, "")
	case actFailStopBound:
		return true, a.finish(ctx, harness.Event{Kind: harness.KindFailed,
			Error: "the run did not stop in time; it may still be running on the harness"}, "")
	case actRecordPause:
		return a.recordPause(ctx)
	case actPaused:
		return true, errPaused
	case actPauseBound:
		a.e.log().Warn("the native run did not stop for the pause in time; resuming in its session anyway", "run", a.runID)
		return true, errPaused
	case actApply:
		if done, err := a.handle(ctx, in.ev); done || err != nil {
			return true, err
		}
		if in.ev.Seq > a.seenSeq {
			a.seenSeq = in.ev.Seq
		}
		return a.drive(ctx, input{kind: inApplied, boundary: a.boundary()})
	case actSkip:
		a.e.log().Warn("malformed native event skipped", "run", a.runID, "err", in.err)
		return false, nil
	case actFollowStatus:
		a.items = nil
		return false, nil
	case actReconcile:
		if err := a.reconcileOnce(ctx); err != nil {
			return true, err
		}
		return a.status.Terminal(), nil
	case actReadControls:
		for _, c := range a.readControls(ctx) {
			if err := a.control(ctx, c); err != nil {
				return true, err
			}
		}
		return false, nil
	case actFlush:
		return false, a.flushDeltas(ctx)
	case actCheckCancel:
		if r, err := a.runs().Get(ctx, a.runID); err == nil && r.CancelRequested {
			return a.drive(ctx, input{kind: inCancel, now: time.Now()})
		}
		return false, nil
	case actMarkCancelling:
		return false, a.markCancelling(ctx)
	case actSaveSeq:
		return false, a.saveSeq(ctx)
	case actGiveBack:
		a.release()
		a.release, a.revoked, a.yield = nil, nil, nil
		a.e.log().Info("device released while the run waits for approval", "run", a.runID, "device", a.route.Device)
		return false, nil
	}
	panic(fmt.Sprintf("executor: no driver for %v", act))
}

// boundary reports the facts of a turn boundary the state does not hold: no approval
// waits for an answer, and the native run can pause (a session; not the direct harness).
func (a *attempt) boundary() bool {
	return a.pending == nil && a.h.Kind() != harness.DirectKind && a.sessionID != "" && a.nativeID != ""
}

// recordPause records the next pause before the native run is stopped for it: a later
// attempt then submits the handoff, not the first turn (preempt.go). Unrecorded, the run
// keeps the device for now.
func (a *attempt) recordPause(ctx context.Context) (bool, error) {
	if err := a.flushDeltas(ctx); err != nil {
		return true, err
	}
	n := a.pauses + 1
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	r, err := setSeqScript.Run(cctx, a.e.RDB, []string{eventlog.AttemptKey(a.runID), PauseKey(a.runID)},
		a.token, strconv.Itoa(n), nativeSeqTTL.Milliseconds()).Int64()
	switch {
	case err != nil:
		a.e.log().Warn("pause not recorded; the run keeps the device for now", "run", a.runID, "err", err)
		return false, nil
	case r < 0:
		return true, eventlog.ErrFenced
	}
	a.pauses = n
	return a.drive(ctx, input{kind: inPauseRecorded, now: time.Now()})
}
