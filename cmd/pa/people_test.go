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

// TestPeopleCommands: pa admin members, invitations, invite, revoke and role against the
// real admin API: tables and sentences by default, the API's answer with -json; nothing
// changes without -yes.
func TestPeopleCommands(t *testing.T) {
	env := functionstest.New(t)
	adminID, _ := env.SignUp(t, "cli-admin@example.com", "password-cli-admin")
	env.Label(t, adminID, "admin")
	plainID, _ := env.SignUp(t, "cli-plain@example.com", "password-cli-plain")
	t.Setenv("PA_URL", env.URL)
	t.Setenv("APPWRITE_ENDPOINT", env.TS.URL)
	t.Setenv("APPWRITE_PROJECT_ID", env.TS.Project)
	t.Setenv("PA_CONFIG_DIR", t.TempDir())
	t.Setenv("PA_PASSWORD", "password-cli-admin")
	pa := func(args ...string) (int, string, string) {
		var out, errw bytes.Buffer
		code := run(context.Background(), args, strings.NewReader(""), &out, &errw)
		return code, out.String(), errw.String()
	}
	code, out, errw := pa("login", "cli-admin@example.com")
	require.Equal(t, 0, code, out+errw)

	code, out, _ = pa("admin", "invitations")
	require.Equal(t, 0, code)
	require.Equal(t, "No invitation is pending.\n", out)
	code, out, errw = pa("admin", "invite", "-hours", "5", "-yes")
	require.Equal(t, 0, code, errw)
	require.Contains(t, out, "valid until")
	require.Contains(t, out, "Token (shown only now")
	code, out, _ = pa("admin", "invitations")
	require.Equal(t, 0, code)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 2, out)
	require.Regexp(t, `^INVITED BY\s+INVITED\s+VALID UNTIL\s+ID$`, lines[0])
	require.Contains(t, lines[1], "cli-admin@example.com")
	invID := strings.Fields(lines[1])[len(strings.Fields(lines[1]))-1]

	code, out, _ = pa("admin", "invitations", "-json")
	require.Equal(t, 0, code)
	var l struct{ Invitations []struct{ ID string } }
	require.NoError(t, json.Unmarshal([]byte(out), &l))
	require.Equal(t, invID, l.Invitations[0].ID)

	code, _, errw = pa("admin", "revoke", invID)
	require.Equal(t, 0, code)
	require.Contains(t, errw, "commit with -yes")
	code, out, _ = pa("admin", "revoke", invID, "-yes")
	require.Equal(t, 0, code)
	require.Equal(t, "Revoked: its link no longer works.\n", out)
	code, out, _ = pa("admin", "invitations")
	require.Equal(t, "No invitation is pending.\n", out)
	code, _, errw = pa("admin", "revoke", invID, "-yes")
	require.Equal(t, exitNotFound, code, errw)

	code, out, _ = pa("admin", "members")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^NAME\s+EMAIL\s+ROLE\s+JOINED\s+INVITED BY\s+ID$`, out)
	require.Regexp(t, `(?m)^-\s+cli-plain@example.com\s+member\s+\d{4}-\d\d-\d\d\s+-\s+`+plainID+`$`, out)
	require.Regexp(t, `(?m)cli-admin@example.com\s+admin\s`, out)

	code, out, errw = pa("admin", "role", plainID, "admin", "-yes")
	require.Equal(t, 0, code, errw)
	require.Equal(t, "cli-plain@example.com ("+plainID+") is an admin now.\n", out)
	code, out, _ = pa("admin", "remove", plainID, "-yes")
	require.Equal(t, 0, code)
	require.Equal(t, "cli-plain@example.com ("+plainID+") is no longer a member now.\n", out)
	code, out, _ = pa("admin", "members")
	require.Regexp(t, `(?m)cli-plain@example.com\s+not admitted\s`, out)
	code, _, errw = pa("admin", "role", adminID, "member", "-yes")
	require.Equal(t, exitConflict, code)
	require.Contains(t, errw, "own_admin_role")
	code, _, _ = pa("admin", "role", plainID, "owner", "-yes")
	require.Equal(t, exitUsage, code)
}
