package issuer_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"privateassistant/issuer"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func publicSet(t *testing.T, raw []byte) *jose.JSONWebKeySet {
	t.Helper()
	set, err := issuer.ParseJWKS(raw)
	require.NoError(t, err)
	return set
}

func TestKeyringRotatesWithOverlap(t *testing.T) {
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	k := &issuer.Keyring{RDB: rdb, Rotate: 24 * time.Hour, Overlap: time.Hour, Now: func() time.Time { return now }}

	_, err := issuer.PublicJWKS(ctx, rdb)
	require.ErrorIs(t, err, redis.Nil, "nothing is published before a key exists")
	k1, err := k.Ensure(ctx)
	require.NoError(t, err)
	require.Equal(t, "ES256", k1.Algorithm)
	require.False(t, k1.IsPublic(), "the signer holds the private key")
	again, err := k.Ensure(ctx)
	require.NoError(t, err)
	require.Equal(t, k1.KeyID, again.KeyID, "no rotation before it is due")

	raw, err := issuer.PublicJWKS(ctx, rdb)
	require.NoError(t, err)
	require.NotContains(t, string(raw), `"d"`, "the published set has no private part")
	require.Len(t, publicSet(t, raw).Keys, 1)

	tok, err := issuer.Sign(k1, jwt.Claims{Issuer: "https://pa.example", Audience: jwt.Audience{"app"},
		IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute))})
	require.NoError(t, err)

	// Due: a new key signs; the old one stays published for the overlap, so a token it
	// signed just before still verifies.
	now = now.Add(24 * time.Hour)
	k2, err := k.Ensure(ctx)
	require.NoError(t, err)
	require.NotEqual(t, k1.KeyID, k2.KeyID)
	raw, _ = issuer.PublicJWKS(ctx, rdb)
	set := publicSet(t, raw)
	require.Len(t, set.Keys, 2)
	require.Equal(t, k2.KeyID, set.Keys[0].KeyID, "newest first")
	_, err = issuer.Verify(ctx, tok, issuer.StaticKeys(set), issuer.Expect{Issuer: "https://pa.example", Audience: "app",
		Now: now.Add(-24*time.Hour + time.Minute)}, nil)
	require.NoError(t, err)

	// Past the overlap the old key is gone from the set and from the hash.
	now = now.Add(time.Hour)
	_, err = k.Ensure(ctx)
	require.NoError(t, err)
	raw, _ = issuer.PublicJWKS(ctx, rdb)
	set = publicSet(t, raw)
	require.Len(t, set.Keys, 1)
	require.Equal(t, k2.KeyID, set.Keys[0].KeyID)
	n, err := rdb.HLen(ctx, queue.IssuerKeysKey).Result()
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

func TestConcurrentEnsureMakesOneKey(t *testing.T) {
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	var wg sync.WaitGroup
	kids := make([]string, 8)
	for i := range kids {
		wg.Add(1)
		go func() {
			defer wg.Done()
			k, err := (&issuer.Keyring{RDB: rdb}).Ensure(ctx)
			if err == nil {
				kids[i] = k.KeyID
			}
		}()
	}
	wg.Wait()
	for _, kid := range kids {
		require.Equal(t, kids[0], kid, "every agent signs with the same key")
	}
	n, _ := rdb.HLen(ctx, queue.IssuerKeysKey).Result()
	require.EqualValues(t, 1, n)
}

// keyOf makes a private JWK of the algorithm.
func keyOf(t *testing.T, alg jose.SignatureAlgorithm, kid string) *jose.JSONWebKey {
	t.Helper()
	var k any
	switch alg {
	case jose.ES256:
		k, _ = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.RS256:
		k, _ = rsa.GenerateKey(rand.Reader, 2048)
	case jose.EdDSA:
		_, k, _ = ed25519.GenerateKey(rand.Reader)
	}
	return &jose.JSONWebKey{Key: k, KeyID: kid, Algorithm: string(alg), Use: "sig"}
}

func TestVerifyRefuses(t *testing.T) {
	ctx := context.Background()
	now := time.Now()
	es, rs, ed, other := keyOf(t, jose.ES256, "es"), keyOf(t, jose.RS256, "rs"), keyOf(t, jose.EdDSA, "ed"), keyOf(t, jose.ES256, "es")
	set := &jose.JSONWebKeySet{Keys: []jose.JSONWebKey{es.Public(), rs.Public(), ed.Public()}}
	keys := issuer.StaticKeys(set)
	exp := issuer.Expect{Issuer: "iss", Audience: "aud", MaxLifetime: 10 * time.Minute, Now: now}
	claims := func(mod func(*jwt.Claims)) jwt.Claims {
		c := jwt.Claims{Issuer: "iss", Audience: jwt.Audience{"aud"}, Subject: "u1",
			IssuedAt: jwt.NewNumericDate(now), Expiry: jwt.NewNumericDate(now.Add(5 * time.Minute))}
		if mod != nil {
			mod(&c)
		}
		return c
	}
	sign := func(k *jose.JSONWebKey, c jwt.Claims) string {
		s, err := issuer.Sign(k, c)
		require.NoError(t, err)
		return s
	}
	for _, k := range []*jose.JSONWebKey{es, rs, ed} {
		c, err := issuer.Verify(ctx, sign(k, claims(nil)), keys, exp, nil)
		require.NoError(t, err, k.Algorithm)
		require.Equal(t, "u1", c.Subject)
	}
	noKid := *es
	noKid.KeyID = ""
	for name, tc := range map[string]struct {
		tok  string
		want error
	}{
		"another key, same kid": {sign(other, claims(nil)), issuer.ErrSignature},
		"unknown kid":           {sign(keyOf(t, jose.ES256, "zz"), claims(nil)), issuer.ErrUnknownKey},
		"no kid":                {sign(&noKid, claims(nil)), issuer.ErrUnknownKey},
		"wrong issuer":          {sign(es, claims(func(c *jwt.Claims) { c.Issuer = "evil" })), issuer.ErrClaims},
		"wrong audience":        {sign(es, claims(func(c *jwt.Claims) { c.Audience = jwt.Audience{"other"} })), issuer.ErrClaims},
		"expired":               {sign(es, claims(func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(now.Add(-2 * time.Minute)) })), jwt.ErrExpired},
		"no exp":                {sign(es, claims(func(c *jwt.Claims) { c.Expiry = nil })), issuer.ErrClaims},
		"issued in the future":  {sign(es, claims(func(c *jwt.Claims) { c.IssuedAt = jwt.NewNumericDate(now.Add(5 * time.Minute)) })), issuer.ErrClaims},
		"too long-lived":        {sign(es, claims(func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(now.Add(2 * time.Hour)) })), issuer.ErrClaims},
		"garbage":               {"a.b.c", issuer.ErrMalformed},
		"alg none":              {"eyJhbGciOiJub25lIiwia2lkIjoiZXMifQ.eyJpc3MiOiJpc3MifQ.", issuer.ErrMalformed},
	} {
		_, err := issuer.Verify(ctx, tc.tok, keys, exp, nil)
		require.ErrorIs(t, err, tc.want, name)
	}
	// The RS key's kid with an ES256 token: the key's algorithm must match.
	rsKid := *es
	rsKid.KeyID = "rs"
	_, err := issuer.Verify(ctx, sign(&rsKid, claims(nil)), keys, exp, nil)
	require.ErrorIs(t, err, issuer.ErrSignature)
	// Within the leeway a slightly expired token passes; past it, not.
	skewed := sign(es, claims(func(c *jwt.Claims) { c.Expiry = jwt.NewNumericDate(now.Add(-30 * time.Second)) }))
	_, err = issuer.Verify(ctx, skewed, keys, exp, nil)
	require.NoError(t, err)
}

func TestFetcherFollowsRotation(t *testing.T) {
	var mu sync.Mutex
	k1, k2 := keyOf(t, jose.ES256, "k1"), keyOf(t, jose.ES256, "k2")
	served := []jose.JSONWebKey{k1.Public()}
	var fetches atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fetches.Add(1)
		mu.Lock()
		defer mu.Unlock()
		_ = json.NewEncoder(w).Encode(jose.JSONWebKeySet{Keys: served})
	}))
	defer srv.Close()
	now := time.Now()
	f := &issuer.Fetcher{URL: srv.URL, Now: func() time.Time { return now }}
	ctx := context.Background()
	got, err := f.Key(ctx, "k1")
	require.NoError(t, err)
	require.Equal(t, "k1", got.KeyID)
	_, err = f.Key(ctx, "k1")
	require.NoError(t, err)
	require.EqualValues(t, 1, fetches.Load(), "a known kid is answered from the copy")

	// Made-up kids cost at most one fetch per MinRefetch.
	for i := 0; i < 20; i++ {
		_, err = f.Key(ctx, "nope")
		require.ErrorIs(t, err, issuer.ErrUnknownKey)
	}
	require.EqualValues(t, 1, fetches.Load(), "the set was read less than MinRefetch ago")

	// The source rotates: after MinRefetch the new kid is found.
	mu.Lock()
	served = []jose.JSONWebKey{k2.Public(), k1.Public()}
	mu.Unlock()
	now = now.Add(31 * time.Second)
	got, err = f.Key(ctx, "k2")
	require.NoError(t, err)
	require.Equal(t, "k2", got.KeyID)
	require.EqualValues(t, 2, fetches.Load())

	// A private key in a published set is refused.
	_, err = issuer.ParseJWKS([]byte(`{"keys":[` + mustJSON(t, k1) + `]}`))
	require.True(t, errors.Is(err, issuer.ErrFetch))
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
