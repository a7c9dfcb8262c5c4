package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"

	"privateassistant/schema/appwritetest"
)

type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *testClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// jwtSetup signs a user in to an emulator on the mongodb engine with Appwrite 1.9.6's
// abuse limits (createJWT 120 per 60 s per user) and returns a CLI bound to it, with the
// emulator and the CLI on one clock.
func jwtSetup(t *testing.T, api string) (*cli, *appwritetest.TestServer, *testClock) {
	t.Helper()
	clock := &testClock{t: time.Now()}
	ts := appwritetest.NewTestServer(t, appwritetest.Options{Engine: appwritetest.EngineMongoDB, Now: clock.Now})
	admin := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(ts.URL), appwrite.WithProject(ts.Project), appwrite.WithKey(ts.AdminKey)))
	_, err := admin.Create("cliuser", admin.WithCreateEmail("cli@example.com"), admin.WithCreatePassword("password-cli-1"))
	require.NoError(t, err)

	var out, errw bytes.Buffer
	c := newCLI(strings.NewReader("password-cli-1\n"), &out, &errw)
	c.endpoint, c.project, c.dir, c.clock = ts.URL, ts.Project, filepath.Join(t.TempDir(), "pa"), clock.Now
	if api != "" {
		c.base = api
	}
	require.NoError(t, c.login(context.Background(), "cli@example.com"), errw.String())
	return c, ts, clock
}

// The CLI mints one JWT and reuses it across calls (and invocations: it is kept on disk,
// owner-only): 300 calls in one minute stay far below createJWT's 120 per minute, where a
// JWT per call is refused from the 121st on.
func TestCLIReusesItsJWT(t *testing.T) {
	t.Parallel()
	c, _, _ := jwtSetup(t, "")
	ctx := context.Background()
	first, err := c.jwt(ctx)
	require.NoError(t, err)
	for i := 0; i < 300; i++ {
		tok, err := c.jwt(ctx)
		require.NoError(t, err, "call %d", i)
		require.Equal(t, first, tok, "call %d minted a new JWT", i)
	}
	st, err := os.Stat(c.jwtFile())
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm(), "the kept JWT is the owner's only")
	st, err = os.Stat(c.dir)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o700), st.Mode().Perm())

	// Another invocation (a new cli over the same directory) reuses it too.
	c2 := newCLI(strings.NewReader(""), &bytes.Buffer{}, &bytes.Buffer{})
	c2.endpoint, c2.project, c2.dir, c2.clock = c.endpoint, c.project, c.dir, c.clock
	tok, err := c2.jwt(ctx)
	require.NoError(t, err)
	require.Equal(t, first, tok)

	// The same loop minting a JWT per call is what the limit stops (the reason for all this).
	secret, err := c.sessionSecret()
	require.NoError(t, err)
	var refused error
	for i := 0; i < 130 && refused == nil; i++ {
		_, refused = c.mintJWT(ctx, secret)
	}
	require.Error(t, refused, "createJWT is limited to 120 per minute per user")
	var ee *exitErr
	require.ErrorAs(t, refused, &ee)
	require.Equal(t, exitError, ee.code, "a rate limit is not a signed-out session")
	require.Contains(t, ee.msg, "try again shortly")
}

// A kept JWT is replaced shortly before it expires (its exp claim), never used after.
func TestCLIRenewsItsJWTBeforeExpiry(t *testing.T) {
	t.Parallel()
	c, _, clock := jwtSetup(t, "")
	ctx := context.Background()
	first, err := c.jwt(ctx)
	require.NoError(t, err)
	exp, ok := jwtExpiry(first)
	require.True(t, ok)
	require.WithinDuration(t, clock.Now().Add(15*time.Minute), exp, 2*time.Second, "Appwrite's JWTs last 900 s")

	clock.Add(15*time.Minute - jwtRefreshBefore - 5*time.Second)
	tok, err := c.jwt(ctx)
	require.NoError(t, err)
	require.Equal(t, first, tok, "still fresh")

	clock.Add(10 * time.Second) // now within jwtRefreshBefore of its expiry
	second, err := c.jwt(ctx)
	require.NoError(t, err)
	require.NotEqual(t, first, second)
	exp2, _ := jwtExpiry(second)
	require.True(t, exp2.After(exp))
	tok, err = c.jwt(ctx)
	require.NoError(t, err)
	require.Equal(t, second, tok, "and the new one is kept")
}

// Signing in again, or out, never reuses a JWT of the previous session; a kept file that
// others could read is not trusted.
func TestCLIKeptJWTBelongsToItsSession(t *testing.T) {
	t.Parallel()
	c, _, clock := jwtSetup(t, "")
	ctx := context.Background()
	first, err := c.jwt(ctx)
	require.NoError(t, err)

	clock.Add(time.Second) // a new session's token differs even in its iat
	c.in = strings.NewReader("password-cli-1\n")
	require.NoError(t, c.login(ctx, "cli@example.com"))
	second, err := c.jwt(ctx)
	require.NoError(t, err)
	require.NotEqual(t, first, second, "a new session mints its own JWT")

	require.NoError(t, os.Chmod(c.jwtFile(), 0o644))
	clock.Add(time.Second)
	third, err := c.jwt(ctx)
	require.NoError(t, err)
	require.NotEqual(t, second, third, "a group- or world-readable file is not used")
	st, err := os.Stat(c.jwtFile())
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), st.Mode().Perm())

	// A symlink in its place (to a file of the right mode) is not followed either.
	other := filepath.Join(t.TempDir(), "elsewhere")
	b, err := os.ReadFile(c.jwtFile())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(other, b, 0o600))
	require.NoError(t, os.Remove(c.jwtFile()))
	require.NoError(t, os.Symlink(other, c.jwtFile()))
	clock.Add(time.Second)
	fourth, err := c.jwt(ctx)
	require.NoError(t, err)
	require.NotEqual(t, third, fourth)
	st, err = os.Lstat(c.jwtFile())
	require.NoError(t, err)
	require.True(t, st.Mode().IsRegular())

	require.NoError(t, c.logout())
	_, err = os.Stat(c.jwtFile())
	require.True(t, os.IsNotExist(err), "signing out forgets the JWT")
	_, err = c.jwt(ctx)
	require.Error(t, err)
}

// A call answered 401 (a revoked or rotated token) drops the kept JWT and is sent once
// more with a fresh one; a second 401 is the answer.
func TestCLIRefreshesItsJWTOn401(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		revoked = map[string]bool{}
		seen    []string
		clock   *testClock
		denyAll bool
	)
	api := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		tok := strings.TrimPrefix(r.Header.Get("Authorization"), "Bearer ")
		seen = append(seen, tok)
		if denyAll || revoked[tok] || len(seen) == 1 {
			revoked[tok] = true
			clock.Add(time.Second) // the next JWT differs in its iat
			w.WriteHeader(401)
			_, _ = w.Write([]byte(`{"error":{"code":"unauthorized","message":"sign in again"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"roles":[]}`))
	}))
	t.Cleanup(api.Close)
	c, _, clk := jwtSetup(t, api.URL)
	mu.Lock()
	clock = clk
	mu.Unlock()

	_, err := c.call(context.Background(), "GET", "/api/roles", nil)
	require.NoError(t, err)
	mu.Lock()
	require.Len(t, seen, 2)
	require.NotEqual(t, seen[0], seen[1], "the retry carries a fresh JWT")
	mu.Unlock()
	kept, ok := c.readJWT()
	require.True(t, ok)
	require.Equal(t, seen[1], kept.JWT, "the fresh JWT is kept")

	mu.Lock()
	denyAll = true
	mu.Unlock()
	_, err = c.call(context.Background(), "GET", "/api/roles", nil)
	var ee *exitErr
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitSignedOut, ee.code)
	mu.Lock()
	require.Len(t, seen, 4, "one retry, not a loop")
	mu.Unlock()
}
