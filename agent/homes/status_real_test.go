package homes_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/homes"
	"privateassistant/agent/homes/homestest"
)

// TestStatusTellsIdleFromFailed (issue 36): readiness reads each member's Hermes from
// Status: running while it runs, idle once stopped for being unused (not a failure),
// failed when its start failed (with the cause), exited when it died by itself.
func TestStatusTellsIdleFromFailed(t *testing.T) {
	e := homestest.Start(t, homestest.Options{IdleAfter: 2 * time.Second, Check: func(ctx context.Context, h homes.Home) error {
		if h.Member == "bob" {
			return errors.New("runs_idempotency is not durable")
		}
		return nil
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	state := func(id string) homes.MemberStatus {
		for _, st := range e.Status(ctx) {
			if st.Member == id {
				return st
			}
		}
		return homes.MemberStatus{Member: id, State: "absent"}
	}

	_, release, err := e.Acquire(ctx, "alice")
	require.NoError(t, err)
	st := state("alice")
	require.Equal(t, homes.StateRunning, st.State)
	require.NotEmpty(t, st.Home.URL)
	_, _, err = e.Acquire(ctx, "bob")
	require.Error(t, err)
	st = state("bob")
	require.Equal(t, homes.StateFailed, st.State)
	require.ErrorContains(t, st.Err, "runs_idempotency is not durable")

	release()
	require.Eventually(t, func() bool { return state("alice").State == homes.StateIdle }, 30*time.Second, 20*time.Millisecond,
		"stopped while unused: idle, not failed")

	_, release, err = e.Acquire(ctx, "alice")
	require.NoError(t, err)
	defer release()
	require.Equal(t, homes.StateRunning, state("alice").State)
	homes.KillHermes(e.Supervisor, "alice")
	st = state("alice")
	require.Equal(t, homes.StateExited, st.State)
	require.Error(t, st.Err)
}
