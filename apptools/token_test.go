package apptools_test

import (
	"context"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/apptools"
	"privateassistant/issuer"
	"privateassistant/queue/redistest"
)

// TestCallbackTokens: a host app verifies callbacks with the issuer's public keys only,
// and refuses a tampered, replayed, expired, misaddressed or unsigned one.
func TestCallbackTokens(t *testing.T) {
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	ring := &issuer.Keyring{RDB: rdb}
	is := &apptools.Issuer{Name: "https://pa.example", Key: ring.Ensure}
	now := time.Now()
	body := []byte(`{"delivery":"d1","app":"homeauto","tool":"lights","arguments":{"on":true}}`)
	const url = "https://homeauto.example/pa/tools"
	sign := func(app, delivery, u string, b []byte, at time.Time) http.Header {
		tok, err := is.CallbackToken(ctx, app, delivery, u, b, at)
		require.NoError(t, err)
		h := http.Header{}
		h.Set(apptools.HeaderToken, tok)
		return h
	}
	_, err := ring.Ensure(ctx)
	require.NoError(t, err)
	raw, err := issuer.PublicJWKS(ctx, rdb)
	require.NoError(t, err)
	set, err := issuer.ParseJWKS(raw)
	require.NoError(t, err)
	v := &apptools.TokenVerifier{Issuer: "https://pa.example", Audience: "homeauto", Keys: issuer.StaticKeys(set), URL: url,
		Now: func() time.Time { return now }}

	h := sign("homeauto", "d1", url, body, now)
	require.NoError(t, v.Verify(ctx, h, body))
	require.ErrorIs(t, v.Verify(ctx, h, body), apptools.ErrReplayed, "the same delivery again")

	tampered := append([]byte(nil), body...)
	tampered[len(tampered)-3] = 'X'
	require.ErrorIs(t, v.Verify(ctx, sign("homeauto", "d2", url, body, now), tampered), apptools.ErrBadSignature)
	require.ErrorIs(t, v.Verify(ctx, sign("otherapp", "d3", url, body, now), body), apptools.ErrBadSignature, "another app's token")
	require.ErrorIs(t, v.Verify(ctx, sign("homeauto", "d4", "https://elsewhere.example/x", body, now), body), apptools.ErrBadSignature)
	require.ErrorIs(t, v.Verify(ctx, sign("homeauto", "d5", url, body, now.Add(-10*time.Minute)), body), apptools.ErrStale)
	require.ErrorIs(t, v.Verify(ctx, http.Header{}, body), apptools.ErrUnsigned)
	// A forged token (the right claims, another key) marks nothing as seen.
	rdb2 := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb2.Close() })
	other := &issuer.Keyring{RDB: rdb2}
	forged := &apptools.Issuer{Name: "https://pa.example", Key: other.Ensure}
	tok, err := forged.CallbackToken(ctx, "homeauto", "d6", url, body, now)
	require.NoError(t, err)
	fh := http.Header{}
	fh.Set(apptools.HeaderToken, tok)
	require.ErrorIs(t, v.Verify(ctx, fh, body), apptools.ErrBadSignature)
	require.NoError(t, v.Verify(ctx, sign("homeauto", "d6", url, body, now), body), "a forged d6 did not burn the genuine d6")

	// The token's claims say what it is for.
	var parts struct {
		Aud any    `json:"aud"`
		Jti string `json:"jti"`
	}
	c, err := issuer.Verify(ctx, sign("homeauto", "d7", url, body, now).Get(apptools.HeaderToken), issuer.StaticKeys(set),
		issuer.Expect{Issuer: "https://pa.example", Audience: "homeauto", Now: now}, &parts)
	require.NoError(t, err)
	require.Equal(t, "d7", c.ID)
	require.Equal(t, apptools.TokenLifetime, c.Expiry.Time().Sub(c.IssuedAt.Time()))
	require.Equal(t, "d7", parts.Jti)
	require.Equal(t, "homeauto", parts.Aud)
}
