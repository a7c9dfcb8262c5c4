// Package control turns a user's cancel or approval into durable state and a command for
// the run's executor.
//
// Cancel: cancelRequested is set on the run record first (the record of truth the
// executor checks on claim). A task still waiting in the queue is deleted and the run is
// marked cancelled right here (no executor ever saw it). Otherwise a cancel command goes
// on the run's control stream, with asynq's CancelProcessing as a fast path; the
// executor stops Hermes and settles the run. Repeats are harmless.
//
// Approval: accepted only while the run waits for approval and the request id matches the
// pending one exactly; recorded once (a Redis SET NX and the control command in one
// script, so a crash cannot record without sending), then delivered by the executor.
package control

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"privateassistant/fault"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// Controller holds the queue clients.
type Controller struct {
	RDB       redis.UniversalClient
	Inspector *asynq.Inspector
}

// CancelResult is what the API answers (202).
type CancelResult struct {
	RunID           string `json:"runId"`
	Status          string `json:"status"`
	CancelRequested bool   `json:"cancelRequested"`
}

// Errors the API maps to its envelope (see fault). A run of another owner is
// reported exactly like a missing one: fault.Missing("run").
var (
	ErrApprovalNotPending     = fault.Errorf(fault.Conflict, "approval_not_pending", "the run is not waiting for approval")
	ErrApprovalMismatch       = fault.Errorf(fault.Conflict, "approval_request_mismatch", "that approval request is not the pending one")
	ErrApprovalAlreadyDecided = fault.Errorf(fault.Conflict, "approval_already_decided", "a different decision was already recorded for this request")
)

func unavailable(what string, cause error) error {
	return fault.E(fault.Unavailable, what+"_unavailable", what+" is unavailable; try again", cause).Retry(2 * time.Second)
}

func mapStore(err error, what string) error {
	switch {
	case errors.Is(err, schema.ErrNotFound):
		return fault.Missing(what, err)
	case errors.Is(err, schema.ErrUnavailable):
		return unavailable("appwrite", err)
	}
	return err
}

// Cancel requests cancellation of an owned run.
func (c *Controller) Cancel(ctx context.Context, st *schema.Store, owner, runID string) (CancelResult, error) {
	runs := schema.For[schema.Run](st, schema.CollRuns)
	run, err := runs.GetOwned(ctx, owner, runID)
	if err != nil {
		return CancelResult{}, mapStore(err, "run")
	}
	res := CancelResult{RunID: runID, Status: string(run.Status), CancelRequested: run.CancelRequested}
	if schema.IsTerminal(run.Status) {
		return res, nil
	}
	if !run.CancelRequested {
		if _, err := runs.Update(ctx, runID, map[string]any{"cancelRequested": true}); err != nil {
			return res, mapStore(err, "run")
		}
	}
	res.CancelRequested = true
	bind, err := schema.For[schema.RunBinding](st, schema.CollRunBindings).Get(ctx, runID)
	if err != nil {
		return res, mapStore(err, "run")
	}
	// Still waiting in the queue and never started natively: take it out, and settle the
	// run here. A run with a native run (its task waits for a retry, or was handed back
	// by a shutdown) is the executor's to cancel: only it can stop the native run.
	if started := bind.NativeRunID != nil && *bind.NativeRunID != ""; !started {
		if err := c.Inspector.DeleteTask(bind.Queue, runID); err == nil {
			settled, err := c.settleCancelled(ctx, st, run)
			if err != nil {
				return res, err
			}
			if settled {
				res.Status = string(schema.RunCancelled)
			}
			return res, nil
		}
	}
	// Running (or about to): tell the executor. The record already says cancel, so even
	// a lost command is found on the executor's next check.
	if err := queue.SendControl(ctx, c.RDB, runID, queue.Control{Type: queue.ControlCancel, By: owner}); err != nil {
		return res, nil // durable in Appwrite; the executor polls the record too
	}
	_ = c.Inspector.CancelProcessing(runID)
	return res, nil
}

// settleCancelled settles a run whose task it just deleted from the queue: no executor
// holds it, so control claims the run's fence through the event log (the only writer of
// a run's stream and events), appends the terminal event there, and moves the record to
// cancelled through the run state machine. A ghost executor that starts later claims a
// newer fence and finds the run terminal. settled is false when an executor claimed the
// run first (it sees cancelRequested and settles the cancel itself).
func (c *Controller) settleCancelled(ctx context.Context, st *schema.Store, run *schema.Run) (settled bool, err error) {
	l, err := eventlog.Open(ctx, c.RDB, st, run, eventlog.NewToken())
	if err != nil {
		return false, unavailable("queue", err)
	}
	defer l.Release(context.WithoutCancel(ctx))
	const reason = "cancelled before it started"
	l.SetStatus(schema.RunCancelled)
	_, err = l.Emit(ctx, queue.RunEndData{Type: queue.EventRunCancelled, Status: string(schema.RunCancelled), Reason: reason}, true)
	if errors.Is(err, eventlog.ErrFenced) {
		return false, nil
	}
	if err != nil {
		return false, unavailable("queue", err)
	}
	if err := l.Flush(ctx); errors.Is(err, eventlog.ErrFenced) {
		return false, nil
	} else if err != nil {
		return false, mapStore(err, "run")
	}
	rec := runstate.Track(schema.For[schema.Run](st, schema.CollRuns), run, l.Check)
	err = rec.Change(ctx, schema.RunCancelled, runstate.ClearQueue().Merge(runstate.Patch{FinishedAt: runstate.Set(time.Now()),
		LastSequence: runstate.Set(l.Last()), Phase: runstate.Set("cancelled")}))
	switch {
	case errors.Is(err, eventlog.ErrFenced):
		return false, nil
	case errors.Is(err, runstate.ErrTerminal):
		return rec.Status() == schema.RunCancelled, nil
	case err != nil:
		return false, mapStore(err, "run")
	}
	return true, nil
}

// approveScript records the decision once and queues the command in the same step.
var approveScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  if cur == ARGV[1] then return 0 end
  return -1
end
redis.call('SET', KEYS[1], ARGV[1], 'EX', 604800)
redis.call('XADD', KEYS[2], '*', 'c', ARGV[2])
return 1
`)

// Approval choices the API accepts.
var Choices = []string{"once", "deny"}

// Approve records and delivers one decision on a pending approval request.
func (c *Controller) Approve(ctx context.Context, st *schema.Store, owner, runID, requestID, choice string) error {
	run, err := schema.For[schema.Run](st, schema.CollRuns).GetOwned(ctx, owner, runID)
	if err != nil {
		return mapStore(err, "run")
	}
	if run.Status != schema.RunWaitingForApproval {
		return fault.E(fault.Conflict, ErrApprovalNotPending.Code, fmt.Sprintf("the run is %s, not waiting for approval", run.Status), ErrApprovalNotPending)
	}
	bind, err := schema.For[schema.RunBinding](st, schema.CollRunBindings).Get(ctx, runID)
	if err != nil {
		return mapStore(err, "run")
	}
	if bind.PendingApprovalID == nil || *bind.PendingApprovalID != requestID {
		return ErrApprovalMismatch
	}
	cmd, _ := json.Marshal(queue.Control{Type: queue.ControlApproval, RequestID: requestID, Choice: choice, By: owner})
	n, err := approveScript.Run(ctx, c.RDB, []string{queue.ApprovalKey(runID, requestID), queue.ControlKey(runID)}, choice, cmd).Int()
	if err != nil {
		return unavailable("queue", err)
	}
	if n == -1 {
		return ErrApprovalAlreadyDecided
	}
	return nil
}
