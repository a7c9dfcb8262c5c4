package gpu

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func w(id, model string) Waiter { return Waiter{ID: id, Model: model} }

func TestDecideTable(t *testing.T) {
	cases := []struct {
		name string
		s    State
		want Decision
	}{
		{"nothing to do", State{Phase: PhaseReady, Loaded: "a", Slots: 1}, Decision{Kind: ActWait}},
		{"idle loads the head's model", State{Phase: PhaseIdle, Waiting: []Waiter{w("1", "a"), w("2", "b")}}, Decision{Kind: ActLoad, Model: "a", Reason: "loading a"}},
		{"a failed load is retried by the next waiter", State{Phase: PhaseFailed, Waiting: []Waiter{w("1", "b")}}, Decision{Kind: ActLoad, Model: "b", Reason: "loading b"}},
		{"ready grants same-model waiters up to the slots", State{Phase: PhaseReady, Loaded: "a", Slots: 2, Waiting: []Waiter{w("1", "a"), w("2", "a"), w("3", "a")}},
			Decision{Kind: ActGrant, Model: "a", Grant: []string{"1", "2"}}},
		{"an exclusive device grants one", State{Phase: PhaseReady, Loaded: "a", Slots: 1, Active: 1, Waiting: []Waiter{w("2", "a")}}, Decision{Kind: ActWait, Reason: "the device is busy"}},
		{"a waiter for another model drains the loaded one", State{Phase: PhaseReady, Loaded: "a", Slots: 4, Active: 2, Waiting: []Waiter{w("1", "b"), w("2", "a")}},
			Decision{Kind: ActDrain, Model: "a", Reason: "waiting for a to finish its current work before switching"}},
		{"same-model requests queued behind a swap wait", State{Phase: PhaseReady, Loaded: "a", Slots: 4, Active: 0, Waiting: []Waiter{w("1", "a"), w("2", "b"), w("3", "a")}},
			Decision{Kind: ActGrant, Model: "a", Grant: []string{"1"}}},
		{"an idle loaded model is unloaded for another", State{Phase: PhaseReady, Loaded: "a", Slots: 1, Waiting: []Waiter{w("1", "b")}}, Decision{Kind: ActUnload, Model: "a", Reason: "switching models"}},
		{"draining waits", State{Phase: PhaseDraining, Loaded: "a", Active: 1, Waiting: []Waiter{w("1", "b")}}, Decision{Kind: ActWait, Reason: "waiting for a to finish its current work before switching"}},
		{"a drained model unloads", State{Phase: PhaseDraining, Loaded: "a", Active: 0, Waiting: []Waiter{w("1", "b")}}, Decision{Kind: ActUnload, Model: "a", Reason: "switching models"}},
		{"past the drain bound its grants are cancelled", State{Phase: PhaseDraining, Loaded: "a", Active: 2, DrainExpired: true, Waiting: []Waiter{w("1", "b")}},
			Decision{Kind: ActCancelDrain, Model: "a", Reason: "switching models"}},
		{"unknown memory loads nothing", State{Phase: PhaseUnknown, Waiting: []Waiter{w("1", "a")}}, Decision{Kind: ActWait, Reason: "the device's memory state is unknown; nothing loads until it is confirmed free"}},
		{"a fenced device loads nothing", State{Phase: PhaseFenced, Waiting: []Waiter{w("1", "a")}}, Decision{Kind: ActWait, Reason: "another agent controls this device"}},
		{"loading waits", State{Phase: PhaseLoading, Loaded: "b", Waiting: []Waiter{w("1", "b")}}, Decision{Kind: ActWait, Reason: "loading b"}},
	}
	for _, c := range cases {
		require.Equal(t, c.want, Decide(c.s), c.name)
	}
	require.Equal(t, 2, Position(State{Waiting: []Waiter{w("1", "a"), w("2", "b")}}, "2"))
	require.Equal(t, 0, Position(State{}, "x"))
}

func TestMemoryBack(t *testing.T) {
	before := Reading{MemTotal: 24 << 30, MemUsed: 20 << 30}
	require.False(t, MemoryBack(before, Reading{MemTotal: 24 << 30, MemUsed: 15 << 30}, 8<<30), "5 of 8 GiB is under 75 %")
	require.True(t, MemoryBack(before, Reading{MemTotal: 24 << 30, MemUsed: 14 << 30}, 8<<30), "6 of 8 GiB is 75 %")
	require.True(t, MemoryBack(before, before, 0))
}

// TestNeverTwoModelsAtOnce walks random request sequences through the policy and checks
// the invariant the manager relies on: a load is only decided with nothing loaded.
func TestNeverTwoModelsAtOnce(t *testing.T) {
	models := []string{"a", "b", "c"}
	for seed := 0; seed < 500; seed++ {
		s := State{Phase: PhaseIdle, Slots: 1 + seed%3}
		r := seed
		next := func(n int) int { r = (r*1103515245 + 12345) & 0x7fffffff; return r % n }
		for step := 0; step < 60; step++ {
			if next(2) == 0 {
				s.Waiting = append(s.Waiting, w(string(rune('A'+step)), models[next(3)]))
			}
			d := Decide(s)
			switch d.Kind {
			case ActLoad:
				require.True(t, s.Phase == PhaseIdle || s.Phase == PhaseFailed, "load decided while %s holds %q", s.Phase, s.Loaded)
				require.Zero(t, s.Active)
				s.Phase, s.Loaded = PhaseReady, d.Model
			case ActGrant:
				require.Equal(t, s.Loaded, d.Model)
				s.Active += len(d.Grant)
				require.LessOrEqual(t, s.Active, s.Slots)
				s.Waiting = s.Waiting[len(d.Grant):]
			case ActDrain:
				s.Phase = PhaseDraining
			case ActCancelDrain:
				s.Active = 0
			case ActUnload:
				require.Zero(t, s.Active, "unload with live grants")
				s.Phase, s.Loaded = PhaseIdle, ""
			}
			if s.Active > 0 && next(3) == 0 {
				s.Active--
			}
			s.DrainExpired = next(5) == 0
		}
	}
}
