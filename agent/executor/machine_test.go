package executor

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
)

// TestTheAttemptsTransitionTableWhole (issue 31 item 1): every input in every phase, as a
// table. A row names the phases it holds for (each written out, never "the rest"); the
// test fails when a (phase, input) pair has no row, so a new phase or input must be
// decided for everywhere before it builds green.
func TestTheAttemptsTransitionTableWhole(t *testing.T) {
	t0 := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	const wait = 10 * time.Second
	var (
		F, P, C, Z = phaseFollowing, phaseParked, phaseCancelling, phasePausing
		all        = []phase{F, P, C, Z}
	)
	type row struct {
		name   string
		phases []phase
		in     input
		pre    func(*state) // the facts before the input (the phase is set by the row)
		want   phase        // the phase after; keep = the phase before
		acts   []action
		check  func(t *testing.T, before, after state)
	}
	const keep = numPhases
	ev := func(k harness.EventKind) input { return input{kind: inEvent, ev: harness.Event{Kind: k}} }
	sent := func(s *state) { s.stopSent = true }
	yielded := func(s *state) { s.yieldAsked = true }
	inTool := func(s *state) { s.yieldAsked, s.toolRunning = true, true }
	deadline := func(want time.Time) func(*testing.T, state, state) {
		return func(t *testing.T, _, after state) { require.Equal(t, want, after.deadline) }
	}
	rows := []row{
		{name: "interrupted", phases: all, in: input{kind: inInterrupted}, want: keep, acts: []action{actInterrupt}},
		{name: "lease lost", phases: all, in: input{kind: inLeaseLost}, want: keep, acts: []action{actFenced}},
		{name: "beat", phases: all, in: input{kind: inBeat}, want: keep, acts: []action{actBeat}},

		{name: "revoked: stop, then fail", phases: all, in: input{kind: inRevoked}, want: keep, acts: []action{actStop, actFailRevoked}},
		{name: "revoked after a stop was taken: fail", phases: all, in: input{kind: inRevoked}, pre: sent, want: keep, acts: []action{actFailRevoked}},

		{name: "yield at a boundary pauses", phases: []phase{F}, in: input{kind: inYield, boundary: true}, want: F, acts: []action{actRecordPause},
			check: func(t *testing.T, _, after state) { require.True(t, after.yieldAsked) }},
		{name: "yield at a boundary: not while parked, cancelling or pausing", phases: []phase{P, C, Z}, in: input{kind: inYield, boundary: true}, want: keep,
			check: func(t *testing.T, _, after state) { require.True(t, after.yieldAsked) }},
		{name: "yield off a boundary waits for one", phases: all, in: input{kind: inYield}, want: keep,
			check: func(t *testing.T, _, after state) { require.True(t, after.yieldAsked) }},
		{name: "yield while a tool runs waits for it", phases: all, in: input{kind: inYield, boundary: true}, pre: inTool, want: keep},

		{name: "an event is applied", phases: all, in: ev(harness.KindDelta), want: keep, acts: []action{actApply}},
		{name: "a cancelled terminal is the run's", phases: []phase{F, P, C}, in: ev(harness.KindCancelled), want: keep, acts: []action{actApply}},
		{name: "a cancelled terminal while pausing is the pause's", phases: []phase{Z}, in: ev(harness.KindCancelled), want: Z, acts: []action{actPaused}},
		{name: "a tool starts", phases: all, in: ev(harness.KindToolStarted), want: keep, acts: []action{actApply},
			check: func(t *testing.T, _, after state) { require.True(t, after.toolRunning) }},
		{name: "a tool completes", phases: all, in: ev(harness.KindToolCompleted), pre: inTool, want: keep, acts: []action{actApply},
			check: func(t *testing.T, _, after state) { require.False(t, after.toolRunning) }},

		{name: "applied: the position is saved", phases: all, in: input{kind: inApplied, boundary: true}, want: keep, acts: []action{actSaveSeq}},
		{name: "applied at a boundary with a pause asked", phases: []phase{F}, in: input{kind: inApplied, boundary: true}, pre: yielded, want: F, acts: []action{actSaveSeq, actRecordPause}},
		{name: "applied with a pause asked: not while parked, cancelling or pausing", phases: []phase{P, C, Z}, in: input{kind: inApplied, boundary: true}, pre: yielded, want: keep, acts: []action{actSaveSeq}},
		{name: "applied off a boundary with a pause asked", phases: all, in: input{kind: inApplied}, pre: yielded, want: keep, acts: []action{actSaveSeq}},

		{name: "malformed", phases: all, in: input{kind: inMalformed}, want: keep, acts: []action{actSkip}},
		{name: "stream ended: the status follows", phases: []phase{F, P, C}, in: input{kind: inStreamEnded}, want: keep, acts: []action{actFollowStatus}},
		{name: "stream ended while pausing: paused", phases: []phase{Z}, in: input{kind: inStreamEnded}, want: Z, acts: []action{actPaused}},
		{name: "stream failed: reconcile (EOF is not completion)", phases: []phase{F, P, C}, in: input{kind: inStreamFailed}, want: keep, acts: []action{actFollowStatus, actReconcile}},
		{name: "stream failed while pausing: paused", phases: []phase{Z}, in: input{kind: inStreamFailed}, want: Z, acts: []action{actPaused}},
		{name: "poll", phases: []phase{F, P, C}, in: input{kind: inPoll}, want: keep, acts: []action{actReconcile}},
		{name: "poll while pausing: paused", phases: []phase{Z}, in: input{kind: inPoll}, want: Z, acts: []action{actPaused}},
		{name: "controls", phases: all, in: input{kind: inControlDue}, want: keep, acts: []action{actReadControls}},

		{name: "delta window", phases: []phase{F, P}, in: input{kind: inDeltaWindow, now: t0.Add(time.Hour)}, want: keep, acts: []action{actFlush}},
		{name: "delta window resends the stop", phases: []phase{C, Z}, in: input{kind: inDeltaWindow, now: t0}, want: keep, acts: []action{actFlush, actStop}},
		{name: "delta window, stop taken", phases: []phase{C, Z}, in: input{kind: inDeltaWindow, now: t0}, pre: sent, want: keep, acts: []action{actFlush}},
		{name: "delta window past the stop bound fails the run", phases: []phase{C}, in: input{kind: inDeltaWindow, now: t0.Add(wait + time.Millisecond)}, pre: sent, want: C, acts: []action{actFlush, actFailStopBound}},
		{name: "delta window past the stop bound, stop not taken: tried once more", phases: []phase{C}, in: input{kind: inDeltaWindow, now: t0.Add(wait + time.Millisecond)}, want: C, acts: []action{actFlush, actStop, actFailStopBound}},
		{name: "delta window past the pause bound pauses anyway", phases: []phase{Z}, in: input{kind: inDeltaWindow, now: t0.Add(wait + time.Millisecond)}, pre: sent, want: Z, acts: []action{actFlush, actPauseBound}},

		{name: "cancel check", phases: []phase{F, P, Z}, in: input{kind: inCancelCheck}, want: keep, acts: []action{actCheckCancel}},
		{name: "cancel check while cancelling", phases: []phase{C}, in: input{kind: inCancelCheck}, want: C},
		{name: "cancel", phases: []phase{F, P}, in: input{kind: inCancel, now: t0}, want: C, acts: []action{actMarkCancelling, actStop}, check: deadline(t0.Add(wait))},
		{name: "cancel while pausing: the pause's stop serves", phases: []phase{Z}, in: input{kind: inCancel, now: t0}, pre: sent, want: C, acts: []action{actMarkCancelling}, check: deadline(t0.Add(wait))},
		{name: "cancel while pausing, stop not taken", phases: []phase{Z}, in: input{kind: inCancel, now: t0}, want: C, acts: []action{actMarkCancelling, actStop}},
		{name: "cancel again", phases: []phase{C}, in: input{kind: inCancel, now: t0.Add(time.Hour)}, want: C, check: deadline(t0.Add(wait))},
		{name: "cancelled while waiting for the device", phases: all, in: input{kind: inCancelWaiting, now: t0.Add(time.Minute)}, want: C, check: deadline(t0.Add(time.Minute + wait))},

		{name: "stop due", phases: all, in: input{kind: inStopDue}, want: keep, acts: []action{actStop}},
		{name: "stop due, taken", phases: all, in: input{kind: inStopDue}, pre: sent, want: keep},
		{name: "stopped", phases: all, in: input{kind: inStopped}, want: keep,
			check: func(t *testing.T, _, after state) { require.True(t, after.stopSent) }},

		{name: "pause recorded: stop for it", phases: []phase{F}, in: input{kind: inPauseRecorded, now: t0}, pre: sent, want: Z, acts: []action{actStop},
			check: func(t *testing.T, _, after state) {
				require.Equal(t, t0.Add(wait), after.deadline)
				require.False(t, after.stopSent)
			}},
		{name: "pause recorded after a cancel or a park: no pause", phases: []phase{P, C, Z}, in: input{kind: inPauseRecorded, now: t0}, want: keep},

		{name: "park with the device", phases: []phase{F}, in: input{kind: inPark, held: true}, pre: yielded, want: P, acts: []action{actGiveBack},
			check: func(t *testing.T, _, after state) {
				require.False(t, after.yieldAsked, "a parked run has nothing to yield")
			}},
		{name: "park without the device", phases: []phase{F}, in: input{kind: inPark}, want: F},
		{name: "park: not while parked, cancelling or pausing", phases: []phase{P, C, Z}, in: input{kind: inPark, held: true}, want: keep},
		{name: "parked at start", phases: []phase{F}, in: input{kind: inParkedAtStart}, want: P},
		{name: "parked at start: only a new attempt", phases: []phase{P, C, Z}, in: input{kind: inParkedAtStart}, want: keep},
		{name: "unparked", phases: []phase{P}, in: input{kind: inUnparked}, want: F},
		{name: "unparked: only from parked", phases: []phase{F, C, Z}, in: input{kind: inUnparked}, want: keep},
		{name: "resumed after a pause", phases: []phase{Z}, in: input{kind: inResumed}, pre: func(s *state) { s.yieldAsked, s.stopSent = true, true }, want: F,
			check: func(t *testing.T, _, after state) {
				require.False(t, after.yieldAsked)
				require.False(t, after.stopSent)
			}},
		{name: "resumed: only from pausing", phases: []phase{F, P, C}, in: input{kind: inResumed}, want: keep},
	}

	covered := map[[2]int]bool{}
	for _, r := range rows {
		for _, p := range r.phases {
			covered[[2]int{int(p), int(r.in.kind)}] = true
			t.Run(fmt.Sprintf("%s/%v", r.name, p), func(t *testing.T) {
				before := state{phase: p, stopWait: wait, deadline: t0.Add(wait)}
				if r.pre != nil {
					r.pre(&before)
				}
				after, acts := before.step(r.in)
				want := r.want
				if want == keep {
					want = p
				}
				require.Equal(t, want, after.phase)
				require.Equal(t, r.acts, acts)
				require.Equal(t, wait, after.stopWait)
				if r.check != nil {
					r.check(t, before, after)
				}
			})
		}
	}
	for p := range numPhases {
		for k := range numInputs {
			require.True(t, covered[[2]int{int(p), int(k)}], "no row for %v in %v", k, p)
		}
	}
}

// TestStepIsTotal: step answers every input in every phase from every combination of its
// facts, and never panics (the driver relies on it).
func TestStepIsTotal(t *testing.T) {
	for p := range numPhases {
		for k := range numInputs {
			for facts := range 16 {
				s := state{phase: p, stopSent: facts&1 != 0, yieldAsked: facts&2 != 0, toolRunning: facts&4 != 0}
				in := input{kind: k, boundary: facts&8 != 0, held: true, now: time.Now()}
				require.NotPanics(t, func() { s.step(in) }, "%v in %v", k, p)
			}
		}
	}
	require.Panics(t, func() { state{}.step(input{kind: numInputs}) })
}
