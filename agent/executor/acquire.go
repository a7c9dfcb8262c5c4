package executor

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// grant is the result of acquiring the run's device.
type grant struct {
	release func()
	revoked <-chan struct{} // nil for plain slots
	yield   <-chan struct{} // closes when the holder is asked to pause (nil: never)
	managed bool            // the GPU manager served it (a failure is the model's, not ours)
	err     error
}

type waitNotice struct {
	pos    int
	reason string
}

// acquire takes a slot on the run's device, or a grant from the GPU manager with the
// route's model loaded. The acquisition runs in a goroutine; its waiting notices (which
// the GPU manager calls from its own goroutine) are posted here, and this loop writes
// them: the latest one wins, and none is written after the grant arrives.
func (a *attempt) acquire(ctx context.Context) grant {
	var (
		mu     sync.Mutex
		latest *waitNotice
	)
	signal := make(chan struct{}, 1)
	onWait := func(pos int, reason string) {
		mu.Lock()
		latest = &waitNotice{pos, reason}
		mu.Unlock()
		select {
		case signal <- struct{}{}:
		default:
		}
	}
	actx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan grant, 1)
	managed := a.e.GPU != nil && a.e.GPU.Manages(a.route.Device)
	started := a.bg.Go(func(context.Context) {
		var g grant
		g.managed = managed
		if y, ok := a.e.GPU.(YieldingAcquirer); ok && managed {
			g.release, g.revoked, g.yield, g.err = y.AcquireRunYield(actx, a.route.Device, a.runID, a.route.BackendModel, onWait)
		} else if managed {
			g.release, g.revoked, g.err = a.e.GPU.AcquireRun(actx, a.route.Device, a.runID, a.route.BackendModel, onWait)
		} else {
			g.release, g.err = a.e.Slots.Acquire(actx, a.route.Device, func(pos int) { onWait(pos, "") })
		}
		done <- g
	})
	if !started {
		return grant{err: context.Canceled}
	}
	// abandon stops waiting and gives back a grant that arrives anyway.
	abandon := func(err error) grant {
		cancel()
		if g := <-done; g.err == nil && g.release != nil {
			g.release()
		}
		return grant{err: err}
	}
	// A cancel while waiting: the control stream is read as in the consume loop, and the
	// record of truth every 2 s, so a cancel whose command (or asynq's CancelProcessing
	// fast path) was missed still ends the wait.
	ctrlTick := time.NewTicker(a.e.ControlEvery)
	defer ctrlTick.Stop()
	cancelTick := time.NewTicker(2 * time.Second)
	defer cancelTick.Stop()
	for {
		select {
		case g := <-done:
			return g
		case <-ctrlTick.C:
			for _, c := range a.readControls(ctx) {
				if c.Type == queue.ControlCancel {
					return abandon(errCancelledWaiting)
				}
			}
		case <-cancelTick.C:
			if r, err := a.runs().Get(ctx, a.runID); err == nil && r.CancelRequested {
				return abandon(errCancelledWaiting)
			}
		case <-signal:
			select {
			case g := <-done: // granted meanwhile: the notice is stale
				return g
			default:
			}
			mu.Lock()
			n := *latest
			mu.Unlock()
			if n.reason == "" {
				n.reason = fmt.Sprintf("waiting for the %s GPU", a.route.Device)
			}
			if a.m.pausing() {
				n.reason = a.pausedReason() + " (" + n.reason + ")"
			}
			if a.m.parked() {
				n.reason = a.parkedReason() + " (" + n.reason + ")"
			}
			phase := "waiting for resource"
			if n.reason == "loading "+a.route.BackendModel {
				phase = PhaseLoading // its own model is loading: it starts once loaded
			}
			err := a.setStatus(ctx, schema.RunWaitingForResource, phase, runstate.Patch{QueueReason: runstate.Set(n.reason), QueuePosition: runstate.Set(int64(n.pos))})
			if errors.Is(err, eventlog.ErrFenced) || errors.Is(err, errSettled) {
				return abandon(err)
			}
		case <-a.hb.beat:
			if err := a.onBeat(ctx); err != nil {
				return abandon(err)
			}
		case <-a.hb.lost:
			return abandon(eventlog.ErrFenced)
		}
	}
}

// PhaseLoading is the phase of a run waiting while its own model loads on its device.
const PhaseLoading = "loading the model"

// errCancelledWaiting: the run's cancel arrived while it waited for its device.
var errCancelledWaiting = errors.New("executor: cancelled while waiting for the device")

// cancelledWaiting settles a run cancelled while it waited for its device. A run that
// never started natively ends cancelled at once. One an earlier attempt started (its task
// was handed back by a shutdown, or retried) is stopped on the harness and settled by its
// native status, as a cancel of a running run is.
func (a *attempt) cancelledWaiting(ctx context.Context) error {
	reason := fmt.Sprintf("cancelled while waiting for the %s device", a.route.Device)
	if a.bind.NativeRunID == nil || *a.bind.NativeRunID == "" {
		return a.finish(ctx, harness.Event{Kind: harness.KindCancelled}, reason)
	}
	a.nativeID = *a.bind.NativeRunID
	if a.bind.NativeSessionID != nil {
		a.sessionID = *a.bind.NativeSessionID
	}
	_, _ = a.drive(ctx, input{kind: inCancelWaiting, now: time.Now()}) // no actions: the loop below stops and reconciles
	t := time.NewTicker(a.e.ReconcileEvery)
	defer t.Stop()
	for time.Now().Before(a.m.deadline) {
		a.stop(ctx)
		if err := a.reconcileOnce(ctx); err != nil {
			return err
		}
		if a.status.Terminal() {
			return nil
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return a.interrupted(ctx)
		}
	}
	return a.finish(ctx, harness.Event{Kind: harness.KindFailed, Error: "the run did not stop in time; it may still be running on the harness"}, "")
}
