// Package systemd holds the units an operator installs; this test checks the shutdown
// order and bounds they promise.
package systemd

import (
	"bufio"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/daemon"
)

// unit reads a unit file as key → values (repeated keys and space-separated lists merge).
func unit(t *testing.T, name string) map[string][]string {
	t.Helper()
	f, err := os.Open(name)
	require.NoError(t, err)
	defer f.Close()
	out := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, "[") {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		require.True(t, ok, line)
		out[k] = append(out[k], strings.Fields(v)...)
	}
	require.NoError(t, sc.Err())
	return out
}

// TestAgentStopsBeforeRedisWithinItsGrace: the agent unit is ordered after Redis (so
// systemd stops it first), is stopped with SIGTERM (its two-stage shutdown) and gets more
// time than PA_AGENT_SHUTDOWN_GRACE's default before SIGKILL; Redis gets SIGTERM (AOF
// flushed) and time to write it.
func TestAgentStopsBeforeRedisWithinItsGrace(t *testing.T) {
	agent := unit(t, "privateassistant-agent.service")
	redis := unit(t, "privateassistant-redis.service")
	require.Contains(t, agent["After"], "privateassistant-redis.service")
	require.Contains(t, agent["Wants"], "privateassistant-redis.service")
	require.NotContains(t, redis["After"], "privateassistant-agent.service", "no cycle")
	require.Equal(t, []string{"SIGTERM"}, agent["KillSignal"])
	require.Equal(t, []string{"mixed"}, agent["KillMode"])
	require.Equal(t, []string{"SIGTERM"}, redis["KillSignal"])

	f, ok := reflect.TypeOf(daemon.Settings{}).FieldByName("Grace")
	require.True(t, ok)
	grace, err := time.ParseDuration(f.Tag.Get("default"))
	require.NoError(t, err)
	stop, err := time.ParseDuration(agent["TimeoutStopSec"][0] + "s")
	require.NoError(t, err)
	require.GreaterOrEqual(t, stop, grace+20*time.Second, "room for the grace period and the abort after it")
}
