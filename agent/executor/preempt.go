package executor

import (
	"context"
	"errors"
	"fmt"
	"strconv"

	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// Preemption: the executor half (issue 14). A GPU manager asks the holder of a grant on a
// preemptible model to yield (Grant.Yield closes; the grant is never revoked). The run
// pauses at its next turn boundary (no tool running, no approval pending, deltas
// flushed): the pause is recorded (PauseKey, fenced like the native position), the
// native run is stopped (its cancelled terminal does not end our run), the run waits for
// the device again ("paused for …"), and on the new grant the same native session gets
// a handoff turn keyed "<run id>:p<n>". The text published so far stays the start of the
// answer (no message.reset).

// YieldingAcquirer is a DeviceAcquirer whose grants can ask their holder to pause: yield
// closes (and stays closed) when another job needs the device and the grant's model is
// preemptible. An acquirer without it never asks.
type YieldingAcquirer interface {
	AcquireRunYield(ctx context.Context, device, run, model string, onWait func(pos int, reason string)) (release func(), revoked, yield <-chan struct{}, err error)
}

// PauseKey is the Redis key holding how many times a run was paused (its handoffs).
func PauseKey(runID string) string { return queue.PauseKey(runID) }

// Handoff is the input of a paused run's next turn in its native session.
const Handoff = "You were paused to free the GPU; continue the task from where you stopped."

// errPaused: consume stopped the native run at a turn boundary to give the device up.
var errPaused = errors.New("executor: paused to free the device")

// loadPauses returns the number of recorded pauses (0 when none or unreadable).
func (a *attempt) loadPauses(ctx context.Context) int {
	v, err := a.e.RDB.Get(ctx, PauseKey(a.runID)).Result()
	if err != nil {
		return 0
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// pausedReason is what waiters and the owner see while the run is paused.
func (a *attempt) pausedReason() string {
	return fmt.Sprintf("paused for another job on the %s GPU — resumes in the same session", a.route.Device)
}

// resumePaused gives the device up, acquires it again and submits the handoff to the
// same native session; then follows the new native run.
func (a *attempt) resumePaused(ctx context.Context) error {
	// Tokens that arrived after the stop (in flight when it landed) are part of the text
	// before the pause: published before the run shows it is paused, not after it.
	if err := a.flushDeltas(ctx); err != nil {
		return err
	}
	// The native run has stopped: the work folder is saved before the device goes.
	extra := runstate.Patch{QueueReason: runstate.Set(a.pausedReason()), QueuePosition: runstate.Clear[int64]()}
	if cp := a.checkpoint(ctx); cp != "" {
		extra.Checkpoint = runstate.Set(cp)
	}
	if err := a.setStatus(ctx, schema.RunWaitingForResource, "paused", extra); err != nil {
		return err
	}
	if a.release != nil {
		a.release()
		a.release = nil
	}
	g := a.acquire(ctx)
	switch {
	case errors.Is(g.err, errCancelledWaiting):
		return a.cancelledWaiting(ctx)
	case errors.Is(g.err, eventlog.ErrFenced), errors.Is(g.err, errSettled):
		return g.err
	case g.err != nil && g.managed && ctx.Err() == nil:
		return a.finish(ctx, harness.Event{Kind: harness.KindFailed, Error: "the model could not be loaded: " + g.err.Error()}, "")
	case g.err != nil:
		return a.interrupted(ctx)
	}
	a.release, a.revoked, a.yield = g.release, g.revoked, g.yield
	_, _ = a.drive(ctx, input{kind: inResumed}) // no actions
	if err := a.checkResumed(); err != nil {
		return a.finish(ctx, harness.Event{Kind: harness.KindFailed, Error: "the paused run's work folder does not match its checkpoint: " + err.Error()}, "")
	}
	if err := a.setStatus(ctx, schema.RunRunning, "resuming", runstate.ClearQueue()); err != nil {
		return err
	}
	if err := a.submit(ctx); err != nil {
		if errors.Is(err, eventlog.ErrFenced) || errors.Is(err, errSettled) || ctx.Err() != nil {
			if ctx.Err() != nil {
				return a.interrupted(ctx)
			}
			return err
		}
		if errors.Is(err, harness.ErrUnavailable) {
			_ = a.log.Flush(context.WithoutCancel(ctx))
			return err // retried by asynq: the next attempt submits the same handoff
		}
		return a.finish(ctx, harness.Event{Kind: harness.KindFailed, Error: "the agent could not resume the paused run: " + err.Error()}, "")
	}
	return a.consume(ctx)
}
