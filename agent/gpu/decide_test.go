package gpu

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func w(id, model string) Waiter { return Waiter{ID: id, Model: model} }

func TestDecideTable(t *testing.T) {
	t0 := time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC)
	at := func(id, model string, ago time.Duration) Waiter {
		return Waiter{ID: id, Model: model, Since: t0.Add(-ago)}
	}
	holder := []Holder{{Run: "6a1f0c2e9b7d4e11", Model: "a", Since: t0.Add(-12 * time.Minute)}}
	held := "the device is held by run 6a1f0c2e (a, running for 12 min)"
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
		{"an exclusive device grants one and says who holds it", State{Phase: PhaseReady, Loaded: "a", Slots: 1, Active: 1, Holders: holder, Now: t0, Waiting: []Waiter{w("2", "a")}},
			Decision{Kind: ActWait, Reason: held}},
		{"a waiter for another model drains the loaded one (FIFO)", State{Phase: PhaseReady, Loaded: "a", Slots: 4, Active: 2, Holders: holder, Now: t0, Waiting: []Waiter{w("1", "b"), w("2", "a")}},
			Decision{Kind: ActDrain, Model: "a", Reason: held + "; b loads when it finishes"}},
		{"FIFO: same-model requests behind another model's waiter wait", State{Phase: PhaseReady, Loaded: "a", Slots: 4, Active: 0, Waiting: []Waiter{w("1", "a"), w("2", "b"), w("3", "a")}},
			Decision{Kind: ActGrant, Model: "a", Grant: []string{"1"}}},
		{"within the aging bound the loaded model's requests go first", State{Phase: PhaseReady, Loaded: "a", Slots: 1, Now: t0, MaxExtraWait: 10 * time.Minute,
			Waiting: []Waiter{at("1", "b", 9*time.Minute), at("2", "a", time.Minute)}}, Decision{Kind: ActGrant, Model: "a", Grant: []string{"2"}}},
		{"within the bound, a full device keeps its model while someone wants it", State{Phase: PhaseReady, Loaded: "a", Slots: 1, Active: 1, Holders: holder, Now: t0, MaxExtraWait: 10 * time.Minute,
			Waiting: []Waiter{at("1", "b", 9*time.Minute), at("2", "a", time.Minute)}}, Decision{Kind: ActWait, Reason: held}},
		{"past the aging bound the head's turn comes: drain, nothing more goes ahead", State{Phase: PhaseReady, Loaded: "a", Slots: 2, Active: 1, Holders: holder, Now: t0, MaxExtraWait: 10 * time.Minute,
			Waiting: []Waiter{at("1", "b", 10*time.Minute), at("2", "a", time.Minute)}}, Decision{Kind: ActDrain, Model: "a", Reason: held + "; b loads when it finishes"}},
		{"nobody wants the loaded model: the swap starts at once", State{Phase: PhaseReady, Loaded: "a", Slots: 1, Now: t0, MaxExtraWait: 10 * time.Minute,
			Waiting: []Waiter{at("1", "b", time.Second)}}, Decision{Kind: ActUnload, Model: "a", Reason: "switching from a to b"}},
		{"draining grants again when the bound allows it", State{Phase: PhaseDraining, Loaded: "a", Slots: 1, Now: t0, MaxExtraWait: 10 * time.Minute,
			Waiting: []Waiter{at("1", "b", time.Minute), at("2", "a", time.Second)}}, Decision{Kind: ActGrant, Model: "a", Grant: []string{"2"}}},
		{"an idle loaded model is unloaded for another", State{Phase: PhaseReady, Loaded: "a", Slots: 1, Waiting: []Waiter{w("1", "b")}}, Decision{Kind: ActUnload, Model: "a", Reason: "switching from a to b"}},
		{"draining waits for running work, however long", State{Phase: PhaseDraining, Loaded: "a", Active: 1, Holders: holder, Now: t0, Waiting: []Waiter{at("1", "b", 5*time.Hour)}},
			Decision{Kind: ActDrain, Model: "a", Reason: held + "; b loads when it finishes"}},
		{"a holder waiting for approval is named as such", State{Phase: PhaseDraining, Loaded: "a", Active: 1, Now: t0, Waiting: []Waiter{w("1", "b")},
			Holders: []Holder{{Run: "6a1f0c2e9b7d4e11", Model: "a", Since: t0.Add(-90 * time.Minute), Status: "waiting_for_approval"}}},
			Decision{Kind: ActDrain, Model: "a", Reason: "the device is held by run 6a1f0c2e (a, running for 1 h 30 min), which is waiting for its owner's approval; b loads when it finishes"}},
		{"a drained model unloads", State{Phase: PhaseDraining, Loaded: "a", Active: 0, Waiting: []Waiter{w("1", "b")}}, Decision{Kind: ActUnload, Model: "a", Reason: "switching from a to b"}},
		{"past an explicit drain bound its grants are revoked", State{Phase: PhaseDraining, Loaded: "a", Active: 2, DrainExpired: true, Waiting: []Waiter{w("1", "b")}},
			Decision{Kind: ActCancelDrain, Model: "a", Reason: "switching models"}},
		{"an idle model unloads after its idle time", State{Phase: PhaseReady, Loaded: "a", Slots: 1, Now: t0, IdleUnload: 5 * time.Minute, IdleSince: t0.Add(-5 * time.Minute)},
			Decision{Kind: ActUnload, Model: "a", Reason: "unloading a: idle for 5 min"}},
		{"not before", State{Phase: PhaseReady, Loaded: "a", Slots: 1, Now: t0, IdleUnload: 5 * time.Minute, IdleSince: t0.Add(-4 * time.Minute)}, Decision{Kind: ActWait}},
		{"nor while in use", State{Phase: PhaseReady, Loaded: "a", Slots: 1, Active: 1, Now: t0, IdleUnload: 5 * time.Minute, IdleSince: t0.Add(-time.Hour)}, Decision{Kind: ActWait}},
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

// TestPositionIsTheStartOrder (issue 32 item 2): a position is the place in the order
// Decide starts jobs in. A later job for the loaded model goes first while the older job
// for another model is within its bound: the older one's card counts it and says until
// when; the later one's card says it is ahead only for now. Once the bound passes, FIFO.
func TestPositionIsTheStartOrder(t *testing.T) {
	t0 := time.Date(2026, 1, 1, 12, 0, 0, 0, time.UTC)
	older := Waiter{ID: "older", Model: "b", Since: t0.Add(-10 * time.Minute)}
	later := Waiter{ID: "later", Model: "a", Since: t0.Add(-time.Minute)}
	s := State{Phase: PhaseReady, Loaded: "a", Slots: 1, Active: 1, Now: t0, MaxExtraWait: 30 * time.Minute,
		Waiting: []Waiter{older, later}}
	require.Equal(t, []Waiter{later, older}, Order(s))
	require.Equal(t, 1, Position(s, "later"))
	require.Equal(t, 2, Position(s, "older"))
	order := Order(s)
	require.Equal(t, "; 1 later job goes first to save a model swap; none will after 20 min more",
		BoundNote(s, order, 2))
	require.Equal(t, "; ahead of 1 older job for now to save a swap (they go first after 30 min of waiting)", BoundNote(s, order, 1))
	s.Active = 0
	require.Equal(t, []string{"later"}, Decide(s).Grant, "Decide starts the job shown first")

	s.Now = t0.Add(20 * time.Minute) // the older job reached its bound
	s.Active = 1
	require.Equal(t, []Waiter{older, later}, Order(s))
	require.Empty(t, BoundNote(s, Order(s), 1))
	s.Active = 0
	d := Decide(s)
	require.Equal(t, ActUnload, d.Kind, "the swap for the older job is due")

	// Strict FIFO: no notes, arrival order.
	s.MaxExtraWait, s.Now = 0, t0
	require.Equal(t, []Waiter{older, later}, Order(s))
	require.Empty(t, BoundNote(s, Order(s), 2))
	// Idle: the head's model loads first, its later jobs with it.
	s = State{Phase: PhaseIdle, Now: t0, MaxExtraWait: time.Hour, Waiting: []Waiter{w("1", "a"), w("2", "b"), w("3", "a")}}
	for i := range s.Waiting {
		s.Waiting[i].Since = t0
	}
	require.Equal(t, []string{"1", "3", "2"}, ids(Order(s)))
}

func ids(ws []Waiter) []string {
	out := make([]string, len(ws))
	for i, w := range ws {
		out[i] = w.ID
	}
	return out
}
