package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"privateassistant/apptools"
	"privateassistant/issuer"
	"privateassistant/queue/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The example app, as the agent reaches it: declared (its callback on the allow-list),
// called signed, the light turned on; a replayed or tampered callback refused, the light
// untouched.
func TestTurnOnLights(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	lights := &Lights{}
	v := &apptools.Verifier{}
	mux := http.NewServeMux()
	mux.Handle("POST /pa/lights", v.Middleware(lights.Handler()))
	var last struct {
		h    http.Header
		body []byte
	}
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		last.h, last.body = r.Header.Clone(), b
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		mux.ServeHTTP(w, r)
	}))
	t.Cleanup(app.Close)

	reg := &apptools.Registry{RDB: rdb}
	allow := apptools.AllowList{app.URL + "/pa/"}
	_, err := reg.Declare(ctx, "homeauto", Declaration("https://elsewhere.example/pa/lights"), allow)
	require.ErrorIs(t, err, apptools.ErrNotAllowed)
	secret, err := reg.Declare(ctx, "homeauto", Declaration(app.URL+"/pa/lights"), allow)
	require.NoError(t, err)
	v.Secret = []byte(secret)

	tool, err := reg.Get(ctx, "homeauto", "turn_on_lights")
	require.NoError(t, err)
	args := json.RawMessage(`{"room":"kitchen"}`)
	require.NoError(t, tool.CheckArguments(args))
	c := &apptools.Client{Allow: allow}
	out, err := c.Call(ctx, tool, []byte(secret), apptools.NewDelivery(), args, "resp_r1")
	require.NoError(t, err)
	require.JSONEq(t, `{"room":"kitchen","lights":"on"}`, string(out))
	require.True(t, lights.IsOn("resp_r1", "kitchen"))

	post := func(body string) int {
		r, _ := http.NewRequest("POST", app.URL+"/pa/lights", strings.NewReader(body))
		r.Header = last.h.Clone()
		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	replay := string(last.body)
	require.Equal(t, 401, post(replay), "replayed")
	require.Equal(t, 401, post(strings.Replace(replay, "kitchen", "hall", 1)), "tampered")
	require.False(t, lights.IsOn("resp_r1", "hall"))
}

// The example app with the issuer's keys only (no shared secret): a callback signed by the
// issuer turns the light on; a tampered, replayed or expired one is refused; so is one
// without a token (a sender that knows only the HMAC secret).
func TestTurnOnLightsWithTheIssuersKeys(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ring := &issuer.Keyring{RDB: rdb}
	_, err := ring.Ensure(ctx)
	require.NoError(t, err)
	// Stands in for GET /api/v1/jwks (functions/service serves the same Redis value;
	// TestHostAppToolsThroughTheAgent fetches it from the function host).
	pa := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := issuer.PublicJWKS(r.Context(), rdb)
		require.NoError(t, err)
		_, _ = w.Write(b)
	}))
	t.Cleanup(pa.Close)

	lights := &Lights{}
	var last struct {
		h    http.Header
		body []byte
	}
	var h http.Handler
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		last.h, last.body = r.Header.Clone(), b
		r.Body = io.NopCloser(strings.NewReader(string(b)))
		h.ServeHTTP(w, r)
	}))
	t.Cleanup(app.Close)
	h, err = Verified(lights.Handler(), pa.URL, "https://pa.test", "", app.URL+"/pa/lights")
	require.NoError(t, err)
	_, err = Verified(lights.Handler(), pa.URL, "", "", "")
	require.Error(t, err, "no check configured is refused")

	reg := &apptools.Registry{RDB: rdb}
	allow := apptools.AllowList{app.URL + "/pa/"}
	secret, err := reg.Declare(ctx, "homeauto", Declaration(app.URL+"/pa/lights"), allow)
	require.NoError(t, err)
	tool, err := reg.Get(ctx, "homeauto", "turn_on_lights")
	require.NoError(t, err)
	is := &apptools.Issuer{Name: "https://pa.test", Key: ring.Ensure}
	c := &apptools.Client{Allow: allow, Issuer: is}
	_, err = c.Call(ctx, tool, []byte(secret), apptools.NewDelivery(), json.RawMessage(`{"room":"kitchen"}`), "resp_r1")
	require.NoError(t, err)
	require.True(t, lights.IsOn("resp_r1", "kitchen"))

	post := func(hdr http.Header, body string) int {
		r, _ := http.NewRequest("POST", app.URL+"/pa/lights", strings.NewReader(body))
		r.Header = hdr
		resp, err := http.DefaultClient.Do(r)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.StatusCode
	}
	replay := string(last.body)
	hdr := last.h.Clone()
	require.Equal(t, 401, post(hdr, replay), "replayed")
	require.Equal(t, 401, post(hdr, strings.Replace(replay, "kitchen", "hall", 1)), "tampered")
	noToken := hdr.Clone()
	noToken.Del(apptools.HeaderToken)
	require.Equal(t, 401, post(noToken, strings.Replace(replay, "kitchen", "hall", 1)), "HMAC alone is not enough here")
	old := &apptools.Client{Allow: allow, Issuer: is, Now: func() time.Time { return time.Now().Add(-10 * time.Minute) }}
	_, err = old.Call(ctx, tool, []byte(secret), apptools.NewDelivery(), json.RawMessage(`{"room":"hall"}`), "resp_r1")
	require.ErrorIs(t, err, apptools.ErrCallback, "an expired token is refused")
	require.False(t, lights.IsOn("resp_r1", "hall"))
}
