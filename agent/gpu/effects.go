package gpu

import (
	"fmt"
	"time"
)

// EffectKind names what an effect goroutine or a watch loop reports to the owner
// goroutine. Only the owner applies effects; the goroutines that produce them never touch
// the manager's state.
type EffectKind int

// Effect kinds.
const (
	EffectLoaded     EffectKind = iota + 1 // a load finished and the model passed readiness
	EffectLoadFailed                       // a load failed; the waiters for its model are failed
	EffectUnloaded                         // an unload finished (Unknown: the memory did not come back)
	EffectStale                            // a load or unload was refused: the control-lease generation went stale
	EffectLeased                           // the control lease was acquired (Ctl is its generation)
	EffectFenced                           // the control lease was lost
	EffectCrashed                          // the health loop found the loaded model's server gone
	EffectReading                          // the telemetry loop read the device
	EffectHolders                          // the holder loop saw these runs' leases alive
	EffectConfirmed                        // an operator confirmed an unknown device free
)

var effectNames = map[EffectKind]string{EffectLoaded: "loaded", EffectLoadFailed: "load-failed", EffectUnloaded: "unloaded",
	EffectStale: "stale", EffectLeased: "leased", EffectFenced: "fenced", EffectCrashed: "crashed", EffectReading: "reading",
	EffectHolders: "holders", EffectConfirmed: "confirmed"}

func (k EffectKind) String() string {
	if s, ok := effectNames[k]; ok {
		return s
	}
	return fmt.Sprintf("effect(%d)", int(k))
}

// effect is one report to the owner goroutine.
type effect struct {
	kind     EffectKind
	model    string
	endpoint string
	err      error
	ctl      int64 // the control-lease generation the effect acted under (EffectLeased: the new one)
	gen      int64 // EffectCrashed: the device generation the health check was about
	paused   bool  // a load paused the tenant (the owner records it)
	unknown  bool  // EffectUnloaded: the memory was not verified back
	reading  Reading
	runs     []string      // EffectHolders
	took     time.Duration // the backend's own load or unload time
	verify   time.Duration // memory verification after an unload
	ready    time.Duration // readiness checks after a load
}
