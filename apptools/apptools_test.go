package apptools_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/apptools"
	"privateassistant/queue/redistest"
	"privateassistant/runtimeapi"
)

var secret = []byte("pacb_test-secret")

type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) Now() time.Time      { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) Add(d time.Duration) { c.mu.Lock(); c.t = c.t.Add(d); c.mu.Unlock() }
func newClock() *clock               { return &clock{t: time.Unix(1_800_000_000, 0)} }
func signed(now time.Time, delivery string, body []byte) http.Header {
	h := http.Header{}
	apptools.Sign(h, secret, now, delivery, body)
	return h
}

func TestSignatureVerified(t *testing.T) {
	c := newClock()
	v := &apptools.Verifier{Secret: secret, Now: c.Now}
	body := []byte(`{"tool":"turn_on_lights","arguments":{"room":"kitchen"}}`)
	require.NoError(t, v.Verify(signed(c.Now(), "d1", body), body))
	// The signature is HMAC-SHA256 over "v1.<ts>.<delivery>.<body>" (a host app in any
	// language can check it from the doc alone; this vector is Python's hmac module's).
	require.Equal(t, "v1=efd7c4fe0e6972b74c01d0b8968b9a09f9f29d6c304c0daf50288c88f9799af4", apptools.Signature(secret, 1_800_000_000, "d1", []byte(`{"x":1}`)))
}

func TestTamperedCallbackIsRefused(t *testing.T) {
	c := newClock()
	v := &apptools.Verifier{Secret: secret, Now: c.Now}
	body := []byte(`{"tool":"turn_on_lights","arguments":{"room":"kitchen"}}`)
	h := signed(c.Now(), "d1", body)
	require.ErrorIs(t, v.Verify(h, []byte(`{"tool":"turn_on_lights","arguments":{"room":"garage"}}`)), apptools.ErrBadSignature, "a changed body")
	h2 := h.Clone()
	h2.Set(apptools.HeaderTimestamp, "1800000001")
	require.ErrorIs(t, v.Verify(h2, body), apptools.ErrBadSignature, "a changed timestamp")
	h3 := h.Clone()
	h3.Set(apptools.HeaderDelivery, "d2")
	require.ErrorIs(t, v.Verify(h3, body), apptools.ErrBadSignature, "a changed delivery id")
	other := &apptools.Verifier{Secret: []byte("another app's secret"), Now: c.Now}
	require.ErrorIs(t, other.Verify(h, body), apptools.ErrBadSignature, "another secret")
	require.ErrorIs(t, v.Verify(http.Header{}, body), apptools.ErrUnsigned)
	// The forgeries burnt nothing: the genuine callback still passes, once.
	require.NoError(t, v.Verify(h, body))
}

func TestReplayedCallbackIsRefused(t *testing.T) {
	c := newClock()
	v := &apptools.Verifier{Secret: secret, Now: c.Now}
	body := []byte(`{"x":1}`)
	h := signed(c.Now(), "d1", body)
	require.NoError(t, v.Verify(h, body))
	c.Add(time.Minute)
	require.ErrorIs(t, v.Verify(h, body), apptools.ErrReplayed, "the same delivery within the window")
	c.Add(5 * time.Minute)
	require.ErrorIs(t, v.Verify(h, body), apptools.ErrStale, "after the window the timestamp refuses it")
	require.NoError(t, v.Verify(signed(c.Now(), "d2", body), body), "a new delivery passes")
}

func TestStaleTimestampIsRefused(t *testing.T) {
	c := newClock()
	v := &apptools.Verifier{Secret: secret, Now: c.Now, Window: time.Minute}
	body := []byte(`{}`)
	require.ErrorIs(t, v.Verify(signed(c.Now().Add(-2*time.Minute), "old", body), body), apptools.ErrStale)
	require.ErrorIs(t, v.Verify(signed(c.Now().Add(2*time.Minute), "future", body), body), apptools.ErrStale)
	require.NoError(t, v.Verify(signed(c.Now().Add(-59*time.Second), "recent", body), body))
}

// The middleware refuses before the handler runs and hands it the same body.
func TestMiddleware(t *testing.T) {
	c := newClock()
	v := &apptools.Verifier{Secret: secret, Now: c.Now}
	var got []string
	h := v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		got = append(got, string(b))
	}))
	body := `{"a":1}`
	do := func(hdr http.Header, b string) int {
		r := httptest.NewRequest("POST", "/", strings.NewReader(b))
		r.Header = hdr
		w := httptest.NewRecorder()
		h.ServeHTTP(w, r)
		return w.Code
	}
	hdr := signed(c.Now(), "m1", []byte(body))
	require.Equal(t, 200, do(hdr, body))
	require.Equal(t, 401, do(hdr, body), "replay")
	require.Equal(t, 401, do(signed(c.Now(), "m2", []byte(body)), `{"a":2}`), "tampered")
	require.Equal(t, []string{body}, got)
}

func TestAllowList(t *testing.T) {
	a, err := apptools.ParseAllowList("https://home.example.com/pa/, http://10.0.0.20:8123/api")
	require.NoError(t, err)
	for _, u := range []string{"https://home.example.com/pa/lights", "https://home.example.com:443/pa/x", "https://HOME.example.com/pa/", "http://10.0.0.20:8123/api", "http://10.0.0.20:8123/api/tools/x"} {
		require.True(t, a.Allows(u), u)
	}
	for _, u := range []string{"https://home.example.com/other", "http://home.example.com/pa/x", "https://home.example.com.evil.com/pa/x",
		"https://user@home.example.com/pa/x", "https://home.example.com/pa/../admin", "https://home.example.com/pa/%2e%2e/admin",
		"http://10.0.0.20:8124/api", "http://10.0.0.20:8123/apix", "not a url", ""} {
		require.False(t, a.Allows(u), u)
	}
	_, err = apptools.ParseAllowList("ftp://x/")
	require.Error(t, err)
	require.False(t, apptools.AllowList(nil).Allows("https://home.example.com/pa/x"), "an empty list allows nothing")
}

var lightsSchema = json.RawMessage(`{"type":"object","properties":{"room":{"type":"string","enum":["kitchen","living room"]}},"required":["room"],"additionalProperties":false}`)

func TestDeclaration(t *testing.T) {
	ctx := context.Background()
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	reg := &apptools.Registry{RDB: rdb}
	allow := apptools.AllowList{"https://home.example.com/pa/"}
	lights := apptools.Tool{Name: "turn_on_lights", Description: "Turn on the lights in a room.", Schema: lightsSchema, CallbackURL: "https://home.example.com/pa/lights"}

	off := lights
	off.CallbackURL = "https://attacker.example.net/pa/lights"
	_, err := reg.Declare(ctx, "homeauto", []apptools.Tool{lights, off}, allow)
	require.ErrorIs(t, err, apptools.ErrNotAllowed, "a URL not on the allow-list is refused at declaration")
	_, err = reg.Get(ctx, "homeauto", "turn_on_lights")
	require.ErrorIs(t, err, apptools.ErrUnknownTool, "one bad tool declares nothing")

	for name, bad := range map[string]apptools.Tool{
		"name":        {Name: "Turn On", Description: "x", Schema: lightsSchema, CallbackURL: lights.CallbackURL},
		"description": {Name: "a", Schema: lightsSchema, CallbackURL: lights.CallbackURL},
		"not json":    {Name: "a", Description: "x", Schema: json.RawMessage(`{`), CallbackURL: lights.CallbackURL},
		"not object":  {Name: "a", Description: "x", Schema: json.RawMessage(`{"type":"string"}`), CallbackURL: lights.CallbackURL},
		"remote ref":  {Name: "a", Description: "x", Schema: json.RawMessage(`{"type":"object","properties":{"r":{"$ref":"https://evil.example/s.json"}}}`), CallbackURL: lights.CallbackURL},
	} {
		_, err := reg.Declare(ctx, "homeauto", []apptools.Tool{bad}, allow)
		require.ErrorIs(t, err, apptools.ErrInvalidTool, name)
	}

	sec, err := reg.Declare(ctx, "homeauto", []apptools.Tool{lights}, allow)
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(sec, "pacb_"), "the first declaration shows the signing secret")
	again, err := reg.Declare(ctx, "homeauto", []apptools.Tool{lights}, allow)
	require.NoError(t, err)
	require.Empty(t, again, "shown once")
	got, err := reg.Secret(ctx, "homeauto")
	require.NoError(t, err)
	require.Equal(t, sec, string(got))

	tl, err := reg.Get(ctx, "homeauto", "turn_on_lights")
	require.NoError(t, err)
	require.Equal(t, "homeauto", tl.App)
	require.NoError(t, tl.CheckArguments(json.RawMessage(`{"room":"kitchen"}`)))
	require.Error(t, tl.CheckArguments(json.RawMessage(`{"room":"garage"}`)))
	require.Error(t, tl.CheckArguments(json.RawMessage(`{"room":"kitchen","unlock":"front door"}`)))
	_, err = reg.Get(ctx, "other", "turn_on_lights")
	require.ErrorIs(t, err, apptools.ErrUnknownTool, "another app has no such tool")
	require.Contains(t, apptools.Instructions([]apptools.Tool{tl}), "turn_on_lights: Turn on the lights in a room.")
}

// Client.Call signs what the Verifier checks, follows no redirect, and reports the app's
// refusal as an error.
func TestCallIsSignedAndVerified(t *testing.T) {
	v := &apptools.Verifier{Secret: secret}
	var seen apptools.Callback
	app := httptest.NewServer(v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		require.NoError(t, json.NewDecoder(r.Body).Decode(&seen))
		switch r.URL.Path {
		case "/pa/lights":
			_, _ = w.Write([]byte(`{"on":true}`))
		case "/pa/redirect":
			http.Redirect(w, r, "https://elsewhere.example/", http.StatusFound)
		default:
			http.Error(w, "no such room", http.StatusBadRequest)
		}
	})))
	t.Cleanup(app.Close)
	c := &apptools.Client{Allow: apptools.AllowList{app.URL + "/pa/"}}
	tl := apptools.Tool{App: "homeauto", Name: "turn_on_lights", CallbackURL: app.URL + "/pa/lights"}
	out, err := c.Call(context.Background(), tl, secret, apptools.NewDelivery(), json.RawMessage(`{"room":"kitchen"}`), "resp_r1")
	require.NoError(t, err)
	require.JSONEq(t, `{"on":true}`, string(out))
	require.Equal(t, "turn_on_lights", seen.Tool)
	require.Equal(t, "resp_r1", seen.Response)

	_, err = c.Call(context.Background(), apptools.Tool{App: "homeauto", Name: "x", CallbackURL: app.URL + "/pa/bad"}, secret, apptools.NewDelivery(), nil, "resp_r1")
	require.ErrorIs(t, err, apptools.ErrCallback)
	require.ErrorContains(t, err, "no such room")
	_, err = c.Call(context.Background(), apptools.Tool{App: "homeauto", Name: "x", CallbackURL: app.URL + "/pa/redirect"}, secret, apptools.NewDelivery(), nil, "resp_r1")
	require.ErrorIs(t, err, apptools.ErrCallback, "a redirect is not followed")
	_, err = c.Call(context.Background(), apptools.Tool{App: "homeauto", Name: "x", CallbackURL: app.URL + "/elsewhere"}, secret, apptools.NewDelivery(), nil, "resp_r1")
	require.ErrorIs(t, err, apptools.ErrNotAllowed, "the allow-list is checked again at call time")
	_, err = c.Call(context.Background(), tl, []byte("wrong secret"), apptools.NewDelivery(), nil, "resp_r1")
	require.ErrorContains(t, err, "401", "the app refuses a call signed with another secret")
}

func TestAppOfRequestID(t *testing.T) {
	require.Equal(t, "homeauto", apptools.AppOfRequestID("rt:homeauto:0123abcd"))
	require.Equal(t, "homeauto", apptools.AppOfRequestID(runtimeapi.RequestID("homeauto", "any idempotency key")), "the runtime API's request ids")
	for _, id := range []string{"", "web-123", "mcp-abc", "rt:", "rt:homeauto", "x:rt:homeauto:1"} {
		require.Empty(t, apptools.AppOfRequestID(id), id)
	}
	require.Equal(t, "resp_r1", apptools.ResponseID("r1"))
}
