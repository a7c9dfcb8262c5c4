package harness_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/hermes"
)

// A numbered stream (as Hermes 0.22 sends it): Stream resumes after the given seq with
// Last-Event-ID, events carry their seq, a second stream of the run on the same client is
// not opened (ErrNotAttachable, wrapping hermes.ErrAlreadyStreaming), and a 409
// approval_not_pending is ErrApprovalExpired.
func TestHermesStreamResumesAfterSeqAndMapsErrors(t *testing.T) {
	lastIDs := make(chan string, 4)
	release := make(chan struct{})
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/runs/run_n/events", func(w http.ResponseWriter, r *http.Request) {
		lastIDs <- r.Header.Get("Last-Event-ID")
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, ": open\n\n")
		after := -1
		fmt.Sscan(r.Header.Get("Last-Event-ID"), &after)
		for seq := after + 1; seq < 3; seq++ {
			fmt.Fprintf(w, "id: %d\ndata: {\"event\": \"message.delta\", \"run_id\": \"run_n\", \"seq\": %d, \"delta\": \"t%d\"}\n\n", seq, seq, seq)
		}
		w.(http.Flusher).Flush()
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		fmt.Fprint(w, "id: 3\ndata: {\"event\": \"run.completed\", \"run_id\": \"run_n\", \"seq\": 3, \"output\": \"t0t1t2\"}\n\n")
	})
	mux.HandleFunc("POST /v1/runs/run_n/approval", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(409)
		fmt.Fprint(w, `{"error":{"message":"No pending approval","type":"invalid_request_error","param":null,"code":"approval_not_pending"}}`)
	})
	s := httptest.NewServer(mux)
	t.Cleanup(s.Close)
	h := &harness.Hermes{Client: &hermes.Client{BaseURL: s.URL, APIKey: "k-0123456789abcdef"}}
	ctx := context.Background()

	st, err := h.Stream(ctx, "run_n", 1)
	require.NoError(t, err)
	require.Equal(t, "1", <-lastIDs)
	ev, err := st.Next()
	require.NoError(t, err)
	require.Equal(t, harness.Event{Kind: harness.KindDelta, Text: "t2", NativeType: "message.delta", Seq: 2}, ev)

	_, err = h.Stream(ctx, "run_n", -1)
	require.ErrorIs(t, err, harness.ErrNotAttachable, "one consumer per run")
	require.ErrorIs(t, err, hermes.ErrAlreadyStreaming)
	close(release)
	ev, err = st.Next()
	require.NoError(t, err)
	require.Equal(t, harness.KindCompleted, ev.Kind)
	require.EqualValues(t, 3, ev.Seq)
	require.NoError(t, st.Close())

	err = h.Approve(ctx, "run_n", "req", "once")
	require.ErrorIs(t, err, harness.ErrApprovalExpired)
}

// A run.failed with no error text (Hermes 0.22 sends one when the run's client went away,
// e.g. after a SIGKILL of the agent) still says why the run failed.
func TestAFailedRunWithoutErrorTextSaysSomething(t *testing.T) {
	ev := harness.Normalize(hermes.Event{Type: "run.failed", RunID: "r", Fields: map[string]json.RawMessage{"error": json.RawMessage(`""`)}})
	require.Equal(t, harness.KindFailed, ev.Kind)
	require.NotEmpty(t, ev.Error)
	ev = harness.Normalize(hermes.Event{Type: "run.failed", RunID: "r", Fields: map[string]json.RawMessage{"error": json.RawMessage(`"boom"`)}})
	require.Equal(t, "boom", ev.Error)
}
