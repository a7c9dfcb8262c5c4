package executor

import (
	"context"

	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
)

// approvalRequested shows a pending tool approval to the user (once) and forwards a
// decision that was recorded before it arrived.
func (a *attempt) approvalRequested(ctx context.Context, ev harness.Event) error {
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
		if err := a.setStatus(ctx, schema.RunWaitingForApproval, "waiting for approval", nil); err != nil {
			return err
		}
		if err := a.emit(ctx, queue.ApprovalRequestData{RequestID: ev.RequestID, Command: truncate(ev.Command, 2000),
			Description: truncate(ev.Description, 500), Choices: []string{"once", "deny"}}, true); err != nil {
			return err
		}
	}
	// A decision recorded before this attempt (or before this event) is forwarded now.
	if choice, err := a.e.RDB.Get(ctx, queue.ApprovalKey(a.runID, ev.RequestID)).Result(); err == nil && choice != "" {
		return a.forward(ctx, ev.RequestID, choice)
	}
	return nil
}

func (a *attempt) forward(ctx context.Context, requestID, choice string) error {
	if a.pending == nil || a.pending.RequestID != requestID || a.forwarded[requestID] {
		return nil
	}
	if err := a.h.Approve(ctx, a.nativeID, requestID, choice); err != nil {
		a.e.log().Warn("approval not forwarded", "run", a.runID, "request", requestID, "err", err)
		return nil // a 409 means it was already resolved; the stream says what happened
	}
	a.forwarded[requestID] = true
	return nil
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
