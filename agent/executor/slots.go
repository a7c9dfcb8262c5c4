package executor

import (
	"context"
	"sync"
)

// Slots bounds how many runs use a device at once (1 for an exclusive device). Waiters
// are served in arrival order and can see their position.
type Slots struct {
	mu      sync.Mutex
	cap     map[string]int
	used    map[string]int
	waiting map[string][]chan struct{}
}

// NewSlots sets the capacity per device; unknown devices get 1.
func NewSlots(capacity map[string]int) *Slots {
	return &Slots{cap: capacity, used: map[string]int{}, waiting: map[string][]chan struct{}{}}
}

func (s *Slots) capacity(dev string) int {
	if c := s.cap[dev]; c > 0 {
		return c
	}
	return 1
}

// Acquire takes a slot, calling onWait(position) while queued (position 1 is next).
func (s *Slots) Acquire(ctx context.Context, dev string, onWait func(position int)) (release func(), err error) {
	s.mu.Lock()
	if s.used[dev] < s.capacity(dev) && len(s.waiting[dev]) == 0 {
		s.used[dev]++
		s.mu.Unlock()
		return s.releaser(dev), nil
	}
	ch := make(chan struct{})
	s.waiting[dev] = append(s.waiting[dev], ch)
	pos := len(s.waiting[dev])
	s.mu.Unlock()
	if onWait != nil {
		onWait(pos)
	}
	select {
	case <-ch:
		return s.releaser(dev), nil
	case <-ctx.Done():
		s.mu.Lock()
		defer s.mu.Unlock()
		for i, w := range s.waiting[dev] {
			if w == ch {
				s.waiting[dev] = append(s.waiting[dev][:i], s.waiting[dev][i+1:]...)
				return nil, ctx.Err()
			}
		}
		// Granted concurrently with the cancellation: give the slot back.
		s.releaseLocked(dev)
		return nil, ctx.Err()
	}
}

func (s *Slots) releaser(dev string) func() {
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			defer s.mu.Unlock()
			s.releaseLocked(dev)
		})
	}
}

func (s *Slots) releaseLocked(dev string) {
	if q := s.waiting[dev]; len(q) > 0 {
		s.waiting[dev] = q[1:]
		close(q[0]) // the slot passes straight to the next waiter
		return
	}
	s.used[dev]--
}

// Busy returns used and waiting counts of a device.
func (s *Slots) Busy(dev string) (used, waiting int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.used[dev], len(s.waiting[dev])
}
