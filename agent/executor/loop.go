package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"privateassistant/agent/harness"
	"privateassistant/internal/startstop"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
)

type item struct {
	ev  harness.Event
	err error
}

// pump reads the native stream into a channel until it ends.
func pump(ctx context.Context, st harness.Stream, out chan<- item) {
	defer close(out)
	for {
		ev, err := st.Next()
		select {
		case out <- item{ev, err}:
		case <-ctx.Done():
			return
		}
		if err != nil && !errors.Is(err, harness.ErrMalformed) {
			return
		}
		if err == nil && harness.Terminal(ev.Kind) {
			return
		}
	}
}

// readControls returns the commands on the run's control stream after a.ctrlLast (from
// the start on the first call: commands sent before this attempt began still count;
// repeats are harmless). It does not block: the loop polls it every ControlEvery.
func (a *attempt) readControls(ctx context.Context) []queue.Control {
	if a.ctrlLast == "" {
		a.ctrlLast = "0"
	}
	cs, next, err := queue.ReadControl(ctx, a.e.RDB, a.runID, a.ctrlLast, -1)
	if err != nil {
		return nil // Redis is unavailable: the next tick tries again
	}
	a.ctrlLast = next
	return cs
}

// consume follows the native run to its end. Its select is the attempt's one writer:
// native events, control commands, beats, delta windows and status polls all arrive here.
// The only goroutine it starts is the native stream's pump.
func (a *attempt) consume(ctx context.Context) error {
	var readers startstop.Runner
	if err := readers.Start(ctx, nil); err != nil {
		return err
	}
	defer readers.Stop()

	var items chan item
	// Resume after the last native event an earlier attempt published (seq.go); a native
	// run this attempt started (not re-attached) streams from its start.
	after := int64(-1)
	if a.reattached {
		after = a.loadSeq(ctx, a.nativeID)
	}
	a.seenSeq, a.savedSeq = after, after
	if a.reattached || a.carryPublished {
		// The text the user saw from earlier attempts is the start of this one's answer
		// (published.go); so is the text before a pause (preempt.go).
		a.text.WriteString(a.publishedText(ctx))
		a.carryPublished = false
	}
	st, err := a.h.Stream(readers.Context(), a.nativeID, after)
	switch {
	case err == nil:
		if a.reattached && after < 0 {
			// Re-attached without a recorded position: the stream starts over, and so
			// does the text the user sees.
			if err := a.emit(ctx, queue.MessageResetData{Reason: "the answer is replayed after an interruption"}, true); err != nil {
				st.Close()
				return err
			}
			a.text.Reset()
		}
		items = make(chan item, 64)
		readers.Go(func(ctx context.Context) { pump(ctx, st, items) })
		defer st.Close() // before readers.Stop: unblocks the pump's Next
	case errors.Is(err, harness.ErrNotAttachable):
		// Consumed by an earlier attempt, dropped or expired: reconcile by status.
	default:
		a.e.log().Warn("stream unavailable; reconciling by status", "run", a.runID, "err", err)
	}
	if p := a.pending; p != nil {
		// Still waiting for the answer to a request an earlier attempt showed: the status
		// says so again (submit moved it on) and a decision recorded meanwhile goes out.
		a.pending = nil
		if err := a.approvalRequested(ctx, *p); err != nil {
			return err
		}
	}
	deltaTick := time.NewTicker(a.e.DeltaWindow)
	defer deltaTick.Stop()
	pollTick := time.NewTicker(a.e.ReconcileEvery)
	defer pollTick.Stop()
	cancelTick := time.NewTicker(2 * time.Second)
	defer cancelTick.Stop()
	ctrlTick := time.NewTicker(a.e.ControlEvery)
	defer ctrlTick.Stop()

	for {
		var poll <-chan time.Time
		if items == nil {
			poll = pollTick.C
		}
		select {
		case <-ctx.Done():
			return a.interrupted(ctx)
		case <-a.hb.lost:
			return eventlog.ErrFenced
		case <-a.hb.beat:
			if err := a.onBeat(ctx); err != nil {
				return err
			}
		case <-a.revoked:
			// The device was taken from this run: stop the native run and say why.
			a.sendStop(ctx)
			return a.finish(ctx, harness.Event{Kind: harness.KindFailed, Error: fmt.Sprintf("the %s GPU stopped serving this run "+
				"(another model needed it after the drain bound, its model server crashed, or another agent took the device)", a.route.Device)}, "")
		case <-a.yield:
			// Another job needs the device: pause at the next turn boundary (preempt.go).
			a.yield, a.yieldAsked = nil, true
			if err := a.maybePause(ctx); err != nil {
				return err
			}
		case it, ok := <-items:
			if !ok {
				items = nil
				if a.pausing {
					return errPaused
				}
				continue
			}
			if a.pausing && (it.err != nil && !errors.Is(it.err, harness.ErrMalformed) || it.err == nil && it.ev.Kind == harness.KindCancelled) {
				// The native run stopped for the pause: its cancelled terminal is not ours.
				return errPaused
			}
			if it.err != nil {
				if errors.Is(it.err, harness.ErrMalformed) {
					a.e.log().Warn("malformed native event skipped", "run", a.runID, "err", it.err)
					continue
				}
				// EOF is not completion: from here on, the status decides.
				items = nil
				if err := a.reconcileOnce(ctx); err != nil {
					return err
				}
				if a.status.Terminal() {
					return nil
				}
				continue
			}
			done, err := a.handle(ctx, it.ev)
			if err != nil || done {
				return err
			}
			if it.ev.Seq > a.seenSeq {
				a.seenSeq = it.ev.Seq
			}
			if err := a.saveSeq(ctx); err != nil {
				return err
			}
			if err := a.maybePause(ctx); err != nil {
				return err
			}
		case <-poll:
			if a.pausing {
				return errPaused
			}
			if err := a.reconcileOnce(ctx); err != nil {
				return err
			}
			if a.status.Terminal() {
				return nil
			}
		case <-ctrlTick.C:
			for _, c := range a.readControls(ctx) {
				if err := a.control(ctx, c); err != nil {
					return err
				}
			}
		case <-deltaTick.C:
			if err := a.flushDeltas(ctx); err != nil {
				return err
			}
			if a.cancelling || a.pausing {
				a.sendStop(ctx)
			}
			if a.pausing && time.Now().After(a.pauseDeadline) {
				a.e.log().Warn("the native run did not stop for the pause in time; resuming in its session anyway", "run", a.runID)
				return errPaused
			}
			if a.cancelling && time.Now().After(a.stopDeadline) {
				return a.finish(ctx, harness.Event{Kind: harness.KindFailed,
					Error: "the run did not stop in time; it may still be running on the harness"}, "")
			}
		case <-cancelTick.C:
			r, err := a.runs().Get(ctx, a.runID)
			if err == nil && r.CancelRequested && !a.cancelling {
				if err := a.cancel(ctx); err != nil {
					return err
				}
			}
		}
	}
}
