package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
)

// TestReleaseCommands: pa admin select -propose makes a candidate; candidates lists it
// (its checks collected), evidence shows what was verified, promote makes it live and
// revert (a configuration rollback) brings the first release back; nothing changes without -yes.
func TestReleaseCommands(t *testing.T) {
	env := functionstest.New(t)
	adminID, _ := env.SignUp(t, "rel-admin@example.com", "password-rel-admin")
	env.Label(t, adminID, "admin")
	t.Setenv("PA_URL", env.URL)
	t.Setenv("APPWRITE_ENDPOINT", env.TS.URL)
	t.Setenv("APPWRITE_PROJECT_ID", env.TS.Project)
	t.Setenv("PA_CONFIG_DIR", t.TempDir())
	t.Setenv("PA_PASSWORD", "password-rel-admin")
	pa := func(args ...string) (int, string, string) {
		var out, errw bytes.Buffer
		code := run(context.Background(), args, strings.NewReader(""), &out, &errw)
		return code, out.String(), errw.String()
	}
	code, out, errw := pa("login", "rel-admin@example.com")
	require.Equal(t, 0, code, out+errw)

	code, out, errw = pa("admin", "select", "-propose", "-yes", "chat=direct@1:work@1:", "research=direct@1:work@1:web", "coding=direct@1:work@1:terminal,file")
	require.Equal(t, 0, code, out+errw)
	code, out, errw = pa("admin", "candidates")
	require.Equal(t, 0, code, errw)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Regexp(t, `^RELEASE\s+STATE\s+WHAT\s+BY\s+MADE\s+APPROVED BY$`, lines[0])
	require.Regexp(t, `^2\s+ready to promote\s+changes chat\s+`, lines[1])
	require.Regexp(t, `^1\s+live\s+first configuration\s+`, lines[2])

	code, out, errw = pa("admin", "evidence", "2")
	require.Equal(t, 0, code, errw)
	require.Contains(t, out, "Release 2: ready to promote (changes chat by "+adminID)
	require.Contains(t, out, "passed.")
	require.Contains(t, out, "harness direct revision 1 (direct): verified yes")
	require.Contains(t, out, "route work revision 1: demo-work on xtx, 131072 tokens")

	code, _, errw = pa("admin", "promote", "2")
	require.Equal(t, 0, code)
	require.Contains(t, errw, "commit with -yes")
	code, out, _ = pa("admin", "candidates")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^1\s+live`, out, "nothing moved without -yes")
	code, out, errw = pa("admin", "promote", "2", "-yes")
	require.Equal(t, 0, code, errw)
	require.Contains(t, out, "Release 2: live")

	code, out, errw = pa("admin", "revert", "1", "-yes")
	require.Equal(t, 0, code, errw)
	require.Contains(t, out, "Release 1: live")
	code, out, _ = pa("admin", "candidates", "-json")
	require.Equal(t, 0, code)
	var l struct {
		Releases []struct {
			Seq  int64
			Live bool
		}
	}
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	require.Len(t, l.Releases, 2)
	require.True(t, l.Releases[1].Live)
	require.False(t, l.Releases[0].Live)

	code, _, errw = pa("admin", "revert", "x", "-yes")
	require.Equal(t, exitUsage, code)
	require.Contains(t, errw, "release number")

	// One runtime environment: staging runs release 2 while production keeps release 1,
	// then follows production again.
	code, _, errw = pa("admin", "promote", "-env", "staging", "2")
	require.Equal(t, 0, code)
	require.Contains(t, errw, "promote release 2 in staging")
	code, out, errw = pa("admin", "promote", "-env", "staging", "-yes", "2")
	require.Equal(t, 0, code, errw)
	require.Contains(t, out, "Release 2: was live (live in staging)")
	code, out, _ = pa("admin", "candidates")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^1\s+live\s`, out)
	require.Regexp(t, `(?m)^2\s+was live \(live in staging\)`, out)
	code, _, errw = pa("admin", "follow", "staging")
	require.Equal(t, 0, code)
	require.Contains(t, errw, "commit with -yes")
	code, out, _ = pa("admin", "candidates")
	require.Regexp(t, `(?m)^2\s+was live \(live in staging\)`, out, "nothing moved without -yes")
	code, out, errw = pa("admin", "follow", "staging", "-yes")
	require.Equal(t, 0, code, errw)
	require.Contains(t, out, "Environment staging runs production's live release.")
	code, out, _ = pa("admin", "candidates")
	require.Equal(t, 0, code)
	require.NotContains(t, out, "live in staging")
	code, _, errw = pa("admin", "follow", "Staging!", "-yes")
	require.NotEqual(t, 0, code)
	require.Contains(t, errw, "environment must be production or a name")
}
