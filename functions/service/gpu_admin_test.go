package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue"
)

// TestAdminConfirmsUnknownGPU (issue 14, item 3): /api/system says why a device is
// unknown; an admin (only) confirms it free through the admin function, which records
// the confirmation for the device's agent (pa:gpu:{device}:confirm, with a TTL).
func TestAdminConfirmsUnknownGPU(t *testing.T) {
	env, admin, user := adminEnv(t)
	ctx := context.Background()
	rdb := env.Redis.Client()
	defer rdb.Close()
	why := "the memory did not come back after unloading demo-work; nothing loads until it is confirmed free; an admin can confirm it: pa admin gpu confirm xtx"
	require.NoError(t, rdb.SAdd(ctx, queue.GPUDevicesKey(), "xtx").Err())
	require.NoError(t, rdb.HSet(ctx, queue.GPUKey("xtx"), "host", "h2", "state", "unknown", "reason", why,
		"heartbeatAt", time.Now().UTC().Format(time.RFC3339Nano)).Err())

	res := env.Do(t, "GET", "/api/system", admin, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	var sys struct {
		Devices []struct{ Device, State, Reason string }
	}
	res.JSON(t, &sys)
	require.Len(t, sys.Devices, 1)
	require.Equal(t, "unknown", sys.Devices[0].State)
	require.Equal(t, why, sys.Devices[0].Reason)

	res = env.Do(t, "POST", "/api/gpus/xtx/confirm", user, map[string]any{})
	require.Equal(t, 403, res.Status, string(res.Body))
	require.Zero(t, rdb.Exists(ctx, queue.GPUKey("xtx")+":confirm").Val(), "a non-admin records nothing")
	res = env.Do(t, "POST", "/api/gpus/nope/confirm", admin, map[string]any{})
	require.Equal(t, 404, res.Status, string(res.Body))

	before := time.Now().UTC()
	res = env.Do(t, "POST", "/api/gpus/xtx/confirm", admin, map[string]any{})
	require.Equal(t, 202, res.Status, string(res.Body))
	var out struct{ Device, ConfirmedAt, State string }
	res.JSON(t, &out)
	require.Equal(t, "xtx", out.Device)
	require.Equal(t, "unknown", out.State)
	v, err := rdb.Get(ctx, queue.GPUKey("xtx")+":confirm").Result()
	require.NoError(t, err)
	at, err := time.Parse(time.RFC3339Nano, v)
	require.NoError(t, err)
	require.False(t, at.Before(before.Add(-time.Second)))
	ttl := rdb.TTL(ctx, queue.GPUKey("xtx")+":confirm").Val()
	require.Greater(t, ttl, time.Minute)
	require.LessOrEqual(t, ttl, 10*time.Minute)
}
