package executor

import (
	"context"
	"errors"
	"time"

	"privateassistant/agent/harness"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// cancel is the owner's cancel reaching the attempt: it moves to cancelling (machine.go),
// records it and stops the native run; a repeat does nothing.
func (a *attempt) cancel(ctx context.Context) error {
	_, err := a.drive(ctx, input{kind: inCancel, now: time.Now()})
	return err
}

// markCancelling records the run as cancelling, with the text gathered so far first.
func (a *attempt) markCancelling(ctx context.Context) error {
	if err := a.flushDeltas(ctx); err != nil {
		return err
	}
	return a.setStatus(context.WithoutCancel(ctx), schema.RunCancelling, "cancelling", runstate.Patch{})
}

// stop asks the harness to stop the native run unless it already took a stop.
func (a *attempt) stop(ctx context.Context) {
	_, _ = a.drive(ctx, input{kind: inStopDue}) // actStop only: it never ends anything
}

// sendStop (actStop) asks the harness to stop, on a context of its own: the handler's may
// already be cancelled (asynq's CancelProcessing is how a cancel often arrives). A failed
// stop is retried on the next tick.
func (a *attempt) sendStop(ctx context.Context) {
	if a.nativeID == "" {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := a.h.Stop(sctx, a.nativeID); err != nil {
		a.e.log().Warn("stop failed; retrying", "run", a.runID, "err", err)
		return
	}
	a.m, _ = a.m.step(input{kind: inStopped}) // no actions
}

// interrupted handles a cancelled context: a user's cancel still stops the native run;
// anything else (shutdown, lease loss, a Redis outage) leaves it running for the next
// attempt to re-attach.
func (a *attempt) interrupted(ctx context.Context) error {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.e.StopWait+10*time.Second)
	defer cancel()
	if err := a.flushDeltas(bg); err != nil {
		return err
	}
	if r, err := a.runs().Get(bg, a.runID); err == nil && r.CancelRequested && a.nativeID != "" {
		if err := a.cancel(bg); err != nil {
			return err
		}
		t := time.NewTicker(a.e.ReconcileEvery)
		defer t.Stop()
		for time.Now().Before(a.m.deadline) {
			a.stop(bg)
			if err := a.reconcileOnce(bg); err != nil {
				return err
			}
			if a.status.Terminal() {
				return nil
			}
			select {
			case <-t.C:
			case <-bg.Done():
				return ctx.Err()
			}
		}
	}
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer fcancel()
	_ = a.log.Flush(fctx)
	if err := a.flushPatch(fctx); errors.Is(err, errSettled) {
		return err
	}
	return ctx.Err()
}

// reconcileOnce reads the native status; a terminal one settles the run.
func (a *attempt) reconcileOnce(ctx context.Context) error {
	st, err := a.h.Status(ctx, a.nativeID)
	if errors.Is(err, harness.ErrNotFound) {
		msg := "the harness no longer knows this run"
		if a.retentionReason != "" {
			msg += "; " + a.retentionReason
		}
		return a.finish(ctx, harness.Event{Kind: harness.KindInterrupted, Error: msg}, "")
	}
	if err != nil {
		return nil // transient: try again on the next tick
	}
	if st.State == harness.StateWaitingForApproval && st.Pending != nil {
		return a.approvalRequested(ctx, *st.Pending)
	}
	if !st.State.Terminal() {
		if a.status == schema.RunWaitingForApproval && st.State == harness.StateRunning {
			a.pending = nil
			return a.setStatus(ctx, schema.RunRunning, "thinking", runstate.Patch{})
		}
		return nil
	}
	ev := harness.Event{Kind: st.State.Kind(), Error: st.Error, Usage: st.Usage}
	if st.Output != nil {
		ev.Text = *st.Output
	}
	if ev.Kind == harness.KindCompleted && ev.Text == "" && a.sessionID != "" {
		if last, err := a.h.LastAssistant(ctx, a.sessionID); err == nil {
			ev.Text = last
		}
	}
	return a.finish(ctx, ev, "")
}
