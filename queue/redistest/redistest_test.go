package redistest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/queue/redistest"
)

func TestStartIsolatedAndStops(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := redistest.Start(t, redistest.Options{Password: "s3cret-password-for-tests"})
	b := redistest.Start(t)
	require.NotEqual(t, a.Addr, b.Addr)

	ca, cb := a.Client(), b.Client()
	defer ca.Close()
	defer cb.Close()
	require.NoError(t, ca.Set(ctx, "k", "a", 0).Err())
	require.Equal(t, "redis: nil", cb.Get(ctx, "k").Err().Error(), "servers do not share data")

	// The password is enforced.
	noPw := b.Client()
	noPw.Options().Addr = a.Addr
	defer noPw.Close()
	require.Error(t, noPw.Ping(ctx).Err())

	policy, err := ca.ConfigGet(ctx, "maxmemory-policy").Result()
	require.NoError(t, err)
	require.Equal(t, "noeviction", policy["maxmemory-policy"])

	a.Stop()
	a.Stop() // idempotent
	require.Error(t, ca.Ping(ctx).Err())
}

func TestRestartWithAOFKeepsData(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{AppendOnly: true})
	c := s.Client()
	defer c.Close()
	require.NoError(t, c.Set(ctx, "durable", "yes", 0).Err())
	s.Restart(redistest.Options{AppendOnly: true})
	require.Eventually(t, func() bool { return c.Get(ctx, "durable").Val() == "yes" }, 5e9, 1e7)
}
