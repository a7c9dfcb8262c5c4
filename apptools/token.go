package apptools

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"

	"privateassistant/issuer"
)

// HeaderToken carries the callback's JWT, signed by the project's issuer (issuer.Keyring)
// beside the HMAC headers: an app verifies it with the issuer's public keys only
// (GET /api/v1/jwks), so it needs no shared secret.
const HeaderToken = "X-PA-Token"

// TokenLifetime is how long a callback token is valid (its exp − iat).
const TokenLifetime = DefaultWindow

// CallbackClaims are the callback token's own claims beside iss (the issuer), aud (the
// app id), jti (the delivery id), iat and exp.
type CallbackClaims struct {
	// BodySHA256 binds the token to the exact body (issuer.BodyHash).
	BodySHA256 string `json:"body_sha256"`
	// URL is the callback URL the token was made for (a token sent elsewhere is refused
	// by a verifier that knows its own URL).
	URL string `json:"htu"`
}

// Issuer signs callback tokens: the issuer's name (the public origin, PA_ISSUER) and the
// signing key the keyring has now.
type Issuer struct {
	Name string
	Key  func(ctx context.Context) (*jose.JSONWebKey, error)
}

// CallbackToken makes the token of one callback.
func (is *Issuer) CallbackToken(ctx context.Context, app, delivery, url string, body []byte, now time.Time) (string, error) {
	key, err := is.Key(ctx)
	if err != nil {
		return "", err
	}
	return issuer.Sign(key, jwt.Claims{Issuer: is.Name, Audience: jwt.Audience{app}, ID: delivery,
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(TokenLifetime))},
		CallbackClaims{BodySHA256: issuer.BodyHash(body), URL: url})
}

// TokenVerifier checks callback tokens for a host app with the issuer's public keys:
// signature (ES256 by the kid's key), iss, aud = the app, exp within Leeway, a lifetime of
// at most Window, the body's hash, the URL when URL is set, and a delivery id (jti) not
// seen before (kept until the token expires). Safe for concurrent use.
type TokenVerifier struct {
	Issuer   string
	Audience string           // the app id
	Keys     issuer.KeyFunc   // e.g. (&issuer.Fetcher{URL: "<origin>/api/v1/jwks"}).Key
	URL      string           // the callback URL this app serves ("" : not checked)
	Leeway   time.Duration    // clock skew; 0: issuer.DefaultLeeway
	Now      func() time.Time // nil: time.Now

	mu   sync.Mutex
	seen map[string]time.Time
}

func (v *TokenVerifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

// Verify checks one callback. Only one that passes every check marks its delivery seen.
func (v *TokenVerifier) Verify(ctx context.Context, h http.Header, body []byte) error {
	tok := h.Get(HeaderToken)
	if tok == "" {
		return ErrUnsigned
	}
	now := v.now()
	var cc CallbackClaims
	c, err := issuer.Verify(ctx, tok, v.Keys, issuer.Expect{Issuer: v.Issuer, Audience: v.Audience,
		Leeway: v.Leeway, MaxLifetime: TokenLifetime, Now: now}, &cc)
	switch {
	case errors.Is(err, jwt.ErrExpired):
		return fmt.Errorf("%w: %v", ErrStale, err)
	case err != nil:
		return fmt.Errorf("%w: %v", ErrBadSignature, err)
	}
	if cc.BodySHA256 != issuer.BodyHash(body) {
		return fmt.Errorf("%w: the body is not the one signed", ErrBadSignature)
	}
	if v.URL != "" && cc.URL != v.URL {
		return fmt.Errorf("%w: the token was made for another URL", ErrBadSignature)
	}
	if c.ID == "" {
		return fmt.Errorf("%w: no delivery id (jti)", ErrBadSignature)
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.seen == nil {
		v.seen = map[string]time.Time{}
	}
	for id, until := range v.seen {
		if now.After(until) {
			delete(v.seen, id)
		}
	}
	if _, dup := v.seen[c.ID]; dup {
		return ErrReplayed
	}
	leeway := v.Leeway
	if leeway <= 0 {
		leeway = issuer.DefaultLeeway
	}
	v.seen[c.ID] = c.Expiry.Time().Add(leeway) // after that, exp refuses it
	return nil
}

// Middleware verifies every request with Verify before next sees it (401 otherwise).
func (v *TokenVerifier) Middleware(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, MaxBody+1))
		if err != nil || len(body) > MaxBody {
			http.Error(w, `{"error":"body unreadable or too large"}`, http.StatusRequestEntityTooLarge)
			return
		}
		if err := v.Verify(r.Context(), r.Header, body); err != nil {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusUnauthorized)
			fmt.Fprintf(w, `{"error":%q}`, err.Error())
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
		next.ServeHTTP(w, r)
	})
}
