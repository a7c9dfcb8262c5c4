package issuer

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Algorithms are the signature algorithms a token may use: ES256 (what the project
// signs with), RS256 and EdDSA (what host apps commonly sign their user tokens with).
// "none" and the HMAC family are never accepted: a verifier holds public keys only.
var Algorithms = []jose.SignatureAlgorithm{jose.ES256, jose.RS256, jose.EdDSA}

// Errors of Verify.
var (
	ErrMalformed  = errors.New("the token is not a signed JWT")
	ErrUnknownKey = errors.New("the token's key (kid) is not in the issuer's key set")
	ErrSignature  = errors.New("the token's signature does not verify")
	ErrClaims     = errors.New("the token's claims are not acceptable")
)

// KeyFunc finds the public key a token's kid names.
type KeyFunc func(ctx context.Context, kid string) (*jose.JSONWebKey, error)

// Expect is what Verify requires of a token beyond its signature.
type Expect struct {
	Issuer   string
	Audience string
	// Leeway is the clock skew allowed on exp, nbf and iat (0: DefaultLeeway).
	Leeway time.Duration
	// MaxLifetime bounds exp − iat (0: no bound): a short-lived token cannot be minted
	// for a day.
	MaxLifetime time.Duration
	Now         time.Time // zero: time.Now()
}

// DefaultLeeway is the clock skew Verify allows by default.
const DefaultLeeway = 60 * time.Second

// Verify checks token's signature with the key its kid names and its registered
// claims: iss and aud exactly, exp present and not passed, nbf and iat not in the future
// (each within the leeway), and the lifetime bound. private, when non-nil, receives the
// payload too (the token's own claims).
func Verify(ctx context.Context, token string, keys KeyFunc, e Expect, private any) (jwt.Claims, error) {
	var c jwt.Claims
	tok, err := jwt.ParseSigned(token, Algorithms)
	if err != nil || len(tok.Headers) != 1 {
		return c, ErrMalformed
	}
	h := tok.Headers[0]
	if h.KeyID == "" {
		return c, fmt.Errorf("%w: it names no kid", ErrUnknownKey)
	}
	k, err := keys(ctx, h.KeyID)
	if err != nil {
		return c, err
	}
	if k == nil {
		return c, ErrUnknownKey
	}
	if k.Algorithm != "" && k.Algorithm != h.Algorithm {
		return c, fmt.Errorf("%w: the key is for %s, the token says %s", ErrSignature, k.Algorithm, h.Algorithm)
	}
	dest := []any{&c}
	if private != nil {
		dest = append(dest, private)
	}
	if err := tok.Claims(k.Key, dest...); err != nil {
		return c, ErrSignature
	}
	leeway := e.Leeway
	if leeway <= 0 {
		leeway = DefaultLeeway
	}
	now := e.Now
	if now.IsZero() {
		now = time.Now()
	}
	if c.Expiry == nil {
		return c, fmt.Errorf("%w: no exp", ErrClaims)
	}
	if e.Issuer == "" || e.Audience == "" {
		return c, fmt.Errorf("%w: the verifier expects no issuer or audience", ErrClaims)
	}
	if err := c.ValidateWithLeeway(jwt.Expected{Issuer: e.Issuer, AnyAudience: jwt.Audience{e.Audience}, Time: now}, leeway); err != nil {
		return c, fmt.Errorf("%w: %w", ErrClaims, err)
	}
	if e.MaxLifetime > 0 {
		start := now
		if c.IssuedAt != nil {
			start = c.IssuedAt.Time()
		}
		if c.Expiry.Time().Sub(start) > e.MaxLifetime+leeway {
			return c, fmt.Errorf("%w: it lives longer than %s", ErrClaims, e.MaxLifetime)
		}
	}
	return c, nil
}

// Sign makes a compact JWT of the claims (each a struct or map, merged) signed with key,
// its kid in the header.
func Sign(key *jose.JSONWebKey, claims ...any) (string, error) {
	alg := jose.SignatureAlgorithm(key.Algorithm)
	if alg == "" {
		alg = jose.ES256
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		return "", err
	}
	b := jwt.Signed(signer)
	for _, c := range claims {
		b = b.Claims(c)
	}
	return b.Serialize()
}

// BodyHash is the body_sha256 claim of a callback: base64url (no padding) of the body's
// SHA-256.
func BodyHash(body []byte) string {
	h := sha256.Sum256(body)
	return base64.RawURLEncoding.EncodeToString(h[:])
}

// StaticKeys is a KeyFunc over a fixed key set.
func StaticKeys(set *jose.JSONWebKeySet) KeyFunc {
	return func(_ context.Context, kid string) (*jose.JSONWebKey, error) {
		ks := set.Key(kid)
		if len(ks) == 0 {
			return nil, ErrUnknownKey
		}
		return &ks[0], nil
	}
}
