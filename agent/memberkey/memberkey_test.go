package memberkey_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/memberkey"
)

func TestMemberKeysNameTheirMemberOnly(t *testing.T) {
	const master = "gateway-master-key-0123456789abcdef"
	k := memberkey.Derive(master, "alice")
	owner, ok := memberkey.Owner(master, k)
	require.True(t, ok)
	require.Equal(t, "alice", owner)
	require.NotContains(t, k, master)

	_, ok = memberkey.Owner("another-master-key-0123456789abcdef", k)
	require.False(t, ok, "another master")
	forged := k[:len(k)-len("alice")] + "bob"
	_, ok = memberkey.Owner(master, forged)
	require.False(t, ok, "the owner is bound by the MAC")
	for _, bad := range []string{"", master, "pam-", "pam-zz-alice", memberkey.Derive(master, "")} {
		_, ok = memberkey.Owner(master, bad)
		require.False(t, ok, bad)
	}
	require.Empty(t, memberkey.Derive("", "alice"))
	_, ok = memberkey.Owner("", k)
	require.False(t, ok)
}

func FuzzOwner(f *testing.F) {
	const master = "gateway-master-key-0123456789abcdef"
	f.Add(memberkey.Derive(master, "alice"))
	f.Add("pam-")
	f.Fuzz(func(t *testing.T, key string) {
		if owner, ok := memberkey.Owner(master, key); ok {
			require.Equal(t, memberkey.Derive(master, owner), key)
		}
	})
}
