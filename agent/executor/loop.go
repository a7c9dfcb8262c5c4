package executor

import (
	"context"
	"errors"
	"time"

	"privateassistant/agent/harness"
	"privateassistant/internal/startstop"
	"privateassistant/queue"
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

// consume follows the native run to its end. It is the attempt's driver loop: native
// events, control commands, beats, delta windows and status polls arrive here as inputs
// of the state machine (machine.go); drive runs what each calls for, and every write
// happens on this goroutine. The only goroutine it starts is the native stream's pump.
func (a *attempt) consume(ctx context.Context) error {
	var readers startstop.Runner
	if err := readers.Start(ctx, nil); err != nil {
		return err
	}
	defer readers.Stop()

	a.items = nil
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
		items := make(chan item, 64)
		a.items = items
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
		if a.items == nil {
			poll = pollTick.C
		}
		var in input
		select {
		case <-ctx.Done():
			in = input{kind: inInterrupted}
		case <-a.hb.lost:
			in = input{kind: inLeaseLost}
		case <-a.hb.beat:
			in = input{kind: inBeat}
		case <-a.revoked:
			in = input{kind: inRevoked}
		case <-a.yield:
			a.yield = nil // asked once: the channel stays closed
			in = input{kind: inYield, boundary: a.boundary()}
		case it, ok := <-a.items:
			switch {
			case !ok:
				in = input{kind: inStreamEnded}
			case errors.Is(it.err, harness.ErrMalformed):
				in = input{kind: inMalformed, err: it.err}
			case it.err != nil:
				in = input{kind: inStreamFailed, err: it.err}
			default:
				in = input{kind: inEvent, ev: it.ev}
			}
		case <-poll:
			in = input{kind: inPoll}
		case <-ctrlTick.C:
			in = input{kind: inControlDue}
		case <-deltaTick.C:
			in = input{kind: inDeltaWindow, now: time.Now()}
		case <-cancelTick.C:
			in = input{kind: inCancelCheck}
		}
		if done, err := a.drive(ctx, in); done || err != nil {
			return err
		}
	}
}
