package harness_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/hermes"
)

// Submit checks Hermes's capabilities first, at most once per CheckTTL: inside it the last
// check is reused; past it Hermes is asked again, and one that no longer reports durable,
// retained run idempotency is refused (ErrIncapable) with nothing submitted, not even the
// session.
func TestSubmitRechecksCapabilitiesAfterTheTTL(t *testing.T) {
	var capsCalls, posts atomic.Int32
	var durable atomic.Bool
	durable.Store(true)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, `{"status":"ok","platform":"hermes-agent","version":"0.22.2.post1"}`)
	})
	mux.HandleFunc("GET /v1/capabilities", func(w http.ResponseWriter, r *http.Request) {
		capsCalls.Add(1)
		fmt.Fprintf(w, `{"platform":"hermes-agent","features":{"run_submission":true,"run_status":true,"run_events_sse":true,"run_stop":true,"runs_idempotency":{"supported":true,"durable":%v,"retention_seconds":86400}}}`, durable.Load())
	})
	mux.HandleFunc("POST /api/sessions", func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(201)
		fmt.Fprint(w, `{"object":"hermes.session","session":{"id":"pa-r1"}}`)
	})
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		posts.Add(1)
		w.WriteHeader(202)
		fmt.Fprint(w, `{"run_id":"run_1","status":"started"}`)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	h := &harness.Hermes{Client: &hermes.Client{BaseURL: s.URL, APIKey: "k-0123456789abcdef"}, CheckTTL: 200 * time.Millisecond}
	ctx := context.Background()
	sub := harness.Submission{Key: "r1", Input: "x", SessionSeed: "pa-r1"}
	for i := 0; i < 3; i++ {
		_, err := h.Submit(ctx, sub)
		require.NoError(t, err)
	}
	require.EqualValues(t, 1, capsCalls.Load(), "one check inside the TTL")
	require.EqualValues(t, 6, posts.Load())

	durable.Store(false) // Hermes restarted with its idempotency store in memory
	_, err := h.Submit(ctx, sub)
	require.NoError(t, err, "the check inside the TTL is reused")
	time.Sleep(250 * time.Millisecond)
	_, err = h.Submit(ctx, sub)
	require.ErrorIs(t, err, harness.ErrIncapable)
	require.ErrorContains(t, err, "durable=false")
	require.EqualValues(t, 2, capsCalls.Load())
	require.EqualValues(t, 8, posts.Load(), "nothing submitted after the refusal")
	ret, err := h.Retention(ctx)
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, ret)
}
