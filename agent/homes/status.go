package homes

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"

	"privateassistant/agent/memberkey"
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

// CanStart checks, starting nothing, what a member's Hermes start needs: the venv (its
// Python and an executable bin/hermes), bubblewrap, the profile template and the .env
// beside it making a member's config (without the agent's gateway key), and a writable
// homes folder. Readiness reports it (hermes:homes) before any member has run, and while
// every member's Hermes is idle.
func (s *Supervisor) CanStart() error {
	if _, err := venvPaths(s.opts.Venv); err != nil {
		return err
	}
	venv, err := filepath.EvalSymlinks(s.opts.Venv)
	if err != nil {
		return fmt.Errorf("hermes venv: %w", err)
	}
	if err := executable(filepath.Join(venv, "bin", "hermes")); err != nil {
		return fmt.Errorf("hermes venv: %w", err)
	}
	if err := executable(s.opts.Bwrap); err != nil {
		return fmt.Errorf("bubblewrap: %w", err)
	}
	tmpl, err := os.ReadFile(s.opts.Template)
	if err != nil {
		return fmt.Errorf("hermes profile template: %w", err)
	}
	if err := s.templateKeyless(tmpl); err != nil {
		return err
	}
	if _, err := memberConfig(tmpl, 1); err != nil {
		return err
	}
	if _, err := memberEnv(s.opts.Template, s.opts.GatewayKey, memberkey.Derive(s.opts.GatewayKey, probeDir)); err != nil {
		return err
	}
	f, err := os.CreateTemp(s.opts.Root, ".ready-*")
	if err != nil {
		return fmt.Errorf("hermes homes folder: %w", err)
	}
	_ = f.Close()
	return os.Remove(f.Name())
}

// executable reports why path is not an executable file.
func executable(path string) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.Mode().IsRegular() || fi.Mode().Perm()&0o111 == 0 {
		return fmt.Errorf("%s is not an executable file", path)
	}
	return nil
}
