package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"privateassistant/apptools"
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
