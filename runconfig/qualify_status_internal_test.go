package runconfig

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/queue/redistest"
)

// TestQueuedNeverTakesBackItsAgentsStatus: the admin API writes "queued" right after the
// enqueue; when the request's agent already reported (it took the task first), that
// write changes nothing, and it replaces an older request's status otherwise.
func TestQueuedNeverTakesBackItsAgentsStatus(t *testing.T) {
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := t.Context()
	key := QualifyStatusKey("work")
	at := time.Now().UTC()
	old := queue.QualifyTask{RequestID: "q-old", Route: "work", RouteRevision: 2, Device: "xtx", RequestedAt: at.Add(-time.Hour)}
	p := queue.QualifyTask{RequestID: "q1", Route: "work", RouteRevision: 2, Device: "xtx", RequestedAt: at}

	_, err := WriteQualifyStatus(ctx, rdb, old, "state", QualifyError, "reason", "cut off", "result", "{}")
	require.NoError(t, err)
	ok, err := writeQualifyStatus(ctx, rdb, p, "new", "state", QualifyQueued)
	require.NoError(t, err)
	require.True(t, ok, "a newer request replaces an older one's status")
	require.Equal(t, map[string]string{"requestId": "q1", "routeRevision": "2", "requestedAtMs": rdb.HGet(ctx, key, "requestedAtMs").Val(),
		"state": QualifyQueued, "device": "xtx", "updatedAt": rdb.HGet(ctx, key, "updatedAt").Val()}, rdb.HGetAll(ctx, key).Val(),
		"nothing of the older one stays")

	ok, err = WriteQualifyStatus(ctx, rdb, p, "state", QualifyRunning, "step", "load")
	require.NoError(t, err)
	require.True(t, ok)
	ok, err = writeQualifyStatus(ctx, rdb, p, "new", "state", QualifyQueued)
	require.NoError(t, err)
	require.False(t, ok)
	require.Equal(t, QualifyRunning, rdb.HGet(ctx, key, "state").Val(), "never back to queued")
	require.Equal(t, "load", rdb.HGet(ctx, key, "step").Val())
}
