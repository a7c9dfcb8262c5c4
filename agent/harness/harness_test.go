package harness_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/hermes"
)

// A Hermes that misbehaves: malformed frames, unknown events, 5xx answers.
func fakeHermes(t *testing.T) *httptest.Server {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/runs/run_bad/events", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"event\": \"message.delta\", \"run_id\": \"run_bad\", \"timestamp\": 1, \"delta\": \"a\"}\n\n")
		fmt.Fprint(w, "data: {not json}\n\n")
		fmt.Fprint(w, "data: {\"event\": \"subagent.start\", \"run_id\": \"run_bad\", \"timestamp\": 2, \"goal\": \"x\"}\n\n")
		fmt.Fprint(w, "data: {\"event\": \"message.delta\", \"run_id\": \"run_bad\", \"timestamp\": 3, \"delta\": \"b\"}\n\n")
		fmt.Fprint(w, "data: {\"event\": \"run.completed\", \"run_id\": \"run_bad\", \"timestamp\": 4, \"output\": \"ab\", \"usage\": {\"input_tokens\": 1, \"output_tokens\": 2, \"total_tokens\": 3}}\n\n")
		fmt.Fprint(w, ": stream closed\n\n")
	})
	mux.HandleFunc("POST /v1/runs", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(503)
		fmt.Fprint(w, `{"error":{"message":"Gateway is draining","type":"server_error","param":null,"code":"gateway_draining"}}`)
	})
	mux.HandleFunc("GET /v1/runs/{id}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(404)
		fmt.Fprint(w, `{"error":{"message":"Run not found: x","type":"invalid_request_error","param":null,"code":"run_not_found"}}`)
	})
	serveCapable(mux)
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	return s
}

// serveCapable adds /health and /v1/capabilities of a Hermes with durable run
// idempotency (Submit checks them first).
func serveCapable(mux *http.ServeMux) {
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"status":"ok","platform":"hermes-agent","version":"0.22.2.post1"}`)
	})
	mux.HandleFunc("GET /v1/capabilities", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprint(w, `{"object":"hermes.api_server.capabilities","platform":"hermes-agent","features":{"run_submission":true,"run_status":true,"run_events_sse":true,"run_stop":true,"runs_idempotency":{"supported":true,"durable":true,"retention_seconds":86400}}}`)
	})
}

func TestHermesHarnessSurvivesBadFramesAndClassifiesErrors(t *testing.T) {
	s := fakeHermes(t)
	h := &harness.Hermes{Client: &hermes.Client{BaseURL: s.URL, APIKey: "k-0123456789abcdef"}}
	ctx := context.Background()
	st, err := h.Stream(ctx, "run_bad", -1)
	require.NoError(t, err)
	var kinds []harness.EventKind
	var malformed int
	for {
		ev, err := st.Next()
		if errors.Is(err, harness.ErrMalformed) {
			malformed++
			continue
		}
		if err != nil {
			require.ErrorIs(t, err, harness.ErrStreamEnded)
			break
		}
		kinds = append(kinds, ev.Kind)
		if ev.Kind == harness.KindCompleted {
			require.Equal(t, "ab", ev.Text)
			require.Equal(t, 3, ev.Usage.TotalTokens)
		}
	}
	require.Equal(t, 1, malformed, "a malformed frame is reported and skipped")
	require.Equal(t, []harness.EventKind{harness.KindDelta, harness.KindUnknown, harness.KindDelta, harness.KindCompleted}, kinds)

	_, err = h.Submit(ctx, harness.Submission{Key: "r1", Input: "x", SessionID: "s"})
	require.ErrorIs(t, err, harness.ErrUnavailable, "5xx is transient: retried")
	_, err = h.Status(ctx, "gone")
	require.ErrorIs(t, err, harness.ErrNotFound)
	_, err = h.Stream(ctx, "gone", -1)
	require.ErrorIs(t, err, harness.ErrNotAttachable)
}
