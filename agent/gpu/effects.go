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

// apply is the owner's half of every effect.
func (m *Manager) apply(e effect) {
	switch e.kind {
	case EffectReading:
		m.reading = e.reading
	case EffectHolders:
		m.renewRuns(e.runs, time.Now())
	case EffectCrashed:
		if !m.phase.Serving() || e.model != m.loaded || e.gen != m.gen {
			return // about a model no longer served: nothing to do
		}
		m.dev.Log.Warn("backend crashed", "device", m.dev.Name, "model", m.loaded)
		m.revokeAll("the model server crashed")
		m.phase, m.loaded, m.endpoint, m.reason = PhaseIdle, "", "", "the model server crashed; it reloads on next use"
	case EffectLeased:
		m.ctl = e.ctl
		if m.phase == PhaseFenced {
			m.phase, m.reason = PhaseIdle, ""
		}
	case EffectFenced:
		m.fence("control lease lost")
	case EffectStale:
		if e.paused {
			m.paused = true
		}
		if e.ctl != m.ctl {
			return // already fenced (and perhaps leased again) since
		}
		m.dev.Log.Warn("refused a load or unload under a stale control-lease generation", "device", m.dev.Name, "model", e.model, "err", e.err)
		m.dev.Lease.lose() // the lease loop releases and re-acquires it
		m.fence("stale control-lease generation")
	case EffectConfirmed:
		if m.phase == PhaseUnknown {
			m.phase, m.reason = PhaseIdle, ""
			m.resumeTenant()
		}
	case EffectLoaded, EffectLoadFailed:
		m.applyLoad(e)
	case EffectUnloaded:
		m.applyUnload(e)
	}
}

func (m *Manager) applyLoad(e effect) {
	if e.paused {
		m.paused = true
	}
	if m.phase != PhaseLoading || m.loaded != e.model || e.ctl != m.ctl {
		// Control was lost while this ran: a model we loaded is not ours to serve.
		if e.kind == EffectLoaded {
			m.releaseOwn()
		} else {
			m.failModel(e.model, e.err)
		}
		return
	}
	if e.kind == EffectLoadFailed {
		m.dev.Log.Warn("load failed", "device", m.dev.Name, "model", e.model, "err", e.err)
		m.swapStart = time.Time{}
		m.phase, m.loaded, m.endpoint, m.reason = PhaseFailed, "", "", e.err.Error()
		m.failModel(e.model, e.err)
		m.resumeTenant()
		return
	}
	m.phase, m.loaded, m.endpoint, m.reason = PhaseReady, e.model, e.endpoint, ""
	m.gen++
	if !m.swapStart.IsZero() {
		m.cur.Load, m.cur.Ready, m.cur.Total = e.took, e.ready, time.Since(m.swapStart)
		m.lastSwap, m.swapStart = m.cur, time.Time{}
	}
}

func (m *Manager) applyUnload(e effect) {
	if m.phase != PhaseUnloading || e.ctl != m.ctl {
		return // fenced meanwhile: the fence already settled the device's state
	}
	m.loaded, m.endpoint = "", ""
	m.cur.Unload, m.cur.Verify = e.took, e.verify
	switch {
	case e.err != nil:
		m.phase, m.reason = PhaseUnknown, "the unload failed: "+e.err.Error()
	case e.unknown:
		m.phase, m.reason = PhaseUnknown, "the memory did not come back after the unload"
	default:
		m.phase, m.reason = PhaseIdle, ""
		m.resumeTenant()
	}
}

// fence stops serving after control of the device was lost: grants are revoked, and
// models this agent runs as its own processes are stopped (no other agent can use them).
// A model on a shared server is left alone: unloading it would be an unload under a stale
// generation, and the server now belongs to the new holder.
func (m *Manager) fence(why string) {
	m.revokeAll("another agent took control of the device (" + why + ")")
	if m.loaded != "" && m.phase != PhaseFenced {
		m.releaseOwn()
	}
	m.ctl = 0
	m.swapStart = time.Time{}
	m.phase, m.loaded, m.endpoint, m.reason = PhaseFenced, "", "", "another agent controls this device"
}

// failModel answers the waiters for model with err; others may still be served.
func (m *Manager) failModel(model string, err error) {
	kept := m.waiting[:0]
	for _, w := range m.waiting {
		if w.Model == model {
			w.reply <- result{err: err}
		} else {
			kept = append(kept, w)
		}
	}
	m.waiting = kept
}

// Confirm marks an unknown device as free again (an operator checked, or a fresh
// telemetry reading shows memory back).
func (m *Manager) Confirm() {
	select {
	case m.effects <- effect{kind: EffectConfirmed}:
	case <-m.quit:
	}
}
