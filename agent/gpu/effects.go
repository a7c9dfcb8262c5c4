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
	ctl      int64  // the control-lease generation the effect acted under (EffectLeased: the new one)
	gen      int64  // EffectCrashed: the device generation the health check was about
	paused   bool   // a load paused the tenant (the owner records it)
	unknown  bool   // EffectUnloaded: the memory was not verified back
	why      string // EffectUnloaded with unknown: why, when not "the memory did not come back"
	reading  Reading
	runs     []string          // EffectHolders
	status   map[string]string // EffectHolders: the runs' statuses (when read)
	at       time.Time         // EffectConfirmed: when the operator confirmed
	before   Reading           // EffectUnloaded: the reading taken before the unload
	foot     int64             // EffectUnloaded: the model's predicted footprint
	took     time.Duration     // the backend's own load or unload time
	verify   time.Duration     // memory verification after an unload
	ready    time.Duration     // readiness checks after a load
}

// apply is the owner's half of every effect.
func (m *Manager) apply(e effect) {
	switch e.kind {
	case EffectReading:
		m.reading = e.reading
		m.recoverFrom(e.reading)
	case EffectHolders:
		m.renewRuns(e.runs, e.status, time.Now())
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
			if e.why != "" {
				m.becomeUnknown(e, e.why) // a model left loaded could not be unloaded
			}
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
		if m.phase == PhaseUnknown && (e.at.IsZero() || e.at.After(m.unknownAt)) {
			m.dev.Log.Info("device confirmed free by an operator", "device", m.dev.Name)
			m.recovered()
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
	m.idleSince, m.readyAt = time.Now(), time.Now()
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
		m.becomeUnknown(e, "unloading "+e.model+" failed: "+e.err.Error())
	case e.unknown && e.why != "":
		m.becomeUnknown(e, e.why)
	case e.unknown:
		m.becomeUnknown(e, "the memory did not come back after unloading "+e.model)
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

// becomeUnknown marks the device unknown after an unload whose memory was not verified
// back. Fresh readings keep coming from the telemetry loop: once RecoverReadings of them
// in a row show at least the free memory the unload should have produced, the device
// recovers by itself (recoverFrom); an operator may confirm it sooner.
func (m *Manager) becomeUnknown(e effect, why string) {
	m.phase, m.unknownAt, m.recoverOK = PhaseUnknown, time.Now(), 0
	m.recoverMin = 0
	if !e.before.At.IsZero() && e.foot > 0 {
		m.recoverMin = e.before.Free() + e.foot*3/4
	}
	m.why = why
	m.reason = m.unknownReason()
	m.dev.Log.Warn("device state unknown", "device", m.dev.Name, "why", why)
}

func (m *Manager) unknownReason() string {
	r := m.why + "; nothing loads until it is confirmed free"
	if m.recoverMin > 0 {
		r += fmt.Sprintf(" (it recovers by itself after %d readings in a row with at least %s free", m.dev.RecoverReadings, gib(m.recoverMin))
		if m.reading.MemTotal > 0 {
			r += fmt.Sprintf("; last reading %s free", gib(m.reading.Free()))
		}
		r += ")"
	}
	return r + "; an admin can confirm it: pa admin gpu confirm " + m.dev.Name
}

// recoverFrom counts fresh readings showing the memory back while the device is unknown.
func (m *Manager) recoverFrom(r Reading) {
	if m.phase != PhaseUnknown || m.recoverMin <= 0 {
		return
	}
	if !r.Stale(time.Now(), 5*time.Second) && r.Free() >= m.recoverMin {
		m.recoverOK++
	} else {
		m.recoverOK = 0
	}
	if m.recoverOK >= m.dev.RecoverReadings {
		m.dev.Log.Info("device memory back: recovered from unknown", "device", m.dev.Name, "free", r.Free())
		m.recovered()
		return
	}
	m.reason = m.unknownReason()
}

func (m *Manager) recovered() {
	m.phase, m.reason, m.why, m.recoverMin, m.recoverOK = PhaseIdle, "", "", 0, 0
	m.resumeTenant()
}

func gib(b int64) string { return fmt.Sprintf("%.1f GiB", float64(b)/(1<<30)) }
