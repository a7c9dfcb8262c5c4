package runconfig_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/runconfig"
)

// TestQualificationStatusIsOnlyItsRequests: a qualification's status is written in one
// step, and only by the request that owns the route's hash: its own, or one newer than
// the hash's (a later revision, or the same revision asked later). An older request never
// overwrites a newer one's status (the admin asked again meanwhile), and a request's
// agent may report before the admin API's "queued" lands: that one then writes nothing.
func TestQualificationStatusIsOnlyItsRequests(t *testing.T) {
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()
	key := runconfig.QualifyStatusKey("work")
	at := time.Now().UTC()
	old := queue.QualifyTask{RequestID: "q-old", Route: "work", RouteRevision: 3, Device: "xtx", RequestedAt: at}
	newer := queue.QualifyTask{RequestID: "q-new", Route: "work", RouteRevision: 3, Device: "xtx", RequestedAt: at.Add(time.Second)}

	ok, err := runconfig.WriteQualifyStatus(ctx, rdb, old, "state", runconfig.QualifyRunning, "step", "fill")
	require.NoError(t, err)
	require.True(t, ok, "an empty hash is the first request's")
	require.Equal(t, runconfig.QualifyRunning, rdb.HGet(ctx, key, "state").Val())
	require.Equal(t, "xtx", rdb.HGet(ctx, key, "device").Val())
	require.Positive(t, rdb.PTTL(ctx, key).Val().Milliseconds(), "the status expires")

	ok, err = runconfig.WriteQualifyStatus(ctx, rdb, newer, "state", runconfig.QualifyWaiting)
	require.NoError(t, err)
	require.True(t, ok, "a newer request takes the hash")
	require.Empty(t, rdb.HGet(ctx, key, "step").Val(), "and nothing of the older one stays")

	ok, err = runconfig.WriteQualifyStatus(ctx, rdb, old, "state", runconfig.QualifyError, "reason", "cut off")
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, "q-new", rdb.HGet(ctx, key, "requestId").Val())
	require.Equal(t, runconfig.QualifyWaiting, rdb.HGet(ctx, key, "state").Val(), "the newer request's status stays")
	require.Empty(t, rdb.HGet(ctx, key, "reason").Val())

	// A later revision's request is newer whatever its clock says.
	next := queue.QualifyTask{RequestID: "q-next", Route: "work", RouteRevision: 4, Device: "xtx", RequestedAt: at}
	ok, err = runconfig.WriteQualifyStatus(ctx, rdb, next, "state", runconfig.QualifyPassed)
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = runconfig.WriteQualifyStatus(ctx, rdb, newer, "state", runconfig.QualifyRunning)
	require.NoError(t, err)
	require.False(t, ok, "revision 3's request no longer writes")
	require.Equal(t, runconfig.QualifyPassed, rdb.HGet(ctx, key, "state").Val())
}
