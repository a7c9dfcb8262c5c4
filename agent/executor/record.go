package executor

import (
	"context"
	"errors"
	"time"

	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// patch queues a change of the run record (to "" keeps the status) and writes it now.
// A write Appwrite could not take stays queued and is retried on the next 5th beat. It
// returns errSettled when the run is terminal already, ErrFenced when another attempt owns
// it, a *runstate.TransitionError for a move the state machine refuses (the patch is
// dropped), and nil otherwise.
func (a *attempt) patch(ctx context.Context, to schema.RunStatus, fields runstate.Patch) error {
	a.patchFields = a.patchFields.Merge(fields)
	if to != "" {
		a.patchStatus = to
	}
	return a.flushPatch(ctx)
}

// flushPatch writes the queued patch through the run state machine.
func (a *attempt) flushPatch(ctx context.Context) error {
	if a.patchStatus == "" && a.patchFields.Empty() {
		return nil
	}
	cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err := a.rec.Change(cctx, a.patchStatus, a.patchFields)
	var (
		te *runstate.TransitionError
		fe *schema.FieldError
	)
	for errors.As(err, &fe) {
		// A value that does not fit its field is our defect, not a passing fault: retried,
		// it would be refused forever and hold back every later write of the run (its
		// status included). The field is dropped, loudly, and the rest written.
		without, had := a.patchFields.Without(fe.Field)
		if !had {
			break
		}
		a.e.log().Error("run field refused; written without it", "run", a.runID, "err", err)
		a.patchFields = without
		err = a.rec.Change(cctx, a.patchStatus, a.patchFields)
	}
	switch {
	case err == nil:
	case errors.Is(err, schema.ErrInvalid):
		a.e.log().Error("run update refused; dropped", "run", a.runID, "err", err)
		err = nil
	case errors.As(err, &te):
	case errors.Is(err, runstate.ErrTerminal):
		err = errSettled
	case errors.Is(err, eventlog.ErrFenced):
	default:
		a.e.log().Warn("run update deferred", "run", a.runID, "err", err)
		return nil
	}
	a.patchStatus, a.patchFields = "", runstate.Patch{}
	return err
}

// pendingPatch reports whether a run-record write is still queued.
func (a *attempt) pendingPatch() bool { return a.patchStatus != "" || !a.patchFields.Empty() }

// emit appends an event to the run's log. Only a lost fence is an error: anything else
// leaves the event pending in the log for the next flush.
func (a *attempt) emit(ctx context.Context, data queue.EventData, durableNow bool) error {
	_, err := a.log.Emit(ctx, data, durableNow)
	return a.emitted(data, err)
}

// emitMarked emits data with the native position seq (seq.go) written in the same step as
// its append: one fenced round trip, and a position that never runs ahead of the event.
func (a *attempt) emitMarked(ctx context.Context, data queue.EventData, durableNow bool, seq int64) error {
	m := a.seqMark(seq)
	_, err := a.log.EmitMarked(ctx, data, durableNow, m)
	if err == nil && m != nil {
		a.savedSeq = seq
	}
	return a.emitted(data, err)
}

func (a *attempt) emitted(data queue.EventData, err error) error {
	if a.e.Metrics != nil {
		a.e.Metrics.EventEmitted(data.EventType())
	}
	if errors.Is(err, eventlog.ErrFenced) {
		return err
	}
	if err != nil {
		a.e.log().Warn("event buffered", "run", a.runID, "type", data.EventType(), "err", err)
	}
	return nil
}

// setStatus moves the run to a live status with a phase (and extra record fields) and
// tells followers. A move the state machine refuses (e.g. back to running while the run
// is cancelling) changes nothing and is not announced.
func (a *attempt) setStatus(ctx context.Context, status schema.RunStatus, phase string, extra runstate.Patch) error {
	if r, ok := extra.QueueReason.Get(); ok {
		// The card's reason is built from model names and counts: it must fit its field
		// (a refused write would leave the card stale), so it is cut, never refused.
		extra.QueueReason = runstate.Set(truncate(r, schema.SizeQueueReason-1))
	}
	p := extra.Merge(runstate.Patch{Phase: runstate.Set(phase), HeartbeatAt: runstate.Set(now())})
	var te *runstate.TransitionError
	if err := a.patch(ctx, status, p); errors.As(err, &te) {
		a.e.log().Debug("status change refused", "run", a.runID, "err", err)
		return nil
	} else if err != nil {
		return err
	}
	a.status = status
	a.log.SetStatus(status)
	d := queue.RunStatusData{Status: string(status), Phase: phase}
	if r, ok := extra.QueueReason.Get(); ok {
		d.QueueReason = &r
	}
	if n, ok := extra.QueuePosition.Get(); ok {
		d.QueuePosition = &n
	}
	return a.emit(ctx, d, true)
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
