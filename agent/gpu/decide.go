package gpu

import (
	"slices"
	"strconv"
	"strings"
	"time"
)

// Phase is what a device is doing. Only the manager's owner goroutine changes it.
type Phase string

// Phases of a device.
const (
	PhaseIdle      Phase = "idle"      // nothing loaded
	PhaseLoading   Phase = "loading"   // a load is in progress
	PhaseReady     Phase = "ready"     // Loaded serves requests
	PhaseDraining  Phase = "draining"  // no new grants for Loaded; waiting for its grants to end
	PhaseUnloading Phase = "unloading" // unload and memory verification in progress
	PhaseUnknown   Phase = "unknown"   // memory did not come back (or telemetry is stale): nothing loads
	PhaseFailed    Phase = "failed"    // the last load failed; the next waiter may try again
	PhaseFenced    Phase = "fenced"    // another agent controls the device
)

// Phases are every phase a manager can be in (the ops collector's series and the
// gpu_status record's states are checked against this list).
var Phases = []Phase{PhaseIdle, PhaseLoading, PhaseReady, PhaseDraining, PhaseUnloading, PhaseUnknown, PhaseFailed, PhaseFenced}

// Serving reports whether a model is loaded and may be used under its grants.
func (p Phase) Serving() bool { return p == PhaseReady || p == PhaseDraining }

// Waiter is a queued request for a model.
type Waiter struct {
	ID    string
	Model string
	// Since is when it joined the queue (the aging bound counts from here).
	Since time.Time
	// Exclusive needs the whole device (a qualification): it is granted only once no
	// grant is live, nothing queued after it goes ahead of it, and while it holds the
	// device nothing else is granted.
	Exclusive bool
}

// Holder is a live grant, as waiting reasons describe it: the run's short id, the model,
// since when, and what the run is doing (its status when it waits on its owner, e.g.
// waiting_for_approval). Never the run's content.
type Holder struct {
	Run    string
	Model  string
	Since  time.Time
	Status string
}

// State is what the decision sees.
type State struct {
	Phase   Phase
	Loaded  string // model loaded (or being drained/unloaded)
	Active  int    // live grants on Loaded
	Slots   int    // concurrent grants allowed (1 = exclusive)
	Waiting []Waiter
	Holders []Holder // the live grants, oldest first (for reasons)
	Now     time.Time
	// MaxExtraWait bounds the swap-minimizing order: requests for the loaded model may go
	// ahead of an older request for another model only while that request has waited
	// less than this. 0 is strict FIFO.
	MaxExtraWait time.Duration
	// IdleUnload: the loaded model is unloaded once nothing used it for this long (0:
	// never). IdleSince is when its last grant ended.
	IdleUnload time.Duration
	IdleSince  time.Time
	// DrainExpired is true once draining has waited an explicitly configured drain bound
	// (Device.DrainTimeout): the remaining grants are revoked. Without a bound (the
	// default) a swap waits for running work to finish.
	DrainExpired bool
	// Exclusive: a live grant holds the whole device (a qualification runs).
	Exclusive bool
	// Preemptible: the loaded model's holders may be asked to yield at their next turn
	// boundary when a swap is due (ActPreempt) instead of being waited for.
	Preemptible bool
}

// Action is the kind of a decision.
type Action string

// Actions the policy can decide.
const (
	ActWait        Action = "wait"
	ActGrant       Action = "grant"
	ActLoad        Action = "load"
	ActDrain       Action = "drain"
	ActPreempt     Action = "preempt" // drain, and ask the holders of a preemptible model to yield
	ActCancelDrain Action = "cancel-grants"
	ActUnload      Action = "unload"
)

// Decision is what the owner goroutine should do next.
type Decision struct {
	Kind   Action
	Model  string
	Grant  []string // waiter ids to grant, in order
	Reason string   // for waiters: why they wait
}

// Decide is the device's scheduling policy, a pure function of its state:
//   - requests for the loaded model are granted first-come as slots free up, also ahead
//     of older requests for another model while the oldest of those has waited less
//     than MaxExtraWait (fewer swaps);
//   - once it has waited MaxExtraWait, nothing queued after it goes ahead of it, and
//     when nothing ahead of it wants the loaded model (or nobody does at all) the swap
//     starts: no new grants for the loaded model (drain); when its last grant ends it is
//     unloaded, then the head's model loads. Running work is never cut (unless an
//     explicit drain bound was configured);
//   - a loaded model nobody used for IdleUnload is unloaded (so the other tenant resumes);
//   - an unknown or fenced device loads nothing.
func Decide(s State) Decision {
	switch s.Phase {
	case PhaseUnknown:
		return Decision{Kind: ActWait, Reason: "the device's memory state is unknown; nothing loads until it is confirmed free"}
	case PhaseFenced:
		return Decision{Kind: ActWait, Reason: "another agent controls this device"}
	case PhaseLoading:
		return Decision{Kind: ActWait, Reason: "loading " + s.Loaded}
	case PhaseUnloading:
		return Decision{Kind: ActWait, Reason: "unloading " + s.Loaded}
	}
	serving := s.Phase == PhaseReady || s.Phase == PhaseDraining
	if len(s.Waiting) == 0 {
		if serving && s.Active == 0 && s.IdleUnload > 0 && !s.IdleSince.IsZero() && s.Now.Sub(s.IdleSince) >= s.IdleUnload {
			return Decision{Kind: ActUnload, Model: s.Loaded, Reason: "unloading " + s.Loaded + ": idle for " + words(s.IdleUnload)}
		}
		return Decision{Kind: ActWait}
	}
	head := s.Waiting[0]
	if !serving {
		// Idle or failed: load what the head needs.
		return Decision{Kind: ActLoad, Model: head.Model, Reason: "loading " + head.Model}
	}
	free := max(s.Slots, 1) - s.Active
	if s.Exclusive {
		free = 0
	}
	// The oldest waiter for another model: once it has waited MaxExtraWait, nothing
	// queued after it goes ahead of it any more.
	overdue := false
	for _, w := range s.Waiting {
		if w.Model != s.Loaded {
			overdue = s.Now.Sub(w.Since) >= s.MaxExtraWait
			break
		}
	}
	d := Decision{Kind: ActGrant, Model: s.Loaded}
	wantsLoaded := false
	for _, w := range s.Waiting {
		if w.Model != s.Loaded {
			if overdue {
				break
			}
			continue
		}
		wantsLoaded = true
		if w.Exclusive {
			// The whole device, once nothing runs; nothing behind it goes first.
			if s.Active == 0 && len(d.Grant) == 0 && free > 0 {
				d.Grant = append(d.Grant, w.ID)
			}
			break
		}
		if free > 0 {
			d.Grant = append(d.Grant, w.ID)
			free--
		}
	}
	if len(d.Grant) > 0 {
		return d
	}
	if wantsLoaded || head.Model == s.Loaded {
		return Decision{Kind: ActWait, Reason: busy(s)}
	}
	// The swap to the head's model is due.
	if s.Active > 0 {
		if s.DrainExpired {
			return Decision{Kind: ActCancelDrain, Model: s.Loaded, Reason: "switching models"}
		}
		if s.Preemptible && !s.Exclusive {
			return Decision{Kind: ActPreempt, Model: s.Loaded, Reason: busy(s) + "; it pauses at its next turn boundary so " + head.Model + " can load"}
		}
		return Decision{Kind: ActDrain, Model: s.Loaded, Reason: busy(s) + "; " + head.Model + " loads when it finishes"}
	}
	return Decision{Kind: ActUnload, Model: s.Loaded, Reason: "switching from " + s.Loaded + " to " + head.Model}
}

// busy says who holds the device and for how long: a run's short id, the model, how long
// it has been running, and whether it waits on its owner. Nothing of its content.
func busy(s State) string {
	if len(s.Holders) == 0 {
		return "the device is busy with " + s.Loaded
	}
	h := s.Holders[0]
	who := "a job"
	if h.Run != "" {
		who = "run " + ShortID(h.Run)
	}
	if h.Status == StatusQualifying {
		who = "a GPU qualification"
	}
	r := "the device is held by " + who + " (" + h.Model + ", running for " + words(s.Now.Sub(h.Since)) + ")"
	switch {
	case h.Status == "waiting_for_approval":
		r += ", which is waiting for its owner's approval"
	case strings.HasPrefix(h.Status, "waiting_"):
		r += ", which is " + strings.ReplaceAll(h.Status, "_", " ")
	}
	if n := len(s.Holders) - 1; n > 0 {
		r += " and " + strconv.Itoa(n) + " more"
	}
	return r
}

// ShortID is the part of a run id shown to other users.
func ShortID(run string) string {
	if len(run) > 8 {
		return run[:8]
	}
	return run
}

// words renders a duration in minutes, coarse enough that a waiting reason changes at
// most once a minute.
func words(d time.Duration) string {
	switch m := int(d / time.Minute); {
	case m < 1:
		return "under a minute"
	case m < 60:
		return strconv.Itoa(m) + " min"
	default:
		if m%60 == 0 {
			return strconv.Itoa(m/60) + " h"
		}
		return strconv.Itoa(m/60) + " h " + strconv.Itoa(m%60) + " min"
	}
}

// Order is the order in which Decide starts the waiters if nothing else arrives and no
// waiter reaches its aging bound meanwhile (issue 32 item 2): the loaded model's waiters
// first while the oldest waiter for another model is within MaxExtraWait (and, after an
// exclusive waiter, only once it went), then the model of the oldest remaining waiter,
// and so on. Positions are places in it, so a job the swap-minimizing choice passes shows
// the jobs that go first. What can still change it is what the bound allows: a later job
// for the model in use may go ahead of a waiter within its bound, and a waiter reaching
// its bound goes ahead of later jobs.
func Order(s State) []Waiter {
	rest := slices.Clone(s.Waiting)
	cur := ""
	if s.Phase == PhaseReady || s.Phase == PhaseDraining || s.Phase == PhaseLoading {
		cur = s.Loaded
	}
	out := make([]Waiter, 0, len(rest))
	for len(rest) > 0 {
		if cur == "" {
			cur = rest[0].Model
		}
		cut := len(rest)
		for i, w := range rest {
			if w.Model != cur {
				if s.Now.Sub(w.Since) >= s.MaxExtraWait {
					cut = i // overdue: nothing queued after it goes ahead of it
				}
				break
			}
		}
		keep, took, stop := rest[:0:0], false, false
		for i, w := range rest {
			if !stop && i < cut && w.Model == cur {
				out, took = append(out, w), true
				stop = w.Exclusive // nothing behind an exclusive waiter goes with it
				continue
			}
			keep = append(keep, w)
		}
		rest = keep
		if !took {
			cur = rest[0].Model // the swap to the oldest remaining waiter's model
		}
	}
	return out
}

// Position returns a waiter's 1-based place in Order (0 when not waiting).
func Position(s State, id string) int {
	for i, w := range Order(s) {
		if w.ID == id {
			return i + 1
		}
	}
	return 0
}

// BoundNote says how the swap-minimizing order may still move the waiter at 1-based
// position pos of order (Order(s)), and until when: later jobs that go first and the time
// after which nothing queued after it goes ahead of it (the bound Decide keeps); or older
// jobs it goes ahead of for now, which go first once they reach that bound. "" when
// neither applies (strict FIFO, or nothing passes it or is passed by it any more).
func BoundNote(s State, order []Waiter, pos int) string {
	if s.MaxExtraWait <= 0 || pos < 1 || pos > len(order) {
		return ""
	}
	w := order[pos-1]
	passed, passing := 0, 0
	for i, o := range order {
		switch {
		case i < pos-1 && o.Since.After(w.Since):
			passed++
		case i > pos-1 && o.Since.Before(w.Since):
			passing++
		}
	}
	left := s.MaxExtraWait - s.Now.Sub(w.Since)
	bound := "; none will after " + words(left+time.Minute-time.Nanosecond) + " more"
	switch {
	case left > 0 && passed > 0:
		return "; " + jobs(passed, "later job goes", "later jobs go") + " first to save a model swap" + bound
	case left > 0 && s.Loaded != "" && w.Model != s.Loaded:
		return "; later jobs for " + s.Loaded + " may go first to save a swap" + bound
	case passing > 0:
		return "; ahead of " + jobs(passing, "older job", "older jobs") + " for now to save a swap (they go first after " +
			words(s.MaxExtraWait) + " of waiting)"
	}
	return ""
}

func jobs(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// MemoryBack reports whether enough memory came back after an unload: at least 75 % of
// the model's footprint freed compared with the reading taken before the unload.
func MemoryBack(before, after Reading, footprint int64) bool {
	if footprint <= 0 {
		return true
	}
	return after.Free()-before.Free() >= footprint*3/4
}
