package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/apptools"
	"privateassistant/functions/service"
	"privateassistant/stacktest"
)

// An app that verifies as the contract says passes pa app check; one that acts on
// anything is reported, check by check.
func TestAppCheck(t *testing.T) {
	const secret = "pacb_test_secret"
	unknownTool := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var cb apptools.Callback
		_ = json.NewDecoder(r.Body).Decode(&cb)
		http.Error(w, `{"error":"unknown tool"}`, http.StatusBadRequest)
	})
	good := httptest.NewServer((&apptools.Verifier{Secret: []byte(secret)}).Middleware(unknownTool))
	t.Cleanup(good.Close)
	naive := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { _, _ = w.Write([]byte(`{"ok":true}`)) }))
	t.Cleanup(naive.Close)

	r := pa(t, nil, "app", "check", "-callback", good.URL+"/pa/lights", "-secret", secret)
	require.Equal(t, 0, r.code, r.out+r.stderr)
	require.Contains(t, r.out, "All 7 checks passed.")
	require.NotContains(t, r.out, "FAIL")

	r = pa(t, nil, "app", "check", "-callback", naive.URL+"/pa/lights", "-secret", secret)
	require.Equal(t, 1, r.code)
	for _, want := range []string{"FAIL  an unsigned callback is refused", "FAIL  a callback signed with another secret is refused",
		"FAIL  a callback token signed by another key is refused", "FAIL  the same delivery again (a replay) is refused",
		"FAIL  a callback signed 10 minutes ago is refused", "FAIL  a tampered body is refused", "ok    a genuine callback is accepted"} {
		require.Contains(t, r.out, want)
	}
	require.Contains(t, r.stderr, "6 of 7 checks failed")

	// The wrong secret on the command line: the genuine callback is reported as refused.
	r = pa(t, nil, "app", "check", "-callback", good.URL+"/pa/lights", "-secret", "another")
	require.Equal(t, 1, r.code)
	require.Contains(t, r.out, "FAIL  a genuine callback is accepted: answered 401")

	// Without -secret the three refusals still run.
	r = pa(t, nil, "app", "check", "-callback", good.URL+"/pa/lights")
	require.Equal(t, 0, r.code, r.out+r.stderr)
	require.Contains(t, r.out, "skip  the genuine")

	r = pa(t, nil, "app", "check")
	require.Equal(t, 2, r.code)
}

// pa app check -key against the function host: the key works, the callback is a declared
// tool's, a wrong key gets the documented envelope, the public key set is published.
func TestAppCheckAgainstTheRuntimeAPI(t *testing.T) {
	var h http.Handler = http.NotFoundHandler()
	app := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { h.ServeHTTP(w, r) }))
	t.Cleanup(app.Close)
	env := stacktest.New(t, stacktest.Options{Functions: func(c *service.Config) { c.AppCallbackAllow = app.URL + "/pa/" }})
	adminID, adminJWT := env.SignUp(t, "check-admin@example.com", "password-check-admin")
	env.Label(t, adminID, "admin")
	res := env.Do(t, "POST", "/api/runtime-keys", adminJWT, map[string]any{"appId": "homeauto", "roles": []string{"chat"}})
	require.Equal(t, 201, res.Status, string(res.Body))
	var k struct{ Secret string }
	res.JSON(t, &k)
	res = env.Do(t, "PUT", "/api/v1/tools", "", map[string]any{"tools": []any{map[string]any{"name": "turn_on_lights",
		"description": "Turn on the lights.", "schema": map[string]any{"type": "object"}, "callbackUrl": app.URL + "/pa/lights"}}},
		"Authorization", "Bearer "+k.Secret)
	require.Equal(t, 200, res.Status, string(res.Body))
	var decl struct{ SigningSecret string }
	res.JSON(t, &decl)
	h = (&apptools.Verifier{Secret: []byte(decl.SigningSecret)}).Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"error":"unknown tool"}`, http.StatusBadRequest)
	}))

	t.Setenv("PA_URL", env.URL)
	t.Setenv("PA_CONFIG_DIR", t.TempDir())
	var out, errw strings.Builder
	code := run(context.Background(), []string{"app", "check", "-callback", app.URL + "/pa/lights", "-secret", decl.SigningSecret, "-key", k.Secret},
		strings.NewReader(""), &out, &errw)
	require.Equal(t, 0, code, out.String()+errw.String())
	for _, want := range []string{"ok    the runtime key works (1 tool(s) declared)", "ok    -callback is a declared tool's callback URL",
		"ok    a wrong key gets 401 invalid_api_key", "ok    the assistant's public keys are published", "All 11 checks passed."} {
		require.Contains(t, out.String(), want)
	}
	out.Reset()
	code = run(context.Background(), []string{"app", "check", "-callback", app.URL + "/pa/other", "-key", k.Secret}, strings.NewReader(""), &out, &errw)
	require.Equal(t, 1, code)
	require.Contains(t, out.String(), "FAIL  -callback is a declared tool's callback URL")
}

// The wrong key pa app check sends is never the key itself, whatever its last characters
// are (base64url: "_" and "-" included; CI once sent the real key and saw it work).
func TestTheWrongKeyIsNeverTheKey(t *testing.T) {
	for _, key := range []string{
		"pak_rk0123456789abcdef_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQ",
		"pak_rk0123456789abcdef_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMN_PQ",
		"pak_rk0123456789abcdef_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNO_Q",
		"pak_rk0123456789abcdef_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOP_",
		"pak_rk0123456789abcdef_abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNAAAA",
	} {
		bad := wrongKey(key)
		require.NotEqual(t, key, bad)
		require.Len(t, bad, len(key), "still well-formed")
	}
}
