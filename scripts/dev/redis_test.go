package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
)

// TestALeftoverRedisIsStoppedNotReused: a make dev killed hard (its Close never ran)
// leaves its redis-server running on the data directory's port. The next make dev used
// to connect to it and carry on with a Redis it did not start and would never stop; it
// now stops that one (its AOF written on SIGTERM) and starts its own, with the data kept.
// Anything else on the port is an error that says so.
func TestALeftoverRedisIsStoppedNotReused(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	k, err := loadKeys(dir)
	require.NoError(t, err)
	_, p, _ := net.SplitHostPort(freeAddr())
	port, _ := strconv.Atoi(p)
	cfg := Config{DataDir: dir, RedisPort: port}
	cfg.Log = discardLog()

	crashed := &Stack{cfg: cfg}
	addr, pass, err := crashed.startRedis(cfg, k)
	require.NoError(t, err)
	old := crashed.redis.Process.Pid
	rdb := redis.NewClient(&redis.Options{Addr: addr, Password: pass})
	require.NoError(t, rdb.Set(context.Background(), "kept", "yes", 0).Err())
	rdb.Close()
	// crashed.Close() never runs: the process is what a killed make dev leaves behind.

	again := &Stack{cfg: cfg}
	addr2, pass2, err := again.startRedis(cfg, k)
	require.NoError(t, err)
	defer again.Close()
	require.Equal(t, addr, addr2)
	require.NotEqual(t, old, again.redis.Process.Pid, "a new redis-server, not the leftover")
	select {
	case <-crashed.redisExited:
	case <-time.After(5 * time.Second):
		t.Fatal("the leftover was not stopped")
	}
	pid, err := redisPID(addr2, pass2)
	require.NoError(t, err)
	require.Equal(t, again.redis.Process.Pid, pid)
	rdb = redis.NewClient(&redis.Options{Addr: addr2, Password: pass2})
	defer rdb.Close()
	v, err := rdb.Get(context.Background(), "kept").Result()
	require.NoError(t, err)
	require.Equal(t, "yes", v, "the data came through the restart (AOF)")

	// Something else on a data directory's port: refused, saying so.
	other := t.TempDir()
	k2, err := loadKeys(other)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	_, p, _ = net.SplitHostPort(ln.Addr().String())
	port, _ = strconv.Atoi(p)
	cfg2 := Config{DataDir: other, RedisPort: port, Log: discardLog()}
	s3 := &Stack{cfg: cfg2}
	_, _, err = s3.startRedis(cfg2, k2)
	s3.Close()
	require.ErrorContains(t, err, "in use by a process this data directory did not start")
	_, statErr := os.Stat(filepath.Join(other, "redis", "redis.pid"))
	require.True(t, os.IsNotExist(statErr), "no redis-server was started")
}

func discardLog() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }
