package executor

import (
	"fmt"
	"time"

	"privateassistant/agent/harness"
)

// The attempt's control as a state machine (issue 31 item 1). step is pure: from the
// attempt's state and one input it returns the next state and the actions to take, in
// order. The driver (drive, drive.go) is the only place that does I/O: the consume loop
// turns its channels into inputs, drive runs the actions and feeds their outcomes back
// as inputs. machine_test.go tests the table whole: every input in every phase.

// phase is where an attempt stands with its native run.
type phase uint8

const (
	// phaseFollowing: the native run goes on with the device held; its events are applied.
	phaseFollowing phase = iota
	// phaseParked: the native run waits for its owner's decision and the device was given
	// back meanwhile (park.go); the decision, or the run moving on, re-acquires it.
	phaseParked
	// phaseCancelling: the owner cancelled; the stop is sent (again on every delta window
	// until the harness takes it) until the native run ends or the stop bound passes.
	phaseCancelling
	// phasePausing: another job needs the device; the native run was stopped at a turn
	// boundary and the attempt pauses once it ends (preempt.go).
	phasePausing
	numPhases
)

func (p phase) String() string {
	switch p {
	case phaseFollowing:
		return "following"
	case phaseParked:
		return "parked"
	case phaseCancelling:
		return "cancelling"
	case phasePausing:
		return "pausing"
	}
	return fmt.Sprintf("phase(%d)", uint8(p))
}

// state is the attempt's control state: the phase and the facts its transitions need.
// Only step writes it (through drive).
type state struct {
	phase       phase
	stopSent    bool      // the harness took a stop for the current native run
	yieldAsked  bool      // another job needs the device: pause at the next turn boundary
	toolRunning bool      // a tool started and has not completed
	deadline    time.Time // cancelling, pausing: the bound on the native run's stop
	stopWait    time.Duration
}

// inputKind is what happened.
type inputKind uint8

const (
	inInterrupted   inputKind = iota // the attempt's context ended (shutdown, asynq's cancel)
	inLeaseLost                      // the heartbeat lost the run's lease
	inBeat                           // a heartbeat is due
	inRevoked                        // the device was taken from the run
	inYield                          // the grant's holder is asked to pause
	inEvent                          // a native event arrived (ev)
	inApplied                        // the event was applied and the run goes on
	inMalformed                      // a native event could not be read
	inStreamEnded                    // the native stream closed
	inStreamFailed                   // the native stream broke (EOF is not completion)
	inPoll                           // the status poll is due (no stream)
	inControlDue                     // the control stream is due a read
	inDeltaWindow                    // the delta window ended (now)
	inCancelCheck                    // the record's cancel flag is due a read
	inCancel                         // the owner cancelled (now)
	inCancelWaiting                  // cancelled while waiting for the device (now): the caller stops and reconciles
	inStopDue                        // the native run should be stopped (settled elsewhere, interrupted)
	inStopped                        // the harness took the stop
	inPauseRecorded                  // the pause was recorded (now)
	inPark                           // an approval request waits for its owner (held: the device is held)
	inParkedAtStart                  // a new attempt re-attaches to a run still waiting for its owner, without the device
	inUnparked                       // the device was re-acquired after the approval wait
	inResumed                        // a paused run holds the device again
	numInputs
)

var inputNames = [numInputs]string{"interrupted", "lease lost", "beat", "revoked", "yield", "event", "applied",
	"malformed", "stream ended", "stream failed", "poll", "control due", "delta window", "cancel check", "cancel",
	"cancel waiting", "stop due", "stopped", "pause recorded", "park", "parked at start", "unparked", "resumed"}

func (k inputKind) String() string {
	if k < numInputs {
		return inputNames[k]
	}
	return fmt.Sprintf("input(%d)", uint8(k))
}

// input is one thing that happened, with the facts the state does not hold.
type input struct {
	kind inputKind
	ev   harness.Event // inEvent
	now  time.Time     // inDeltaWindow, inCancel, inCancelWaiting, inPauseRecorded
	// boundary (inYield, inApplied): no approval waits for an answer and the native run
	// can be paused (it has a session, the harness is not the direct one).
	boundary bool
	held     bool  // inPark: the attempt holds its device
	err      error // inMalformed: what could not be read
}

// action is what the driver does; it runs the actions of one step in order.
type action uint8

const (
	actInterrupt      action = iota // end: the interruption's path (a user's cancel still stops the native run)
	actFenced                       // end: the lease is lost, another attempt owns the run
	actBeat                         // renew the lease, retry a refused record write
	actStop                         // ask the harness to stop the native run (inStopped when it takes it)
	actFailRevoked                  // end: the run failed, its device was taken
	actFailStopBound                // end: the run failed, it did not stop in time
	actRecordPause                  // record the pause before stopping (inPauseRecorded when recorded)
	actPaused                       // end: the attempt pauses (resumePaused)
	actPauseBound                   // end: the native run did not stop for the pause in time; pause anyway
	actApply                        // apply the native event (may settle the run: end)
	actSkip                         // log the malformed event and go on
	actFollowStatus                 // stop reading the stream: the status poll follows the run
	actReconcile                    // read the native status; a terminal one settles the run (end)
	actReadControls                 // read and apply the run's control commands
	actFlush                        // emit the text gathered since the last delta event
	actCheckCancel                  // read the record: a cancel requested there is inCancel
	actMarkCancelling               // flush, and record the run as cancelling
	actSaveSeq                      // record the native position published
	actGiveBack                     // give the device back while the run waits for its owner
	numActions
)

var actionNames = [numActions]string{"interrupt", "fenced", "beat", "stop", "fail: revoked", "fail: stop bound",
	"record pause", "paused", "pause bound", "apply", "skip", "follow status", "reconcile", "read controls", "flush",
	"check cancel", "mark cancelling", "save seq", "give back"}

func (a action) String() string {
	if a < numActions {
		return actionNames[a]
	}
	return fmt.Sprintf("action(%d)", uint8(a))
}

// step is the transition function: pure, total over phase × input.
func (s state) step(in input) (state, []action) {
	switch in.kind {
	case inInterrupted:
		return s, []action{actInterrupt}
	case inLeaseLost:
		return s, []action{actFenced}
	case inBeat:
		return s, []action{actBeat}
	case inRevoked:
		return s, s.stop(actFailRevoked)
	case inYield:
		s.yieldAsked = true
		return s, s.pauseIfDue(in.boundary)
	case inEvent:
		switch in.ev.Kind {
		case harness.KindCancelled:
			if s.phase == phasePausing {
				return s, []action{actPaused} // the stop for the pause: its terminal is not the run's
			}
		case harness.KindToolStarted:
			s.toolRunning = true
		case harness.KindToolCompleted:
			s.toolRunning = false
		}
		return s, []action{actApply}
	case inApplied:
		return s, append([]action{actSaveSeq}, s.pauseIfDue(in.boundary)...)
	case inMalformed:
		return s, []action{actSkip}
	case inStreamEnded:
		if s.phase == phasePausing {
			return s, []action{actPaused}
		}
		return s, []action{actFollowStatus}
	case inStreamFailed:
		if s.phase == phasePausing {
			return s, []action{actPaused}
		}
		return s, []action{actFollowStatus, actReconcile}
	case inPoll:
		if s.phase == phasePausing {
			return s, []action{actPaused}
		}
		return s, []action{actReconcile}
	case inControlDue:
		return s, []action{actReadControls}
	case inDeltaWindow:
		if s.phase != phasePausing && s.phase != phaseCancelling {
			return s, []action{actFlush}
		}
		acts := append([]action{actFlush}, s.stop()...)
		switch {
		case !in.now.After(s.deadline):
			return s, acts
		case s.phase == phasePausing:
			return s, append(acts, actPauseBound)
		}
		return s, append(acts, actFailStopBound)
	case inCancelCheck:
		if s.phase == phaseCancelling {
			return s, nil
		}
		return s, []action{actCheckCancel}
	case inCancel:
		if s.phase == phaseCancelling {
			return s, nil
		}
		s.phase, s.deadline = phaseCancelling, in.now.Add(s.stopWait)
		return s, append([]action{actMarkCancelling}, s.stop()...)
	case inCancelWaiting:
		s.phase, s.deadline = phaseCancelling, in.now.Add(s.stopWait)
		return s, nil
	case inStopDue:
		return s, s.stop()
	case inStopped:
		s.stopSent = true
		return s, nil
	case inPauseRecorded:
		if s.phase != phaseFollowing {
			return s, nil // cancelled or parked meanwhile: no pause
		}
		s.phase, s.deadline, s.stopSent = phasePausing, in.now.Add(s.stopWait), false
		return s, s.stop()
	case inPark:
		if s.phase != phaseFollowing || !in.held {
			return s, nil
		}
		s.phase, s.yieldAsked = phaseParked, false
		return s, []action{actGiveBack}
	case inParkedAtStart:
		if s.phase == phaseFollowing {
			s.phase = phaseParked
		}
		return s, nil
	case inUnparked:
		if s.phase == phaseParked {
			s.phase = phaseFollowing
		}
		return s, nil
	case inResumed:
		if s.phase == phasePausing {
			s.phase = phaseFollowing
		}
		s.yieldAsked, s.stopSent = false, false
		return s, nil
	}
	panic(fmt.Sprintf("executor: no transition for %v in %v", in.kind, s.phase))
}

// stop is actStop unless the harness already took one, then then.
func (s state) stop(then ...action) []action {
	if s.stopSent {
		return then
	}
	return append([]action{actStop}, then...)
}

// pauseIfDue records a pause when one was asked and the run is at a turn boundary.
func (s state) pauseIfDue(boundary bool) []action {
	if s.yieldAsked && boundary && !s.toolRunning && s.phase == phaseFollowing {
		return []action{actRecordPause}
	}
	return nil
}

// Phase questions the rest of the attempt asks.
func (s state) cancelling() bool { return s.phase == phaseCancelling }
func (s state) pausing() bool    { return s.phase == phasePausing }
func (s state) parked() bool     { return s.phase == phaseParked }
