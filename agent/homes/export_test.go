package homes

import "syscall"

// KillHermes kills the member's running Hermes as a crash would (SIGKILL to the sandbox).
func KillHermes(s *Supervisor, id string) {
	s.mu.Lock()
	m := s.members[id]
	var p *process
	if m != nil {
		p = m.cur
	}
	s.mu.Unlock()
	if p != nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		<-p.done
	}
}
