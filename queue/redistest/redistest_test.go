package redistest_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
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

func TestTLSAndACLUsers(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{TLS: true, ACL: []string{
		"user default off",
		"user app on >app-password-0123456789 resetkeys -@all +@read +@write -@dangerous +ping +hello ~app:*",
	}})
	require.NotEmpty(t, s.CA)

	app := s.ClientAs("app", "app-password-0123456789")
	defer app.Close()
	require.NoError(t, app.Set(ctx, "app:k", "v", 0).Err())
	require.ErrorContains(t, app.Set(ctx, "other:k", "v", 0).Err(), "NOPERM")
	require.ErrorContains(t, app.FlushAll(ctx).Err(), "NOPERM")

	// No plaintext: a client without TLS gets no answer.
	plain := redis.NewClient(&redis.Options{Addr: s.Addr, Username: "app", Password: "app-password-0123456789", MaxRetries: -1, DialTimeout: time.Second, ReadTimeout: time.Second})
	defer plain.Close()
	require.Error(t, plain.Ping(ctx).Err())
	// The default user is off.
	anon := s.ClientAs("", "")
	defer anon.Close()
	require.Error(t, anon.Get(ctx, "app:k").Err())

	// Restart keeps TLS and the users.
	s.Restart()
	require.Eventually(t, func() bool { return app.Get(ctx, "app:k").Err() == redis.Nil || app.Ping(ctx).Err() == nil }, 5*time.Second, 10*time.Millisecond)
}

func TestSentinelPromotesTheReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	acl := []string{"user default off"}
	primary := redistest.Start(t, redistest.Options{TLS: true, ACL: acl})
	replica := redistest.Start(t, redistest.Options{TLS: true, ACL: acl, ReplicaOf: primary})
	sen := redistest.StartSentinel(t, primary, "pa-queue", redistest.SentinelOptions{Password: "sentinel-password-0123"})
	require.Eventually(t, func() bool { n, err := sen.Replicas(ctx); return err == nil && n == 1 }, 30*time.Second, 50*time.Millisecond)

	c := redis.NewFailoverClient(&redis.FailoverOptions{MasterName: "pa-queue", SentinelAddrs: []string{sen.Addr},
		SentinelPassword: "sentinel-password-0123", Username: primary.Username, Password: primary.Password, TLSConfig: primary.TLSConfig()})
	defer c.Close()
	require.NoError(t, c.Set(ctx, "k", "before", 0).Err())
	rc := replica.Client()
	defer rc.Close()
	require.Eventually(t, func() bool { return rc.Get(ctx, "k").Val() == "before" }, 30*time.Second, 10*time.Millisecond)

	primary.Crash()
	require.Eventually(t, func() bool { a, err := sen.Primary(ctx); return err == nil && a == replica.Addr }, 30*time.Second, 50*time.Millisecond)
	require.Eventually(t, func() bool { return c.Set(ctx, "k", "after", 0).Err() == nil }, 10*time.Second, 50*time.Millisecond)
	require.Equal(t, "after", rc.Get(ctx, "k").Val(), "the promoted replica took the write")
}
