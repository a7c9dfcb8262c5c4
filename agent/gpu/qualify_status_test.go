package gpu

import (
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/queue/redistest"
	"privateassistant/runconfig"
)

// A qualification's status is written only while the route's status hash is its
// request's, in one step: a newer request that took the hash (the admin asked again
// after this one was read as abandoned) is never overwritten by the older one.
func TestQualificationStatusIsOnlyItsRequests(t *testing.T) {
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()
	q := &Qualifier{RDB: rdb}
	key := runconfig.QualifyStatusKey("work")
	old := runconfig.QualifyRequest{ID: "q-old", Route: "work", Device: "xtx"}
	require.NoError(t, rdb.HSet(ctx, key, "requestId", "q-old", "state", runconfig.QualifyQueued).Err())

	q.status(ctx, old, "state", runconfig.QualifyRunning, "position", 0)
	require.Equal(t, string(runconfig.QualifyRunning), rdb.HGet(ctx, key, "state").Val())
	require.Equal(t, "xtx", rdb.HGet(ctx, key, "device").Val())
	require.Positive(t, rdb.PTTL(ctx, key).Val().Milliseconds(), "the status expires")

	require.NoError(t, rdb.HSet(ctx, key, "requestId", "q-new", "state", runconfig.QualifyQueued).Err())
	q.status(ctx, old, "state", runconfig.QualifyError, "reason", "cut off")
	require.Equal(t, "q-new", rdb.HGet(ctx, key, "requestId").Val())
	require.Equal(t, string(runconfig.QualifyQueued), rdb.HGet(ctx, key, "state").Val(), "the newer request's status stays")
	require.Empty(t, rdb.HGet(ctx, key, "reason").Val())
}
