package main

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRuntimeKeyCommands(t *testing.T) {
	f := newFakeAPI(t)
	r := pa(t, f, "admin", "runtime", "create", "-roles", "chat, research", "homeapp")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "plan (commit with -yes)")
	require.Empty(t, f.requests(), "no -yes: nothing sent")

	r = pa(t, f, "admin", "runtime", "create", "-roles", "chat, research", "-rate", "10", "-yes", "homeapp")
	require.Equal(t, 0, r.code, r.stderr)
	r = pa(t, f, "admin", "runtime", "revoke", "-yes", "rk0123456789abcdef")
	require.Equal(t, 0, r.code, r.stderr)
	r = pa(t, f, "admin", "runtime", "link", "-yes", "homeapp", "user 7", "u123")
	require.Equal(t, 0, r.code, r.stderr)
	r = pa(t, f, "admin", "runtime", "create", "-yes", "homeapp")
	require.Equal(t, 2, r.code, "-roles is required")

	got := f.requests()
	require.Len(t, got, 3)
	require.Equal(t, "POST", got[0].Method)
	require.Equal(t, "/api/runtime-keys", got[0].URI)
	require.Equal(t, "homeapp", got[0].Body["appId"])
	require.Equal(t, []any{"chat", "research"}, got[0].Body["roles"])
	require.EqualValues(t, 10, got[0].Body["rateLimit"])
	require.Equal(t, "DELETE", got[1].Method)
	require.Equal(t, "/api/runtime-keys/rk0123456789abcdef", got[1].URI)
	require.Equal(t, "PUT", got[2].Method)
	require.Equal(t, map[string]any{"appId": "homeapp", "user": "user 7", "userId": "u123"}, got[2].Body)
}
