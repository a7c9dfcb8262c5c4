package gpu

import "time"

// Timings of the last swap: what the backend itself took and what the manager added.
type Timings struct {
	Unload, Verify, Load, Ready time.Duration
	// Total runs from the decision to unload until the new model is ready.
	Total time.Duration
}

// Status is a snapshot of the device.
type Status struct {
	Device     string
	Phase      Phase
	Loaded     string
	Endpoint   string // the loaded model's server (…/v1); "" with none
	Active     int
	Waiting    int
	Generation int64
	Reading    Reading // the telemetry loop's latest reading (zero: none yet)
	Reason     string
	LastSwap   Timings
}

// Snapshot returns the device's status (answered by the owner goroutine without I/O).
func (m *Manager) Snapshot() Status {
	c := make(chan Status, 1)
	select {
	case m.snaps <- c:
		return <-c
	case <-m.quit:
		return Status{Device: m.dev.Name, Phase: PhaseUnknown}
	}
}

func (m *Manager) status() Status {
	return Status{Device: m.dev.Name, Phase: m.phase, Loaded: m.loaded, Endpoint: m.endpoint, Active: len(m.grants), Waiting: len(m.waiting),
		Generation: m.gen, Reading: m.reading, Reason: m.reason, LastSwap: m.lastSwap}
}
