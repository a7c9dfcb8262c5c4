package service_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
)

// The admin's people lists (issue 33 item 5): every account with its role, join time and
// inviter; pending invitations with who invited; revoking one makes its link invalid;
// role changes, removals and self-protection; every member action in the audit; a
// member gets exactly what a missing invitation gets.
func TestMembersAndInvitationsAsLists(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	adminID, admin := env.SignUp(t, "root@example.com", "password-root")
	env.Label(t, adminID, "admin")
	plainID, member := env.SignUp(t, "plain@example.com", "password-plain")
	strangerID, _ := env.Stranger(t, "stranger@example.com", "password-stranger")

	invite := func() (id, token string) {
		res := env.Do(t, "POST", "/api/invitations", admin, map[string]any{"expiresInHours": 24})
		require.Equal(t, 201, res.Status, string(res.Body))
		var inv struct{ ID, Token string }
		res.JSON(t, &inv)
		return inv.ID, inv.Token
	}
	type invView struct{ ID, InvitedBy, InvitedAt, ExpiresAt string }
	pending := func() []invView {
		res := env.Do(t, "GET", "/api/invitations", admin, nil)
		require.Equal(t, 200, res.Status, string(res.Body))
		var l struct{ Invitations []invView }
		res.JSON(t, &l)
		return l.Invitations
	}
	type person struct{ ID, Name, Email, Role, JoinedAt, InvitedBy string }
	people := func() map[string]person {
		res := env.Do(t, "GET", "/api/members", admin, nil)
		require.Equal(t, 200, res.Status, string(res.Body))
		var l struct{ Members []person }
		res.JSON(t, &l)
		out := map[string]person{}
		for _, p := range l.Members {
			out[p.ID] = p
		}
		return out
	}

	keepID, keep := invite()
	dropID, drop := invite()
	ps := pending()
	require.Len(t, ps, 2)
	for _, p := range ps {
		require.Equal(t, "root@example.com", p.InvitedBy)
		require.NotEmpty(t, p.InvitedAt)
		require.NotEmpty(t, p.ExpiresAt)
	}

	// A member gets exactly what a missing invitation gets, on every people endpoint.
	missing := env.Do(t, "DELETE", "/api/invitations/imissing0", admin, nil)
	require.Equal(t, 404, missing.Status, string(missing.Body))
	for _, c := range [][2]string{{"GET", "/api/members"}, {"GET", "/api/invitations"}, {"DELETE", "/api/invitations/" + keepID}} {
		same(t, c[0]+" "+c[1]+" as a member", env.Do(t, c[0], c[1], member, nil), missing)
	}
	require.Len(t, pending(), 2, "the member revoked nothing")

	// Revoke: gone from the list, its link no longer works, a second revoke reads missing.
	require.Equal(t, 204, env.Do(t, "DELETE", "/api/invitations/"+dropID, admin, nil).Status)
	require.Len(t, pending(), 1)
	res := env.Do(t, "POST", "/api/invitations/redeem", "", map[string]any{"token": drop, "email": "late@example.com", "password": "password-late"})
	require.Equal(t, "invitation_invalid", res.ErrorCode(), string(res.Body))
	same(t, "revoked twice", env.Do(t, "DELETE", "/api/invitations/"+dropID, admin, nil), missing)

	// Redeemed: the invitation leaves the list, the account is in the members' list with
	// its inviter; a used invitation cannot be revoked.
	res = env.Do(t, "POST", "/api/invitations/redeem", "", map[string]any{"token": keep, "email": "guest@example.com", "password": "password-guest", "name": "Guest"})
	require.Equal(t, 201, res.Status, string(res.Body))
	var guest struct{ ID string }
	res.JSON(t, &guest)
	require.Empty(t, pending())
	require.Equal(t, "invitation_used", env.Do(t, "DELETE", "/api/invitations/"+keepID, admin, nil).ErrorCode())
	ms := people()
	require.Equal(t, person{ID: guest.ID, Name: "Guest", Email: "guest@example.com", Role: "member", JoinedAt: ms[guest.ID].JoinedAt, InvitedBy: "root@example.com"}, ms[guest.ID])
	require.NotEmpty(t, ms[guest.ID].JoinedAt)
	require.Equal(t, "admin", ms[adminID].Role)
	require.Equal(t, "member", ms[plainID].Role)
	require.Equal(t, "none", ms[strangerID].Role, "signed up, not admitted")
	require.Empty(t, ms[plainID].InvitedBy)

	// Roles: promote, demote, remove, admit; an admin cannot demote or remove themselves.
	setRole := func(id string, body map[string]any) functionstest.Response {
		return env.Do(t, "PUT", "/api/members/"+id, admin, body)
	}
	require.Equal(t, 200, setRole(plainID, map[string]any{"role": "admin"}).Status)
	require.Equal(t, "admin", people()[plainID].Role)
	require.Equal(t, 200, setRole(plainID, map[string]any{"role": "member"}).Status)
	require.Equal(t, "member", people()[plainID].Role)
	require.Equal(t, 200, setRole(plainID, map[string]any{"member": false}).Status)
	require.Equal(t, "none", people()[plainID].Role)
	require.Equal(t, 200, setRole(strangerID, map[string]any{"member": true}).Status)
	require.Equal(t, "member", people()[strangerID].Role)
	require.Equal(t, "own_admin_role", setRole(adminID, map[string]any{"role": "member"}).ErrorCode())
	require.Equal(t, "own_admin_role", setRole(adminID, map[string]any{"member": false}).ErrorCode())
	require.Equal(t, "invalid_member", setRole(plainID, map[string]any{"role": "owner"}).ErrorCode())
	require.Equal(t, "admin", people()[adminID].Role)

	// The audit has every member action, with who did it.
	var au struct {
		Audit []struct{ ActorID, Action, Target string }
	}
	res = env.Do(t, "GET", "/api/audit?limit=100", admin, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	res.JSON(t, &au)
	seen := map[string]string{}
	for _, a := range au.Audit {
		seen[a.Action+" "+a.Target] = a.ActorID
	}
	for k, actor := range map[string]string{
		"invitation.create invitation/" + keepID: adminID, "invitation.revoke invitation/" + dropID: adminID,
		"invitation.redeem invitation/" + keepID: guest.ID, "member.role member/" + plainID: adminID,
		"member.remove member/" + plainID: adminID, "member.admit member/" + strangerID: adminID,
	} {
		require.Equal(t, actor, seen[k], "audit %s", k)
	}
}
