package queue_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/queue/redistest"
)

func TestRedisConnValidateNamesTheBadSetting(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		c    queue.RedisConn
		want string
	}{
		{queue.RedisConn{}, "PA_REDIS_ADDR is required"},
		{queue.RedisConn{Addr: "redis://u:secret@h:6390"}, "no URL, no credentials"},
		{queue.RedisConn{Addr: "h:1", Password: "a", RedisSecurity: queue.RedisSecurity{PasswordRef: "env:X"}}, "not both"},
		{queue.RedisConn{RedisSecurity: queue.RedisSecurity{SentinelMaster: "m"}}, "go together"},
		{queue.RedisConn{RedisSecurity: queue.RedisSecurity{SentinelAddrs: []string{"h:1"}}}, "go together"},
		{queue.RedisConn{RedisSecurity: queue.RedisSecurity{SentinelMaster: "m", SentinelAddrs: []string{"nope"}}}, "not host:port"},
		{queue.RedisConn{Addr: "h:1", RedisSecurity: queue.RedisSecurity{CA: "/ca.crt"}}, "PA_REDIS_TLS=true"},
	} {
		err := tc.c.Validate()
		require.Error(t, err)
		require.Contains(t, err.Error(), tc.want)
		require.NotContains(t, err.Error(), "secret", "a password never appears in an error")
	}
	require.NoError(t, queue.RedisConn{RedisSecurity: queue.RedisSecurity{SentinelMaster: "m", SentinelAddrs: []string{"a:1", " b:2"}}}.Validate())
}

// TestRedisConnReachesATLSServerWithAUser: the CA as a file or as PEM text, the password
// as a value or by file reference; a wrong CA or password is refused.
func TestRedisConnReachesATLSServerWithAUser(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := redistest.Start(t, redistest.Options{TLS: true, ACL: []string{"user default off", "user app on >app-password-0123456789 ~* +@all"}})
	pwFile := filepath.Join(t.TempDir(), "pw")
	require.NoError(t, os.WriteFile(pwFile, []byte("app-password-0123456789\n"), 0o600))
	tune := queue.RedisTuning{DialTimeout: 2 * time.Second, ReadTimeout: 2 * time.Second, WriteTimeout: 2 * time.Second, PoolSize: 2}
	for _, c := range []queue.RedisConn{
		{Addr: s.Addr, Username: "app", Password: "app-password-0123456789", RedisSecurity: queue.RedisSecurity{TLS: true, CA: s.CAFile}},
		{Addr: s.Addr, Username: "app", RedisSecurity: queue.RedisSecurity{TLS: true, CA: string(s.CA), PasswordRef: "file:" + pwFile}},
	} {
		rdb, err := c.NewClient(tune)
		require.NoError(t, err)
		require.NoError(t, rdb.Ping(ctx).Err())
		require.NoError(t, rdb.Close())
	}
	// The system roots do not trust the test CA.
	rdb, err := queue.RedisConn{Addr: s.Addr, Username: "app", Password: "app-password-0123456789", RedisSecurity: queue.RedisSecurity{TLS: true}}.NewClient(tune)
	require.NoError(t, err)
	require.ErrorContains(t, rdb.Ping(ctx).Err(), "certificate")
	require.NoError(t, rdb.Close())
	// A wrong password is refused and not echoed.
	rdb, err = queue.RedisConn{Addr: s.Addr, Username: "app", Password: "wrong-password-xyz", RedisSecurity: queue.RedisSecurity{TLS: true, CA: s.CAFile}}.NewClient(tune)
	require.NoError(t, err)
	err = rdb.Ping(ctx).Err()
	require.ErrorContains(t, err, "WRONGPASS")
	require.False(t, strings.Contains(err.Error(), "wrong-password-xyz"))
	require.NoError(t, rdb.Close())
	// A missing reference or CA file is an error at construction.
	_, err = queue.RedisConn{Addr: s.Addr, RedisSecurity: queue.RedisSecurity{PasswordRef: "file:/nonexistent/pw"}}.NewClient(tune)
	require.ErrorContains(t, err, "PA_REDIS_PASSWORD_REF")
	_, err = queue.RedisConn{Addr: s.Addr, RedisSecurity: queue.RedisSecurity{TLS: true, CA: "-----BEGIN CERTIFICATE-----\nnot a cert\n-----END CERTIFICATE-----\n"}}.NewClient(tune)
	require.ErrorContains(t, err, "no certificate")
}
