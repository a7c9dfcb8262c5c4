package gpu

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/queue/redistest"
)

// TestBuildWiresConfirmAndHolderStatus: a device built from the config reads an admin's
// confirmation from the record the admin API writes (ConfirmKey), and a grant holder's
// status from the run's Redis state (for the waiting reasons).
func TestBuildWiresConfirmAndHolderStatus(t *testing.T) {
	r := redistest.Start(t)
	rdb := r.Client()
	defer rdb.Close()
	ctx := context.Background()
	p := filepath.Join(t.TempDir(), "gpu.json")
	require.NoError(t, os.WriteFile(p, []byte(`{"devices":[{"name":"xtx","backend":{"kind":"upstream","url":"http://x"}}]}`), 0o600))
	c, err := LoadConfig(p)
	require.NoError(t, err)
	pool, _, _, err := c.Build(rdb, "me", time.Second)
	require.NoError(t, err)
	d := pool["xtx"].dev

	at, err := d.ConfirmRequested(ctx)
	require.NoError(t, err)
	require.True(t, at.IsZero(), "no confirmation yet")
	now := time.Now().UTC().Truncate(time.Microsecond)
	require.Equal(t, queue.GPUKey("xtx")+":confirm", ConfirmKey("xtx"), "the key the admin API writes")
	require.NoError(t, rdb.Set(ctx, ConfirmKey("xtx"), now.Format(time.RFC3339Nano), time.Minute).Err())
	at, err = d.ConfirmRequested(ctx)
	require.NoError(t, err)
	require.True(t, at.Equal(now))

	st, err := d.HolderStatus(ctx, "run-1")
	require.NoError(t, err)
	require.Empty(t, st)
	require.NoError(t, rdb.HSet(ctx, queue.StateKey("run-1"), "status", "waiting_for_approval").Err())
	st, err = d.HolderStatus(ctx, "run-1")
	require.NoError(t, err)
	require.Equal(t, "waiting_for_approval", st)
}
