package gpu

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

// Serving reports whether a model is loaded and may be used under its grants.
func (p Phase) Serving() bool { return p == PhaseReady || p == PhaseDraining }

// Waiter is a queued request for a model.
type Waiter struct {
	ID    string
	Model string
}

// State is what the decision sees.
type State struct {
	Phase   Phase
	Loaded  string // model loaded (or being drained/unloaded)
	Active  int    // live grants on Loaded
	Slots   int    // concurrent grants allowed (1 = exclusive)
	Waiting []Waiter
	// DrainExpired is true once draining has waited its bound: the remaining grants are
	// cancelled.
	DrainExpired bool
}

// Action is the kind of a decision.
type Action string

// Actions the policy can decide.
const (
	ActWait        Action = "wait"
	ActGrant       Action = "grant"
	ActLoad        Action = "load"
	ActDrain       Action = "drain"
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
//   - requests for the loaded model are granted first-come up to the free slots (even
//     behind a waiter for another model, unless a swap already started: then they wait);
//   - a waiter for another model starts a swap: drain the loaded model (no new grants),
//     cancel its grants once the drain bound passes, unload, then load;
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
	if len(s.Waiting) == 0 {
		return Decision{Kind: ActWait}
	}
	head := s.Waiting[0]
	slots := s.Slots
	if slots < 1 {
		slots = 1
	}
	if s.Phase == PhaseReady && head.Model == s.Loaded || s.Phase == PhaseReady && !needsOther(s) {
		return grantSame(s, slots)
	}
	if s.Phase == PhaseReady {
		// The head needs another model. Same-model waiters ahead in line still fit? No: the
		// swap starts now, and new grants for the old model stop (drain).
		if s.Active > 0 {
			return Decision{Kind: ActDrain, Model: s.Loaded, Reason: "waiting for " + s.Loaded + " to finish its current work before switching"}
		}
		return Decision{Kind: ActUnload, Model: s.Loaded, Reason: "switching models"}
	}
	if s.Phase == PhaseDraining {
		if s.Active == 0 {
			return Decision{Kind: ActUnload, Model: s.Loaded, Reason: "switching models"}
		}
		if s.DrainExpired {
			return Decision{Kind: ActCancelDrain, Model: s.Loaded, Reason: "switching models"}
		}
		return Decision{Kind: ActWait, Reason: "waiting for " + s.Loaded + " to finish its current work before switching"}
	}
	// Idle or failed: load what the head needs.
	return Decision{Kind: ActLoad, Model: head.Model, Reason: "loading " + head.Model}
}

func needsOther(s State) bool {
	for _, w := range s.Waiting {
		if w.Model != s.Loaded {
			return true
		}
	}
	return false
}

func grantSame(s State, slots int) Decision {
	free := slots - s.Active
	d := Decision{Kind: ActGrant, Model: s.Loaded}
	for _, w := range s.Waiting {
		if free <= 0 {
			break
		}
		if w.Model != s.Loaded {
			// Behind a waiter for another model, later same-model requests wait their turn.
			break
		}
		d.Grant = append(d.Grant, w.ID)
		free--
	}
	if len(d.Grant) == 0 {
		return Decision{Kind: ActWait, Reason: "the device is busy"}
	}
	return d
}

// Position returns a waiter's 1-based place in line (0 when not waiting).
func Position(s State, id string) int {
	for i, w := range s.Waiting {
		if w.ID == id {
			return i + 1
		}
	}
	return 0
}

// MemoryBack reports whether enough memory came back after an unload: at least 75 % of
// the model's footprint freed compared with the reading taken before the unload.
func MemoryBack(before, after Reading, footprint int64) bool {
	if footprint <= 0 {
		return true
	}
	return after.Free()-before.Free() >= footprint*3/4
}
