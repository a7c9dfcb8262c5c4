package homes_test

import (
	"context"
	"errors"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/homes"
	"privateassistant/agent/homes/homestest"
	"privateassistant/agent/memberkey"
	"privateassistant/hermes"
)

// A member's Hermes starts on first use in its own home, made from the operator's
// template (the API server on loopback, terminal.cwd the member's folder, the template's
// gateway key kept, the shared profile's inbound key never), is reused while it runs, is
// stopped when idle, and Forget removes the home.
func TestMemberHomeLifecycleOnRealHermes(t *testing.T) {
	e := homestest.Start(t, homestest.Options{IdleAfter: 2 * time.Second,
		Env: "GATEWAY_API_KEY=" + homestest.GatewayKey + "\nAPI_SERVER_KEY=operator-shared-api-key-never-in-a-member-home\n"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h, release, err := e.Acquire(ctx, "alice")
	require.NoError(t, err)
	c := &hermes.Client{BaseURL: h.URL, APIKey: h.Key}
	_, err = c.Health(ctx)
	require.NoError(t, err)
	require.Equal(t, filepath.Join(e.Root, "alice", "work"), h.WorkDir)
	require.Equal(t, "/member/work", h.Cwd)
	cfg, err := os.ReadFile(filepath.Join(e.Root, "alice", "hermes", "config.yaml"))
	require.NoError(t, err)
	require.Contains(t, string(cfg), "cwd: /member/work")
	require.Contains(t, string(cfg), "host: 127.0.0.1")
	require.NotContains(t, string(cfg), "operator-shared-api-key")
	env, err := os.ReadFile(filepath.Join(e.Root, "alice", "hermes", ".env"))
	require.NoError(t, err)
	require.Contains(t, string(env), "GATEWAY_API_KEY=\""+memberkey.Derive(homestest.GatewayKey, "alice")+"\"", "the member's own gateway key")
	require.NotContains(t, string(env), homestest.GatewayKey+"\"", "never the agent's")
	require.NotContains(t, string(env), "operator-shared-api-key")

	again, release2, err := e.Acquire(ctx, "alice")
	require.NoError(t, err)
	require.Equal(t, h.URL, again.URL, "one Hermes per member while it runs")
	release2()
	_, _, err = e.Acquire(ctx, "../bob")
	require.Error(t, err, "an id that is not an Appwrite id names no folder")

	release()
	require.Eventually(t, func() bool { return !e.Running("alice") }, 30*time.Second, 100*time.Millisecond, "idle-stopped")
	_, err = c.Health(ctx)
	require.Error(t, err, "nothing serves the stopped member's port")
	require.FileExists(t, filepath.Join(e.Root, "alice", "hermes", "config.yaml"), "an idle stop keeps the home")

	require.NoError(t, e.Forget(ctx, "alice"))
	require.NoDirExists(t, filepath.Join(e.Root, "alice"))
}

// A started Hermes that fails the agent's check (e.g. no durable run idempotency) is
// stopped again: the Acquire fails with the reason and nothing serves the member.
func TestAFailedCheckStopsTheMembersHermes(t *testing.T) {
	var url string
	e := homestest.Start(t, homestest.Options{Check: func(_ context.Context, h homes.Home) error {
		url = h.URL
		return errors.New("runs_idempotency is not durable")
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, _, err := e.Acquire(ctx, "carol")
	require.ErrorContains(t, err, "runs_idempotency is not durable")
	require.NotEmpty(t, url, "the check saw a started Hermes")
	require.False(t, e.Running("carol"))
	_, err = (&hermes.Client{BaseURL: url}).Health(ctx)
	require.Error(t, err, "nothing serves its port")
}

// At MaxRunning, a new member's start stops the least recently used idle member's Hermes
// first (its home stays); when every running one is in use, the start fails with ErrFull.
func TestTheLeastRecentlyUsedIdleHermesMakesRoom(t *testing.T) {
	e := homestest.Start(t, homestest.Options{MaxRunning: 1})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, relA, err := e.Acquire(ctx, "alice")
	require.NoError(t, err)
	relA()
	_, relB, err := e.Acquire(ctx, "bob")
	require.NoError(t, err)
	require.False(t, e.Running("alice"), "alice's idle Hermes made room")
	require.True(t, e.Running("bob"))
	require.DirExists(t, filepath.Join(e.Root, "alice", "hermes"), "her home stays")
	_, _, err = e.Acquire(ctx, "alice")
	require.ErrorIs(t, err, homes.ErrFull, "bob's is in use")
	relB()
	_, relA, err = e.Acquire(ctx, "alice")
	require.NoError(t, err)
	defer relA()
	require.False(t, e.Running("bob"))
}

// Probe starts a Hermes from the template in a home no member has (harness validation
// probes it), and afterwards nothing of it is left: no process, no folder, no member.
func TestProbeStartsAHermesOfNoMember(t *testing.T) {
	e := homestest.Start(t, homestest.Options{Env: "GATEWAY_API_KEY=" + homestest.GatewayKey + "\n"})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	var seen homes.Home
	require.NoError(t, e.Probe(ctx, func(h homes.Home) error {
		seen = h
		_, err := (&hermes.Client{BaseURL: h.URL, APIKey: h.Key}).Capabilities(ctx)
		require.NoError(t, err)
		cfg, err := os.ReadFile(filepath.Join(filepath.Dir(h.WorkDir), "hermes", "config.yaml"))
		require.NoError(t, err)
		require.Contains(t, string(cfg), "cwd: /member/work", "made from the template as a member's")
		return nil
	}))
	require.NotEmpty(t, seen.URL)
	require.NoDirExists(t, filepath.Dir(seen.WorkDir), "its home is deleted")
	_, err := (&hermes.Client{BaseURL: seen.URL}).Health(ctx)
	require.Error(t, err, "nothing serves its port")
	ents, err := os.ReadDir(e.Root)
	require.NoError(t, err)
	for _, d := range ents {
		require.True(t, d.Name()[0] == '.', "no member home was made: %s", d.Name())
	}
	e.Stop()
	require.ErrorIs(t, e.Probe(ctx, func(homes.Home) error { return nil }), homes.ErrStopped)
}

// The port a Hermes is given is picked free, then bound by Hermes: another process can
// take it in between (CI saw "Port … already in use", Hermes exit 78, and the member's
// run failed). A start that loses its port that way starts again on another.
func TestAHermesThatLostItsPortStartsOnAnother(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer taken.Close()
	port := taken.Addr().(*net.TCPAddr).Port
	defer homes.PickPorts(port)()
	e := homestest.Start(t, homestest.Options{})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	h, release, err := e.Acquire(ctx, "alice")
	require.NoError(t, err)
	defer release()
	require.NotEqual(t, "http://127.0.0.1:"+strconv.Itoa(port), h.URL)
	_, err = (&hermes.Client{BaseURL: h.URL, APIKey: h.Key}).Health(ctx)
	require.NoError(t, err)
	out, _ := os.ReadFile(filepath.Join(e.Root, "alice", "gateway.out"))
	require.Contains(t, string(out), "already in use", "the first start did meet the taken port")
}
