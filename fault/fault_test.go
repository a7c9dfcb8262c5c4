package fault_test

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/fault"
)

func TestErrorKeepsItsCause(t *testing.T) {
	cause := errors.New("connection refused")
	err := fmt.Errorf("admit: %w", fault.E(fault.Unavailable, "queue_unavailable", "the job queue is unavailable", cause))
	require.ErrorIs(t, err, cause)
	require.Equal(t, fault.Unavailable, fault.KindOf(err))
	require.Equal(t, "queue_unavailable", fault.As(err).Code)
	require.Equal(t, "admit: queue_unavailable: the job queue is unavailable: connection refused", err.Error())

	require.Equal(t, fault.Internal, fault.KindOf(cause), "a plain error is internal")
	require.Nil(t, fault.As(cause))
	require.Equal(t, "not_found", fault.Missing("run", nil).Code)
	require.Equal(t, "run not found", fault.Missing("run", nil).Message)
}

func TestRetryAndWithLeaveTheOriginalAlone(t *testing.T) {
	sentinel := fault.Errorf(fault.Conflict, "stale_revision", "stale")
	got := sentinel.Retry(time.Second).With("currentRevision", 3).With("other", true)
	require.Equal(t, time.Second, got.RetryAfter)
	require.Equal(t, map[string]any{"currentRevision": 3, "other": true}, got.Details)
	require.Zero(t, sentinel.RetryAfter)
	require.Nil(t, sentinel.Details, "a sentinel is never changed by a caller's details")
}

func TestEveryKindHasAName(t *testing.T) {
	seen := map[string]bool{}
	for _, k := range fault.Kinds() {
		name := k.String()
		require.NotContains(t, name, "kind(", k)
		require.False(t, seen[name], name)
		seen[name] = true
	}
	require.Equal(t, "internal", fault.Kinds()[0].String())
}
