package homes

import (
	"context"
	"errors"
	"sort"
)

// State is a member's Hermes's state as readiness reports it (MemberStatus.State).
type State string

// The member states.
const (
	StateRunning State = "running" // its Hermes runs
	StateIdle    State = "idle"    // stopped after being unused (or never started since): not a failure
	StateExited  State = "exited"  // its Hermes exited by itself (a crash); the next run starts it again
	StateFailed  State = "failed"  // its last start failed (Err says why)
)

// MemberStatus is one member's Hermes as the supervisor knows it.
type MemberStatus struct {
	Member string
	State  State
	Err    error // StateFailed: the start's failure
	Home   Home  // StateRunning: the running Hermes (to probe it)
}

// setFailed records the member's last start failure (nil: a start succeeded). The
// caller holds m.mu.
func (s *Supervisor) setFailed(m *member, err error) {
	s.mu.Lock()
	m.failed = err
	s.mu.Unlock()
}

// Status reports every member the supervisor knows (sorted by member). It waits for no
// start in progress: a member being started reads as its previous state.
func (s *Supervisor) Status(context.Context) []MemberStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]MemberStatus, 0, len(s.members))
	for id, m := range s.members {
		st := MemberStatus{Member: id, State: StateIdle}
		switch {
		case m.failed != nil && m.cur == nil:
			st.State, st.Err = StateFailed, m.failed
		case m.cur != nil && m.cur.exited():
			st.State, st.Err = StateExited, errors.New("its hermes exited by itself")
		case m.cur != nil:
			st.State = StateRunning
			if dir, err := s.Dir(id); err == nil {
				st.Home = home(id, dir, m.cur)
			}
		}
		out = append(out, st)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Member < out[j].Member })
	return out
}
