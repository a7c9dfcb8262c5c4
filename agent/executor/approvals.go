package executor

import (
	"context"
	"encoding/json"
	"errors"

	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// ExpiredReason is what the run's approval.responded says when nobody answered in time.
const ExpiredReason = "the approval expired before anyone answered; the harness denied the command"

// approvalRequested shows a pending tool approval to the user (once) and forwards a
// decision that was recorded before it arrived.
func (a *attempt) approvalRequested(ctx context.Context, ev harness.Event) error {
	if a.expired[ev.RequestID] {
		// Real Hermes keeps the stale approval in the run's status after it expired:
		// never ask again.
		return nil
	}
	if !a.announced[ev.RequestID] {
		seen, resolved := a.approvalInLog(ctx, ev.RequestID)
		if resolved {
			// An earlier attempt already recorded its outcome (answered or expired): the
			// status is stale.
			a.expired[ev.RequestID] = true
			return nil
		}
		a.announced[ev.RequestID] = seen // shown by an earlier attempt: not shown again
	}
	if err := a.flushDeltas(ctx); err != nil {
		return err
	}
	a.pending = &ev
	if !a.announced[ev.RequestID] {
		a.announced[ev.RequestID] = true
		// Bindings first, then the status: the API accepts a decision only when both say so.
		if _, err := a.binds().Update(ctx, a.runID, map[string]any{"pendingApprovalId": ev.RequestID}); err != nil {
			return err
		}
		if err := a.setStatus(ctx, schema.RunWaitingForApproval, "waiting for approval", runstate.Patch{}); err != nil {
			return err
		}
		if err := a.emit(ctx, queue.ApprovalRequestData{RequestID: ev.RequestID, Command: truncate(ev.Command, 2000),
			Description: truncate(ev.Description, 500), Choices: []string{"once", "deny"}}, true); err != nil {
			return err
		}
	} else if a.status != schema.RunWaitingForApproval {
		// Shown by an earlier attempt; this one moved the status on while re-attaching.
		if err := a.setStatus(ctx, schema.RunWaitingForApproval, "waiting for approval", runstate.Patch{}); err != nil {
			return err
		}
	}
	// A decision recorded before this attempt (or before this event) is forwarded now.
	if choice, err := a.e.RDB.Get(ctx, queue.ApprovalKey(a.runID, ev.RequestID)).Result(); err == nil && choice != "" {
		return a.forward(ctx, ev.RequestID, choice)
	}
	// Nothing is in flight while Hermes waits for the decision: the device goes back to
	// the scheduler until it is made (park.go).
	a.park(ctx)
	return nil
}

// approvalInLog reports whether the run's event log already holds an approval.request
// (seen) and an approval.responded (resolved) for the request id: a later attempt learns
// from it what an earlier one showed and what was settled.
func (a *attempt) approvalInLog(ctx context.Context, requestID string) (seen, resolved bool) {
	evs, _, err := queue.ReadEvents(ctx, a.e.RDB, a.runID, 0, 0)
	if err != nil {
		return false, false
	}
	for _, e := range evs {
		var d struct {
			RequestID string `json:"requestId"`
		}
		if e.Type != queue.EventApprovalRequest && e.Type != queue.EventApprovalResponse {
			continue
		}
		if json.Unmarshal(e.Data, &d) != nil || d.RequestID != requestID {
			continue
		}
		if e.Type == queue.EventApprovalRequest {
			seen = true
		} else {
			resolved = true
		}
	}
	return seen, resolved
}

func (a *attempt) forward(ctx context.Context, requestID, choice string) error {
	if a.pending == nil || a.pending.RequestID != requestID || a.forwarded[requestID] {
		return nil
	}
	// The device first: Hermes calls the model again as soon as it has the decision.
	if err := a.unpark(ctx); err != nil {
		return err
	}
	err := a.h.Approve(ctx, a.nativeID, requestID, choice)
	if errors.Is(err, harness.ErrApprovalExpired) {
		// Hermes no longer waits for it (409 approval_not_pending): it timed out and the
		// command was denied. Say so; the user's late answer changes nothing.
		return a.approvalExpired(ctx)
	}
	if err != nil {
		a.e.log().Warn("approval not forwarded", "run", a.runID, "request", requestID, "err", err)
		return nil // transient: the stream (or the status) says what happened
	}
	a.forwarded[requestID] = true
	return nil
}

// approvalExpired records that the pending approval expired unanswered: Hermes denied the
// command and went on, but announces nothing and keeps the stale approval in the run's
// status. The run says so once (approval.responded with choice deny and the reason), goes
// back to running, and the request is never shown again.
func (a *attempt) approvalExpired(ctx context.Context) error {
	if a.pending == nil {
		return nil
	}
	id := a.pending.RequestID
	a.pending = nil
	a.turnBreak = true
	a.expired[id], a.forwarded[id] = true, true
	a.e.log().Info("approval expired unanswered", "run", a.runID, "request", id)
	if err := a.flushDeltas(ctx); err != nil {
		return err
	}
	_, _ = a.binds().Update(ctx, a.runID, map[string]any{"pendingApprovalId": nil})
	if err := a.emit(ctx, queue.ApprovalRespondedData{RequestID: id, Choice: "deny", Reason: ExpiredReason}, true); err != nil {
		return err
	}
	if err := a.unpark(ctx); err != nil {
		return err
	}
	return a.setStatus(ctx, schema.RunRunning, "the approval expired; the command was denied", runstate.Patch{})
}

// control applies one command from the run's control stream.
func (a *attempt) control(ctx context.Context, c queue.Control) error {
	switch c.Type {
	case queue.ControlCancel:
		return a.cancel(ctx)
	case queue.ControlApproval:
		if c.Choice != "once" && c.Choice != "deny" {
			return nil
		}
		return a.forward(ctx, c.RequestID, c.Choice)
	}
	return nil
}
