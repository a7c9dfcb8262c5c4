package gpu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue/redistest"
)

// TestDecidePreemptsOnlyPreemptibleModels: when the swap to another model is due, a
// preemptible loaded model's holders are asked to yield (and no new grant is made);
// anything else is drained and waited for; an exclusive qualification is never preempted.
func TestDecidePreemptsOnlyPreemptibleModels(t *testing.T) {
	now := time.Now()
	s := State{Phase: PhaseReady, Loaded: "a", Active: 1, Slots: 1, Now: now, Waiting: []Waiter{{ID: "w1", Model: "b", Since: now}},
		Holders: []Holder{{Run: "run-holding-a", Model: "a", Since: now.Add(-3 * time.Minute)}}}
	require.Equal(t, ActDrain, Decide(s).Kind, "not preemptible: waited for")
	s.Preemptible = true
	d := Decide(s)
	require.Equal(t, ActPreempt, d.Kind)
	require.Contains(t, d.Reason, "run run-hold")
	require.Contains(t, d.Reason, "pauses at its next turn boundary so b can load")
	s.Exclusive = true
	require.Equal(t, ActDrain, Decide(s).Kind, "a qualification is never preempted")
	s.Exclusive, s.Active, s.Holders = false, 0, nil
	require.Equal(t, ActUnload, Decide(s).Kind, "nobody to ask: the swap runs")
	s.Waiting = []Waiter{{ID: "w2", Model: "a", Since: now}}
	s.Active = 1
	require.Equal(t, ActWait, Decide(s).Kind, "no swap due: nobody is asked to yield")
}

// TestPreemptibleHolderIsAskedToYield: a run holds a preemptible model when a job for
// another model queues: its grant's Yield closes (the grant stays valid: nothing is cut),
// the waiter is told the holder pauses at its next turn boundary, and once the holder
// releases, the other model loads. A holder of a model that is not preemptible is never
// asked.
func TestPreemptibleHolderIsAskedToYield(t *testing.T) {
	for _, preemptible := range []bool{true, false} {
		b := newTestBackend(t)
		m := startManager(t, Device{Backend: b, Slots: 1, Preemptible: func(model string) bool { return preemptible && model == "a" }})
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		ga, err := m.AcquireFor(ctx, "run-holding-a", "a", nil)
		require.NoError(t, err)
		var rs reasons
		got := make(chan error, 1)
		go func() {
			g, err := m.Acquire(ctx, "b", rs.onWait)
			if err == nil {
				g.Release()
			}
			got <- err
		}()
		if !preemptible {
			require.Eventually(t, func() bool { return rs.has("b loads when it finishes") }, 10*time.Second, 5*time.Millisecond)
			require.Never(t, func() bool {
				select {
				case <-ga.Yield():
					return true
				default:
					return false
				}
			}, 300*time.Millisecond, 10*time.Millisecond, "a holder of a model that is not preemptible is never asked to yield")
			ga.Release()
			require.NoError(t, <-got)
			continue
		}
		select {
		case <-ga.Yield():
		case <-ctx.Done():
			t.Fatal("the holder of a preemptible model was not asked to yield")
		}
		require.Eventually(t, func() bool { return rs.has("pauses at its next turn boundary so b can load") }, 10*time.Second, 5*time.Millisecond)
		select {
		case <-ga.Done():
			t.Fatal("yield is a request, not a revocation")
		default:
		}
		_, err = m.Serve("run-holding-a", "a", ga.Generation)
		require.NoError(t, err, "the holder is still served until it releases")
		ga.Release()
		require.NoError(t, <-got)
		loads, _ := b.calls()
		require.Equal(t, []string{"a", "b"}, loads)
	}
}

// TestConfigMarksModelsPreemptible: a model's "preemptible" in the GPU host file is what
// the device's manager asks about.
func TestConfigMarksModelsPreemptible(t *testing.T) {
	r := redistest.Start(t)
	rdb := r.Client()
	defer rdb.Close()
	p := filepath.Join(t.TempDir(), "gpu.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"devices":[{"name":"xtx","backend":{"kind":"upstream","url":"http://x"},
		"models":{"research":{"preemptible":true},"coder":{}}}]}`), 0o600))
	c, err := LoadConfig(p)
	require.NoError(t, err)
	pool, _, _, err := c.Build(rdb, "me", time.Second)
	require.NoError(t, err)
	d := pool["xtx"].dev
	require.True(t, d.Preemptible("research"))
	require.False(t, d.Preemptible("coder"))
	require.False(t, d.Preemptible("unknown"))
}
