package executor

import (
	"context"

	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// handle applies one native event; done is true once the run is settled.
func (a *attempt) handle(ctx context.Context, ev harness.Event) (bool, error) {
	if a.pending != nil && expires(ev, a.pending.RequestID) {
		// The native run went on without an answer: the approval expired (Hermes denies
		// the command after approvals.timeout and says nothing on the stream).
		if err := a.approvalExpired(ctx); err != nil {
			return false, err
		}
	}
	if a.m.parked() && movesOn(ev) {
		// Hermes went on without the decision passing through us: the device first.
		if err := a.unpark(ctx); err != nil {
			return false, err
		}
	}
	if isReplayGap(ev) {
		// Events between our position and the oldest Hermes still holds are lost to us:
		// finish republishes the answer whole (published.go).
		a.gap = true
		a.e.log().Warn("the native stream skipped events (replay truncated); the answer is republished when the run ends", "run", a.runID)
		return false, nil
	}
	switch ev.Kind {
	case harness.KindDelta:
		first := a.text.Len() == 0 && a.deltas.Len() == 0
		a.noteTurn(ev.Text)
		a.deltas.WriteString(ev.Text)
		a.text.WriteString(ev.Text)
		if first {
			// The first token goes out at once, and with it the position it completes.
			return false, a.flushDeltasThrough(ctx, max(ev.Seq, a.seenSeq))
		}
		return false, nil
	case harness.KindToolStarted:
		a.turnBreak = true
		if err := a.flushDeltas(ctx); err != nil {
			return false, err
		}
		if err := a.patch(ctx, "", runstate.Patch{Phase: runstate.Set("running tool: " + ev.Tool)}); err != nil {
			return false, err
		}
		return false, a.emit(ctx, queue.ToolStartedData{Tool: ev.Tool, Preview: truncate(ev.Preview, 500)}, true)
	case harness.KindToolCompleted:
		if err := a.flushDeltas(ctx); err != nil {
			return false, err
		}
		if err := a.patch(ctx, "", runstate.Patch{Phase: runstate.Set("thinking")}); err != nil {
			return false, err
		}
		if err := a.emit(ctx, queue.ToolCompletedData{Tool: ev.Tool, DurationSec: ev.Duration, Error: ev.ToolError}, true); err != nil {
			return false, err
		}
		if harness.TodoTool(ev.Tool) {
			a.todoCalls++
			if !ev.ToolError {
				return false, a.taskProgress(ctx)
			}
		}
		return false, nil
	case harness.KindApprovalRequest:
		a.turnBreak = true
		return false, a.approvalRequested(ctx, ev)
	case harness.KindApprovalResponded:
		a.turnBreak = true
		if err := a.flushDeltas(ctx); err != nil {
			return false, err
		}
		a.pending = nil
		_, _ = a.binds().Update(ctx, a.runID, map[string]any{"pendingApprovalId": nil})
		if err := a.setStatus(ctx, schema.RunRunning, "thinking", runstate.Patch{}); err != nil {
			return false, err
		}
		return false, a.emit(ctx, queue.ApprovalRespondedData{RequestID: ev.RequestID, Choice: ev.Choice}, true)
	case harness.KindUnknown:
		return false, nil // forwarded nowhere: only normalized events reach users
	}
	if harness.Terminal(ev.Kind) {
		return true, a.finish(ctx, ev, "")
	}
	return false, nil
}

// expires reports whether ev, arriving while requestID waits for an answer, shows that
// the native run went on without one. A run waiting for approval is blocked, so any
// progress (text, a tool, completion, another request) means it was not approved in time.
func expires(ev harness.Event, requestID string) bool {
	switch ev.Kind {
	case harness.KindDelta, harness.KindToolStarted, harness.KindToolCompleted, harness.KindCompleted:
		return true
	case harness.KindApprovalRequest:
		return ev.RequestID != requestID
	}
	return false
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

// flushDeltas emits the text gathered since the last delta event (coalescing), marked
// with the native position every handled event completes (seq.go).
func (a *attempt) flushDeltas(ctx context.Context) error {
	return a.flushDeltasThrough(ctx, a.seenSeq)
}

// flushDeltasThrough is flushDeltas for a caller that knows the native events through
// seq are all in the log once the text is (the delta being handled is the text's last).
func (a *attempt) flushDeltasThrough(ctx context.Context, seq int64) error {
	if a.deltas.Len() == 0 {
		return nil
	}
	text := a.deltas.String()
	a.deltas.Reset()
	return a.emitMarked(ctx, queue.MessageDeltaData{Text: text}, false, seq)
}
