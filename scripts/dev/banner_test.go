package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestBannerPrintsLoginsThatWork: what make dev prints names the web chat, a member login
// and an admin login that sign in as what the banner says they are, and the start-up time.
func TestBannerPrintsLoginsThatWork(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	s, err := Start(t.Context(), Config{Root: root, DataDir: t.TempDir()})
	require.NoError(t, err)
	defer s.Close()

	out := banner(s, 2345*time.Millisecond)
	require.Contains(t, out, "Web chat:   "+s.URL)
	require.Contains(t, out, "Started in 2.3 s")
	login := func(label string) (string, string) {
		m := regexp.MustCompile(`(?m)^  ` + label + `:\s+(\S+) / (\S+)`).FindStringSubmatch(out)
		require.Len(t, m, 3, "the banner prints the %s login:\n%s", label, out)
		return m[1], m[2]
	}
	api := devAPI{t: t, url: s.URL}
	for _, c := range []struct {
		label         string
		member, admin bool
	}{{"Demo login", true, false}, {"Admin", true, true}} {
		email, pass := login(c.label)
		code, me := api.call("GET", "/api/me", api.jwt(email, pass), nil)
		require.Equal(t, 200, code, me)
		require.Equal(t, email, me["email"])
		require.Equal(t, c.member, me["member"], "%s is a member", c.label)
		require.Equal(t, c.admin, me["admin"], "%s is an admin", c.label)
	}
}

// TestStartUpTimeCountsFromTheCommand: make dev passes the moment it was typed (before its
// installs and the build) and the banner's time counts from there.
func TestStartUpTimeCountsFromTheCommand(t *testing.T) {
	t0 := time.Now().Add(-42 * time.Second)
	got := startedAt(strconv.FormatInt(t0.UnixNano(), 10))
	require.True(t, got.Equal(t0), "%s != %s", got, t0)
	require.WithinDuration(t, time.Now(), startedAt(""), time.Second, "without make dev: now")
	require.WithinDuration(t, time.Now(), startedAt("garbage"), time.Second)
	require.WithinDuration(t, time.Now(), startedAt(strconv.FormatInt(time.Now().Add(time.Hour).UnixNano(), 10)), time.Second, "a future stamp is ignored")
}
