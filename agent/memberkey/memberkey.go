// Package memberkey derives a member's own credential for the agent's inference gateway
// and MCP job server from the agent's gateway key (PA_GATEWAY_API_KEY). A member's Hermes
// (agent/homes) holds only its member's key, never the agent's: its tools can read it (it
// is in their sandbox), and with it they can call the gateway and the MCP server only for
// runs of that member.
//
// A key is "pam-" + hex(HMAC-SHA256(master, "pa member key\x00" + owner)) + "-" + owner.
// The owner is in the clear so the verifier needs no table; the MAC binds it.
package memberkey

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"strings"
)

const (
	prefix = "pam-"
	macLen = 2 * sha256.Size
)

func mac(master, owner string) string {
	m := hmac.New(sha256.New, []byte(master))
	m.Write([]byte("pa member key\x00" + owner))
	return hex.EncodeToString(m.Sum(nil))
}

// Derive is owner's key under master ("" when either is empty).
func Derive(master, owner string) string {
	if master == "" || owner == "" {
		return ""
	}
	return prefix + mac(master, owner) + "-" + owner
}

// Owner returns the member a key was derived for under master, or ok=false when the key
// is not a member key of master (compared in constant time).
func Owner(master, key string) (owner string, ok bool) {
	rest, found := strings.CutPrefix(key, prefix)
	if master == "" || !found || len(rest) < macLen+2 || rest[macLen] != '-' {
		return "", false
	}
	owner = rest[macLen+1:]
	if !hmac.Equal([]byte(rest[:macLen]), []byte(mac(master, owner))) {
		return "", false
	}
	return owner, true
}
