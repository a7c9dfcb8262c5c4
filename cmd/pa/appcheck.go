package main

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"privateassistant/apptools"
	"privateassistant/issuer"
)

// appCommand is pa app: what a host app's developer runs against their own app (the
// connection contract, docs/runtime-api.md).
var appCommand = &command{name: "app", summary: "check a host app against the connection contract", sub: []*command{
	{name: "check", min: 0, max: 0, summary: "send test callbacks to your app and check your runtime key",
		help: "Sends callbacks to -callback as the assistant would, and checks that your app refuses\n" +
			"what it must: an unsigned callback, a wrong HMAC, a forged token, and (with -secret, the\n" +
			"signing secret your declaration answered) a replay, a stale timestamp and a tampered\n" +
			"body, while accepting a genuine one. The genuine one calls the tool \"pa_app_check\",\n" +
			"which your app should answer as an unknown tool (any status but 401).\n" +
			"With -key it also checks the runtime key, the error envelope and the public key set.\n" +
			"Exit 1 when a check fails.",
		setup: func(fs *flag.FlagSet, c *cli) func(context.Context, []string) error {
			callback := fs.String("callback", "", "your tool's callback `URL`")
			secret := fs.String("secret", "", "the callback signing `secret` (HMAC checks; the genuine callback)")
			key := fs.String("key", "", "your runtime `key` pak_… (runtime API checks)")
			app := fs.String("app", "homeauto", "your app `id` (the audience of the forged token)")
			return func(ctx context.Context, _ []string) error {
				if *callback == "" && *key == "" {
					return fail(exitUsage, "give -callback (your callback URL), -key (your runtime key) or both")
				}
				ck := &appChecker{c: c, out: c.out, url: *callback, secret: []byte(*secret), app: *app}
				if *callback != "" {
					ck.callbacks(ctx)
				}
				if *key != "" {
					ck.runtimeKey(ctx, *key)
				}
				if ck.failed > 0 {
					return fail(exitError, "%d of %d checks failed", ck.failed, ck.ran)
				}
				fmt.Fprintf(c.out, "\nAll %d checks passed.\n", ck.ran)
				return nil
			}
		}},
}}

func init() { topCommands = append(topCommands, appCommand) }

type appChecker struct {
	c           *cli
	out         io.Writer
	url         string
	secret      []byte
	app         string
	ran, failed int
}

func (k *appChecker) report(ok bool, what, why string) {
	k.ran++
	if ok {
		fmt.Fprintf(k.out, "ok    %s\n", what)
		return
	}
	k.failed++
	fmt.Fprintf(k.out, "FAIL  %s: %s\n", what, why)
}

// post sends one callback body with headers and returns the status (0 and the error's
// text when it could not be sent).
func (k *appChecker) post(ctx context.Context, body []byte, h http.Header) (int, string) {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, k.url, bytes.NewReader(body))
	if err != nil {
		return 0, err.Error()
	}
	req.Header = h
	req.Header.Set("Content-Type", "application/json")
	hc := &http.Client{Timeout: 20 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := hc.Do(req)
	if err != nil {
		return 0, err.Error()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
	return resp.StatusCode, strings.TrimSpace(string(b))
}

func (k *appChecker) body(delivery string, args string) []byte {
	b, _ := json.Marshal(apptools.Callback{Delivery: delivery, App: k.app, Tool: "pa_app_check", Arguments: json.RawMessage(args), Response: "resp_pacheck"})
	return b
}

// refused checks that a callback is answered 401.
func (k *appChecker) refused(ctx context.Context, what string, body []byte, h http.Header) {
	st, text := k.post(ctx, body, h)
	switch {
	case st == 0:
		k.report(false, what, "could not reach your app: "+text)
	case st == http.StatusUnauthorized:
		k.report(true, what, "")
	default:
		k.report(false, what, fmt.Sprintf("answered %d, not 401: your app acted on a callback it cannot trust", st))
	}
}

func (k *appChecker) callbacks(ctx context.Context) {
	now := time.Now()
	k.refused(ctx, "an unsigned callback is refused", k.body(apptools.NewDelivery(), "{}"), http.Header{})

	wrong := http.Header{}
	d := apptools.NewDelivery()
	b := k.body(d, "{}")
	apptools.Sign(wrong, []byte("pa-app-check-not-your-secret"), now, d, b)
	k.refused(ctx, "a callback signed with another secret is refused", b, wrong)

	// A token with every claim right but signed by a key that is not the assistant's.
	priv, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	d = apptools.NewDelivery()
	b = k.body(d, "{}")
	tok, err := issuer.Sign(&jose.JSONWebKey{Key: priv, KeyID: "pa-app-check", Algorithm: "ES256"},
		jwt.Claims{Issuer: k.c.base, Audience: jwt.Audience{k.app}, ID: d, IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute))},
		apptools.CallbackClaims{BodySHA256: issuer.BodyHash(b), URL: k.url})
	if err == nil {
		h := http.Header{}
		h.Set(apptools.HeaderToken, tok)
		k.refused(ctx, "a callback token signed by another key is refused", b, h)
	}

	if len(k.secret) == 0 {
		fmt.Fprintln(k.out, "skip  the genuine, replayed, stale and tampered callbacks (give -secret)")
		return
	}
	d = apptools.NewDelivery()
	b = k.body(d, "{}")
	genuine := http.Header{}
	apptools.Sign(genuine, k.secret, now, d, b)
	st, text := k.post(ctx, b, genuine.Clone())
	switch {
	case st == 0:
		k.report(false, "a genuine callback is accepted", "could not reach your app: "+text)
	case st == http.StatusUnauthorized:
		k.report(false, "a genuine callback is accepted", "answered 401 ("+text+"): check the secret and that you verify the exact body bytes")
	default:
		k.report(true, fmt.Sprintf("a genuine callback is accepted (your app answered %d for the unknown tool pa_app_check)", st), "")
	}
	k.refused(ctx, "the same delivery again (a replay) is refused", b, genuine.Clone())

	d = apptools.NewDelivery()
	b = k.body(d, "{}")
	stale := http.Header{}
	apptools.Sign(stale, k.secret, now.Add(-10*time.Minute), d, b)
	k.refused(ctx, "a callback signed 10 minutes ago is refused", b, stale)

	d = apptools.NewDelivery()
	b = k.body(d, "{}")
	tampered := http.Header{}
	apptools.Sign(tampered, k.secret, now, d, b)
	k.refused(ctx, "a tampered body is refused", k.body(d, `{"room":"hall"}`), tampered)
}

// runtimeKey checks the key against the API: it works, a wrong one gets the documented
// envelope, the public key set is published.
func (k *appChecker) runtimeKey(ctx context.Context, key string) {
	get := func(path, bearer string) (int, []byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(k.c.base, "/")+path, nil)
		if err != nil {
			return 0, nil, err
		}
		if bearer != "" {
			req.Header.Set("Authorization", "Bearer "+bearer)
		}
		resp, err := k.c.http.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
		return resp.StatusCode, b, nil
	}
	st, b, err := get("/api/v1/tools", key)
	switch {
	case err != nil:
		k.report(false, "the runtime key works", fmt.Sprintf("cannot reach the assistant at %s: %v", k.c.base, err))
		return
	case st != 200:
		k.report(false, "the runtime key works", fmt.Sprintf("answered %d: %s", st, strings.TrimSpace(string(b))))
	default:
		var tools struct {
			Tools []apptools.Tool `json:"tools"`
		}
		_ = json.Unmarshal(b, &tools)
		k.report(true, fmt.Sprintf("the runtime key works (%d tool(s) declared)", len(tools.Tools)), "")
		if k.url != "" {
			found := false
			for _, t := range tools.Tools {
				found = found || t.CallbackURL == k.url
			}
			k.report(found, "-callback is a declared tool's callback URL", "no declared tool calls "+k.url+" (declare it with PUT /api/v1/tools)")
		}
	}
	bad := wrongKey(key)
	st, b, err = get("/api/v1/tools", bad)
	var env struct {
		Error struct {
			Code string  `json:"code"`
			Type string  `json:"type"`
			Par  *string `json:"param"`
		} `json:"error"`
	}
	_ = json.Unmarshal(b, &env)
	k.report(err == nil && st == 401 && env.Error.Code == "invalid_api_key" && env.Error.Type == "invalid_request_error",
		"a wrong key gets 401 invalid_api_key in the documented envelope", fmt.Sprintf("answered %d: %s", st, strings.TrimSpace(string(b))))
	st, b, err = get("/api/v1/jwks", "")
	_, perr := issuer.ParseJWKS(b)
	k.report(err == nil && st == 200 && (perr == nil || strings.Contains(string(b), `"keys":[]`)),
		"the assistant's public keys are published (GET /api/v1/jwks)", fmt.Sprintf("answered %d: %s", st, strings.TrimSpace(string(b))))
}

// wrongKey is key with its last four characters changed: still well-formed, never the key
// itself (its secret part is base64url, which may end in "_": a change placed after the
// last "_" once left a key that ended in one unchanged, and the check saw it work).
func wrongKey(key string) string {
	if len(key) < 4 {
		return key + "AAAA"
	}
	tail := "AAAA"
	if strings.HasSuffix(key, tail) {
		tail = "BBBB"
	}
	return key[:len(key)-4] + tail
}
