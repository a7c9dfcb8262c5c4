package executor

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// Waiting for a person never holds a device (issue 32 item 1). While the run waits for an
// approval, Hermes is blocked on the decision and nothing is in flight on the model: the
// run gives its device back to the scheduler (park). The decision is forwarded only once
// the run holds the device again (unpark): it queues through the same GPU manager for the
// model of its pinned route, the card saying so and what swap that may cost, and the same
// native run then goes on. An approval Hermes lets expire also unparks (late: Hermes went
// on without a decision, and its model call may be refused by the gateway until then).

// DeviceLoads is a DeviceAcquirer that also says which model a device has loaded and how
// long its last swap took (gpu.Pool.Loaded): a parked run's card shows the swap its
// re-acquisition may cost.
type DeviceLoads interface {
	Loaded(device string) (model string, lastSwap time.Duration)
}

// park gives the device back while the run waits for its owner's decision (a run
// following its native run with the device held: machine.go's inPark).
func (a *attempt) park(ctx context.Context) {
	_, _ = a.drive(ctx, input{kind: inPark, held: a.release != nil}) // actGiveBack only: it never ends anything
}

// stillParked reports whether a new attempt finds its run waiting for the owner's
// decision on the harness (the request an earlier attempt showed, no decision recorded):
// it then re-attaches without acquiring the device.
func (a *attempt) stillParked(ctx context.Context) bool {
	if a.pending == nil || a.bind.NativeRunID == nil || *a.bind.NativeRunID == "" {
		return false
	}
	if choice, err := a.e.RDB.Get(ctx, queue.ApprovalKey(a.runID, a.pending.RequestID)).Result(); err != nil && !errors.Is(err, redis.Nil) || choice != "" {
		return false // decided (or unknown): the device first, as usual
	}
	st, err := a.h.Status(ctx, *a.bind.NativeRunID)
	return err == nil && st.State == harness.StateWaitingForApproval && st.Pending != nil && st.Pending.RequestID == a.pending.RequestID
}

// parkedReason is what the card says while a decided run waits for its device again.
func (a *attempt) parkedReason() string {
	r := fmt.Sprintf("approved; waiting for the %s GPU again (released while waiting for the approval)", a.route.Device)
	if l, ok := a.e.GPU.(DeviceLoads); ok && a.e.GPU.Manages(a.route.Device) {
		switch loaded, swap := l.Loaded(a.route.Device); {
		case loaded == "" || loaded == a.route.BackendModel:
		case swap > 0:
			r += fmt.Sprintf("; the GPU now serves %s: %s loads again (the last swap took %s)", loaded, a.route.BackendModel, swap.Round(time.Second))
		default:
			r += fmt.Sprintf("; the GPU now serves %s: %s loads again", loaded, a.route.BackendModel)
		}
	}
	return r
}

// errUnparkSettled: unpark settled the run itself (cancelled or failed while waiting).
var errUnparkSettled = fmt.Errorf("%w (while re-acquiring the device)", errSettled)

// unpark acquires the device again for a parked run (before its decision goes to Hermes).
// A run settled meanwhile returns errSettled; a nil error means it holds the device.
func (a *attempt) unpark(ctx context.Context) error {
	if !a.m.parked() {
		return nil
	}
	if err := a.flushDeltas(ctx); err != nil {
		return err
	}
	if err := a.setStatus(ctx, schema.RunWaitingForResource, "waiting for resource",
		runstate.Patch{QueueReason: runstate.Set(a.parkedReason()), QueuePosition: runstate.Clear[int64]()}); err != nil {
		return err
	}
	g := a.acquire(ctx)
	switch {
	case errors.Is(g.err, errCancelledWaiting):
		if err := a.cancelledWaiting(ctx); err != nil {
			return err
		}
		return errUnparkSettled
	case errors.Is(g.err, eventlog.ErrFenced), errors.Is(g.err, errSettled):
		return g.err
	case g.err != nil && g.managed && ctx.Err() == nil:
		a.stop(ctx)
		if err := a.finish(ctx, harness.Event{Kind: harness.KindFailed, Error: "the model could not be loaded again after the approval: " + g.err.Error()}, ""); err != nil {
			return err
		}
		return errUnparkSettled
	case g.err != nil:
		if err := a.interrupted(ctx); err != nil {
			return err
		}
		return fmt.Errorf("executor: re-acquiring the device: %w", g.err)
	}
	a.release, a.revoked, a.yield = g.release, g.revoked, g.yield
	_, _ = a.drive(ctx, input{kind: inUnparked}) // no actions
	a.e.log().Info("device re-acquired after the approval wait", "run", a.runID, "device", a.route.Device)
	return a.setStatus(ctx, schema.RunRunning, "resuming after the approval", runstate.ClearQueue())
}

// movesOn reports whether ev shows the native run going on (so it needs its device).
func movesOn(ev harness.Event) bool {
	switch ev.Kind {
	case harness.KindApprovalRequest, harness.KindUnknown:
		return false
	}
	return !harness.Terminal(ev.Kind)
}
