package main

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/client"
)

// The CLI reuses one JWT across invocations instead of minting one per call: Appwrite
// 1.9.6 allows createJWT 120 times per 60 s per user (app/controllers/api/account.php,
// abuse-limit APP_LIMIT_WRITE_RATE_DEFAULT*2), and the count is the user's, shared with
// the web — a CLI loop that minted per call would lock the user out of both.
//
// The JWT is kept in <config dir>/jwt (mode 0600, the directory 0700) with its expiry
// (the token's own exp claim) and a hash of the session it was minted from, so signing in
// again or out never reuses a token of another session. It is used until jwtRefreshBefore
// before its expiry, then replaced; a call answered 401 drops it and is retried once with
// a fresh one (the session may have been rotated, or the token revoked).

// jwtRefreshBefore is how long before its expiry a kept JWT is replaced: longer than a
// call (a stream is checked when it opens; pa tail's fallback long-poll waits 2 s) plus
// clock skew, so a call never starts with a token about to expire.
const jwtRefreshBefore = 2 * time.Minute

// jwtFallbackLife is assumed when a token carries no readable exp claim (Appwrite's
// default JWT duration is 900 s).
const jwtFallbackLife = 15 * time.Minute

type keptJWT struct {
	JWT       string    `json:"jwt"`
	ExpiresAt time.Time `json:"expiresAt"`
	Session   string    `json:"session"` // sha256 of the session secret, hex
}

func (c *cli) jwtFile() string { return filepath.Join(c.dir, "jwt") }

func sessionHash(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// jwt returns the kept JWT while it is fresh, else mints one from the kept session and
// keeps it.
func (c *cli) jwt(ctx context.Context) (string, error) {
	secret, err := c.sessionSecret()
	if err != nil {
		return "", err
	}
	now := c.clock()
	if k, ok := c.readJWT(); ok && k.Session == sessionHash(secret) && now.Before(k.ExpiresAt.Add(-jwtRefreshBefore)) {
		return k.JWT, nil
	}
	return c.mintJWT(ctx, secret)
}

// dropJWT forgets the kept JWT (after a 401, a login or a logout).
func (c *cli) dropJWT() {
	_ = os.Remove(c.jwtFile())
}

func (c *cli) sessionSecret() (string, error) {
	b, err := os.ReadFile(c.sessionFile())
	if err != nil {
		return "", fail(exitSignedOut, "not signed in: run `pa login EMAIL`")
	}
	return strings.TrimSpace(string(b)), nil
}

func (c *cli) mintJWT(ctx context.Context, secret string) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	acc := appwrite.NewAccount(appwrite.NewClient(appwrite.WithEndpoint(c.endpoint), appwrite.WithProject(c.project), appwrite.WithSession(secret)))
	j, err := acc.CreateJWT()
	var ae *client.AppwriteError
	if errors.As(err, &ae) && ae.GetStatusCode() == 429 {
		// Not signed out: Appwrite's abuse limit (createJWT, per user, shared with the web).
		return "", fail(exitError, "Appwrite refused a new JWT for now (too many in the last minute); try again shortly")
	}
	if err != nil && !errors.As(err, &ae) {
		return "", unreachable(err, "the assistant", c.endpoint)
	}
	if err != nil {
		return "", fail(exitSignedOut, "the session has ended: run `pa login EMAIL` (%v)", err)
	}
	exp, ok := jwtExpiry(j.Jwt)
	if !ok {
		exp = c.clock().Add(jwtFallbackLife)
	}
	if err := c.writeJWT(keptJWT{JWT: j.Jwt, ExpiresAt: exp, Session: sessionHash(secret)}); err != nil {
		// Not fatal: this call still has its token; the next one mints again.
		fmt.Fprintln(c.errw, "pa: warning: could not keep the JWT:", err)
	}
	return j.Jwt, nil
}

// readJWT reads the kept JWT. A file others could read (mode beyond 0600), or anything but
// a regular file (a symlink), is not trusted: it is removed and a new token minted.
func (c *cli) readJWT() (keptJWT, bool) {
	var k keptJWT
	st, err := os.Lstat(c.jwtFile())
	if err != nil {
		return k, false
	}
	if st.Mode().Perm()&0o077 != 0 || !st.Mode().IsRegular() {
		c.dropJWT()
		return k, false
	}
	b, err := os.ReadFile(c.jwtFile())
	if err != nil || json.Unmarshal(b, &k) != nil || k.JWT == "" {
		return keptJWT{}, false
	}
	return k, true
}

// writeJWT replaces the kept JWT atomically (a temporary file in the same directory,
// created 0600, then renamed), so a concurrent pa never reads half a token.
func (c *cli) writeJWT(k keptJWT) error {
	if err := os.MkdirAll(c.dir, 0o700); err != nil {
		return err
	}
	b, _ := json.Marshal(k)
	f, err := os.CreateTemp(c.dir, ".jwt-*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if err := f.Chmod(0o600); err != nil {
		f.Close()
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(f.Name(), c.jwtFile())
}

// jwtExpiry reads a JWT's exp claim (seconds since the epoch) without verifying it: the
// CLI only uses it to decide when to mint a new token; the functions verify.
func jwtExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(strings.TrimRight(parts[1], "="))
	if err != nil {
		return time.Time{}, false
	}
	var claims struct {
		Exp json.Number `json:"exp"`
	}
	if err := json.Unmarshal(b, &claims); err != nil {
		return time.Time{}, false
	}
	n, err := claims.Exp.Int64()
	if err != nil || n <= 0 {
		return time.Time{}, false
	}
	return time.Unix(n, 0), true
}
