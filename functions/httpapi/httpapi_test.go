package httpapi_test

import (
	"bytes"
	"context"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/httpapi"
	"privateassistant/schema/appwritetest"
)

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func TestVerifiedJWTCacheIsBounded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := appwritetest.NewTestServer(t, appwritetest.Options{})
	users := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(ts.URL), appwrite.WithProject(ts.Project), appwrite.WithKey(ts.AdminKey)))
	u, err := users.Create("u1", users.WithCreateEmail("u1@example.com"), users.WithCreatePassword("password-1234"))
	require.NoError(t, err)
	_, err = users.CreateSession(u.Id)
	require.NoError(t, err)
	long, err := users.CreateJWT(u.Id, users.WithCreateJWTDuration(3600))
	require.NoError(t, err)
	short, err := users.CreateJWT(u.Id, users.WithCreateJWTDuration(10))
	require.NoError(t, err)

	clk := &clock{t: time.Now()}
	a := &httpapi.Authenticator{Endpoint: ts.URL, Project: ts.Project, TTL: 30 * time.Second, Now: clk.now}
	got, err := a.Verify(ctx, "Bearer "+long.Jwt)
	require.NoError(t, err)
	require.Equal(t, "u1", got.ID)
	require.EqualValues(t, 1, a.Calls())
	_, err = a.Verify(ctx, "Bearer "+long.Jwt)
	require.NoError(t, err)
	require.EqualValues(t, 1, a.Calls(), "a cache hit asks Appwrite nothing")
	clk.add(31 * time.Second)
	_, err = a.Verify(ctx, "Bearer "+long.Jwt)
	require.NoError(t, err)
	require.EqualValues(t, 2, a.Calls(), "never cached beyond the TTL")

	_, err = a.Verify(ctx, "Bearer "+short.Jwt)
	require.NoError(t, err)
	require.EqualValues(t, 3, a.Calls())
	clk.add(11 * time.Second) // past the JWT's own expiry, inside the TTL
	_, _ = a.Verify(ctx, "Bearer "+short.Jwt)
	require.EqualValues(t, 4, a.Calls(), "never cached beyond the token's expiry")

	for _, bad := range []string{"", "Bearer ", "Basic x", "bearer " + long.Jwt, "Bearer " + string(bytes.Repeat([]byte("x"), 5000))} {
		_, err := a.Verify(ctx, bad)
		var e *httpapi.Error
		require.ErrorAs(t, err, &e)
		require.Equal(t, 401, e.Status)
	}
}

func FuzzDecodeJSON(f *testing.F) {
	f.Add([]byte(`{"requestId":"r1","text":"hi","role":"chat"}`))
	f.Add([]byte(`{"requestId":1}`))
	f.Add([]byte(`{"a":{"b":[1,2,{"c":null}]}}`))
	f.Add([]byte(`{"text":"\u0000\ud800"} {}`))
	f.Fuzz(func(t *testing.T, body []byte) {
		var v struct {
			RequestID string `json:"requestId"`
			Text      string `json:"text"`
			Role      string `json:"role"`
		}
		r := httptest.NewRequest("POST", "/", bytes.NewReader(body))
		err := httpapi.DecodeJSON(r, &v)
		if err != nil {
			var e *httpapi.Error
			require.ErrorAs(t, err, &e)
			require.Equal(t, 400, e.Status)
		}
	})
}

// A JWT whose session was signed out stops working within MaxJWTCacheTTL, however long
// the TTL asked for (the defect: 30 s).
func TestSignedOutSessionIsRefusedWithinFiveSeconds(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ts := appwritetest.NewTestServer(t, appwritetest.Options{})
	users := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(ts.URL), appwrite.WithProject(ts.Project), appwrite.WithKey(ts.AdminKey)))
	u, err := users.Create("u2", users.WithCreateEmail("u2@example.com"), users.WithCreatePassword("password-1234"))
	require.NoError(t, err)
	se, err := users.CreateSession(u.Id)
	require.NoError(t, err)
	j, err := users.CreateJWT(u.Id, users.WithCreateJWTSessionId(se.Id), users.WithCreateJWTDuration(900))
	require.NoError(t, err)

	clk := &clock{t: time.Now()}
	a := &httpapi.Authenticator{Endpoint: ts.URL, Project: ts.Project, TTL: 30 * time.Second, Now: clk.now}
	_, err = a.Verify(ctx, "Bearer "+j.Jwt)
	require.NoError(t, err)
	// Sign the session out (as the user would, with the session's own JWT).
	acc := appwrite.NewAccount(appwrite.NewClient(appwrite.WithEndpoint(ts.URL), appwrite.WithProject(ts.Project), appwrite.WithJWT(j.Jwt)))
	_, err = acc.DeleteSession(se.Id)
	require.NoError(t, err)
	clk.add(httpapi.MaxJWTCacheTTL + time.Millisecond)
	_, err = a.Verify(ctx, "Bearer "+j.Jwt)
	var e *httpapi.Error
	require.ErrorAs(t, err, &e, "a signed-out session's JWT must be refused %s after the sign-out", httpapi.MaxJWTCacheTTL)
	require.Equal(t, 401, e.Status)
}
