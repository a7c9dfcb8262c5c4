package httpapi_test

import (
	"context"
	"crypto/sha256"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"privateassistant/functions/httpapi"
)

// BenchmarkVerify measures what a short JWT cache costs on the warm path. "hit" is a
// cached verification (what most requests pay), "miss" one that asks Appwrite (a local
// stand-in answering GET /v1/account at once: the floor of a real round trip), and
// "floor" the token hash a hit needs anyway. With a TTL of 5 s a client making one request
// a second pays a miss every fifth request instead of every thirtieth.
func BenchmarkVerify(b *testing.B) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"$id":"u1","email":"u@example.com","name":"u","labels":["member"]}`))
	}))
	defer srv.Close()
	tok := "Bearer header.payload.signature-0123456789abcdef"
	ctx := context.Background()
	b.Run("floor", func(b *testing.B) {
		for b.Loop() {
			_ = sha256.Sum256([]byte(tok))
		}
	})
	b.Run("hit", func(b *testing.B) {
		a := &httpapi.Authenticator{Endpoint: srv.URL, Project: "p", TTL: httpapi.MaxJWTCacheTTL}
		if _, err := a.Verify(ctx, tok); err != nil {
			b.Fatal(err)
		}
		for b.Loop() {
			if _, err := a.Verify(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("miss", func(b *testing.B) {
		clk := time.Now()
		a := &httpapi.Authenticator{Endpoint: srv.URL, Project: "p", TTL: httpapi.MaxJWTCacheTTL, Now: func() time.Time { return clk }}
		for b.Loop() {
			clk = clk.Add(httpapi.MaxJWTCacheTTL) // every call is past the TTL
			if _, err := a.Verify(ctx, tok); err != nil {
				b.Fatal(err)
			}
		}
	})
}
