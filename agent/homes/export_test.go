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

// PickPorts makes the next starts pick ports from first before free ones (restored on return's call).
func PickPorts(first ...int) (restore func()) {
	old := pickPort
	pickPort = func() (int, error) {
		if len(first) > 0 {
			p := first[0]
			first = first[1:]
			return p, nil
		}
		return freePort()
	}
	return func() { pickPort = old }
}
