package main

import (
	"context"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestCloseStopsTheAgentFirstAndRedisLast: Ctrl-C of `make dev` used to reach Redis
// directly (the terminal signals the whole foreground process group, and redis-server
// was in it), so Redis died first and the agent's runs were cut without their tasks
// being handed back. Redis now has a process group of its own, and Close stops the agent
// (intake, grace, abort) while everything it talks to still serves, Redis last.
func TestCloseStopsTheAgentFirstAndRedisLast(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	s, err := Start(context.Background(), Config{Root: root, DataDir: t.TempDir(), Grace: time.Second})
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	pg, err := syscall.Getpgid(s.redis.Process.Pid)
	require.NoError(t, err)
	require.NotEqual(t, syscall.Getpgrp(), pg, "redis-server is outside the terminal's process group")
	require.Equal(t, s.redis.Process.Pid, pg)

	start := time.Now()
	s.Close()
	closed = true
	require.NotEmpty(t, s.Stopped)
	require.Equal(t, "agent", s.Stopped[0], "the agent stops first (intake, grace, abort)")
	require.Equal(t, "redis", s.Stopped[len(s.Stopped)-1], "Redis stops last")
	require.Less(t, indexOf(s.Stopped, "agent"), indexOf(s.Stopped, "origin"), "Appwrite and Hermes (behind the origin) outlive the agent")
	require.Less(t, time.Since(start), 15*time.Second, "an idle stack does not wait out the grace period")
	require.NotNil(t, s.redis.ProcessState, "Close waited for Redis to exit")
}

func indexOf(xs []string, x string) int {
	for i, v := range xs {
		if v == x {
			return i
		}
	}
	return -1
}
