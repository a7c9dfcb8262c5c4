package hermes_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/modeltest"
	"privateassistant/hermes"
	"privateassistant/hermes/hermestest"
)

const key = "test-key-0123456789abcdef0123456789"

type fixture struct {
	model  *modeltest.Backend
	double *hermestest.Server
	srv    *httptest.Server
	c      *hermes.Client
	dir    string
	art    string
}

func setup(t *testing.T, durable bool) *fixture {
	t.Helper()
	m := modeltest.New("demo")
	m.TokenDelay = time.Millisecond
	ms := httptest.NewServer(m)
	t.Cleanup(ms.Close)
	f := &fixture{model: m, art: t.TempDir()}
	if durable {
		f.dir = t.TempDir()
	}
	f.start(t, ms.URL)
	return f
}

func (f *fixture) start(t *testing.T, modelURL string) {
	d, err := hermestest.New(hermestest.Options{APIKey: key, ModelURL: modelURL + "/v1", Model: "demo", DataDir: f.dir,
		ArtifactDir: f.art, Keepalive: 50 * time.Millisecond, SecondSubDelay: 100 * time.Millisecond})
	require.NoError(t, err)
	s := httptest.NewServer(d)
	t.Cleanup(func() { s.Close(); d.Close() })
	f.double, f.srv = d, s
	f.c = &hermes.Client{BaseURL: s.URL, APIKey: key}
}

func collect(t *testing.T, st *hermes.Stream) []hermes.Event {
	t.Helper()
	var out []hermes.Event
	for {
		e, err := st.Next()
		if err != nil {
			require.ErrorIs(t, err, hermes.ErrStreamClosed)
			return out
		}
		out = append(out, e)
	}
}

func TestKeyGuardAuthAndCORS(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"", "short", "changeme", "  fifteen-chars  "} {
		_, err := hermestest.New(hermestest.Options{APIKey: k})
		require.ErrorIs(t, err, hermestest.ErrKeyInvalid, k)
	}
	f := setup(t, true)
	ctx := context.Background()
	h, err := (&hermes.Client{BaseURL: f.srv.URL}).Health(ctx)
	require.NoError(t, err, "health is open")
	require.Equal(t, "ok", h.Status)
	_, err = (&hermes.Client{BaseURL: f.srv.URL, APIKey: "wrong-key-0123456789"}).Capabilities(ctx)
	require.ErrorIs(t, err, hermes.ErrUnauthorized)
	var he *hermes.Error
	require.ErrorAs(t, err, &he)
	require.Equal(t, "gateway_auth_failed", he.Code)

	req, _ := http.NewRequest("GET", f.srv.URL+"/health", nil)
	req.Header.Set("Origin", "https://evil.example")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 403, resp.StatusCode)
	require.Empty(t, b)

	caps, err := f.c.Capabilities(ctx)
	require.NoError(t, err)
	require.NoError(t, caps.CheckRunnable())
	volatile := setup(t, false)
	caps, err = volatile.c.Capabilities(ctx)
	require.NoError(t, err)
	require.ErrorIs(t, caps.CheckRunnable(), hermes.ErrNoDurableIdempotency, "an in-memory store is not durable")
}

func TestRunStreamsAndIsIdempotent(t *testing.T) {
	t.Parallel()
	f := setup(t, true)
	ctx := context.Background()
	se, err := f.c.CreateSession(ctx, hermes.CreateSessionRequest{Title: "conv-1"})
	require.NoError(t, err)
	require.NotEmpty(t, se.ID)
	_, err = f.c.CreateSession(ctx, hermes.CreateSessionRequest{Title: "conv-1"})
	var he *hermes.Error
	require.ErrorAs(t, err, &he)
	require.Equal(t, "invalid_title", he.Code)

	body := hermes.RunRequest{Input: "hello there", SessionID: se.ID, Model: "chat"}
	// Concurrent submissions with one key create one run.
	var wg sync.WaitGroup
	ids := make(chan string, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := f.c.SubmitRun(ctx, "run-key-1", body)
			require.NoError(t, err)
			ids <- a.RunID
		}()
	}
	wg.Wait()
	close(ids)
	var first string
	for id := range ids {
		if first == "" {
			first = id
		}
		require.Equal(t, first, id)
	}
	require.Equal(t, 1, f.double.RunsCreated())
	_, err = f.c.SubmitRun(ctx, "run-key-1", hermes.RunRequest{Input: "changed", SessionID: se.ID})
	require.ErrorAs(t, err, &he)
	require.Equal(t, 409, he.Status)
	require.Equal(t, "idempotency_key_conflict", he.Code)

	st, err := f.c.Events(ctx, first)
	require.NoError(t, err)
	evs := collect(t, st)
	require.NotEmpty(t, evs)
	var text strings.Builder
	for _, e := range evs[:len(evs)-1] {
		require.Equal(t, "message.delta", e.Type)
		text.WriteString(e.String("delta"))
	}
	last := evs[len(evs)-1]
	require.Equal(t, "run.completed", last.Type)
	require.Equal(t, "You said: hello there", last.String("output"))
	require.Equal(t, text.String(), last.String("output"))

	// One consumer: a second subscriber gets 404.
	_, err = f.c.Events(ctx, first)
	require.ErrorIs(t, err, hermes.ErrNotFound)
	rs, err := f.c.GetRun(ctx, first)
	require.NoError(t, err)
	require.Equal(t, "completed", rs.Status)
	require.Equal(t, "You said: hello there", *rs.Output)
	// A replay after completion answers the current status.
	a, err := f.c.SubmitRun(ctx, "run-key-1", body)
	require.NoError(t, err)
	require.True(t, a.Replayed)
	require.Equal(t, "completed", a.Status)
	// The turn is in the session transcript.
	msgs, err := f.c.AllSessionMessages(ctx, se.ID)
	require.NoError(t, err)
	require.Len(t, msgs, 2)
	require.Equal(t, "assistant", msgs[1].Role)
	// Stop on a terminal run answers its status.
	s, err := f.c.StopRun(ctx, first)
	require.NoError(t, err)
	require.Equal(t, "completed", s.Status)
	_, err = f.c.SubmitRun(ctx, "bad key with spaces", body)
	require.Error(t, err)
}

func TestApprovalAndStop(t *testing.T) {
	t.Parallel()
	f := setup(t, true)
	ctx := context.Background()
	a, err := f.c.SubmitRun(ctx, "k-approve", hermes.RunRequest{Input: "please #tool"})
	require.NoError(t, err)
	st, err := f.c.Events(ctx, a.RunID)
	require.NoError(t, err)
	var req hermes.Event
	for {
		e, err := st.Next()
		require.NoError(t, err)
		if e.Type == "approval.request" {
			req = e
			break
		}
	}
	require.Equal(t, "ls -la /tmp", req.String("command"))
	rs, err := f.c.GetRun(ctx, a.RunID)
	require.NoError(t, err)
	require.Equal(t, "waiting_for_approval", rs.Status)
	require.NotEmpty(t, rs.Approval)
	_, err = f.c.Approve(ctx, a.RunID, "stale-id", "once")
	var he *hermes.Error
	require.ErrorAs(t, err, &he)
	require.Equal(t, "approval_not_pending", he.Code)
	res, err := f.c.Approve(ctx, a.RunID, req.String("request_id"), "once")
	require.NoError(t, err)
	require.Equal(t, 1, res.Resolved)
	rest := collect(t, st)
	types := []string{}
	for _, e := range rest {
		types = append(types, e.Type)
	}
	require.Contains(t, types, "approval.responded")
	require.Contains(t, types, "tool.completed")
	require.Equal(t, "run.completed", types[len(types)-1])
	_, err = f.c.Approve(ctx, a.RunID, req.String("request_id"), "once")
	require.ErrorAs(t, err, &he)
	require.Equal(t, "approval_not_active", he.Code)

	// Stop → stopping → cancelled.
	b, err := f.c.SubmitRun(ctx, "k-long", hermes.RunRequest{Input: "#long story"})
	require.NoError(t, err)
	st2, err := f.c.Events(ctx, b.RunID)
	require.NoError(t, err)
	_, err = st2.Next()
	require.NoError(t, err)
	s, err := f.c.StopRun(ctx, b.RunID)
	require.NoError(t, err)
	require.Equal(t, "stopping", s.Status)
	evs := collect(t, st2)
	require.Equal(t, "run.cancelled", evs[len(evs)-1].Type)
	rs, err = f.c.GetRun(ctx, b.RunID)
	require.NoError(t, err)
	require.Equal(t, "cancelled", rs.Status)
}

func TestRestartInterruptsAndDropHandling(t *testing.T) {
	t.Parallel()
	f := setup(t, true)
	ctx := context.Background()
	a, err := f.c.SubmitRun(ctx, "k-restart", hermes.RunRequest{Input: "#long tale"})
	require.NoError(t, err)
	st, err := f.c.Events(ctx, a.RunID)
	require.NoError(t, err)
	_, err = st.Next()
	require.NoError(t, err)
	// Restart the gateway on the same HERMES_HOME.
	f.srv.CloseClientConnections() // the process dies: its connections go with it
	f.double.Close()
	f.srv.Close()
	for err == nil {
		_, err = st.Next()
	}
	require.Error(t, err)
	require.False(t, errors.Is(err, hermes.ErrStreamClosed), "a dropped stream is not a clean close")
	ms := httptest.NewServer(f.model)
	defer ms.Close()
	f.start(t, ms.URL)
	rs, err := f.c.GetRun(ctx, a.RunID)
	require.NoError(t, err)
	require.Equal(t, "interrupted", rs.Status)
	require.Equal(t, "The gateway restarted before this run settled.", *rs.Error)
	again, err := f.c.SubmitRun(ctx, "k-restart", hermes.RunRequest{Input: "#long tale"})
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, "interrupted", again.Status, "never silently re-run")
	_, err = f.c.StopRun(ctx, a.RunID)
	require.NoError(t, err, "a terminal run answers its status")

	// A dropped consumer cannot re-attach.
	b, err := f.c.SubmitRun(ctx, "k-drop", hermes.RunRequest{Input: "#long drop"})
	require.NoError(t, err)
	st, err = f.c.Events(ctx, b.RunID)
	require.NoError(t, err)
	_, err = st.Next()
	require.NoError(t, err)
	f.double.DropStream(b.RunID)
	for {
		if _, err = st.Next(); err != nil {
			break
		}
	}
	require.ErrorIs(t, err, io.ErrUnexpectedEOF)
	_, err = f.c.Events(ctx, b.RunID)
	require.ErrorIs(t, err, hermes.ErrNotFound)
	_, err = f.c.StopRun(ctx, b.RunID)
	require.NoError(t, err)
}

func TestWriteFileLandsInTheWorkspace(t *testing.T) {
	t.Parallel()
	f := setup(t, true)
	ctx := context.Background()
	a, err := f.c.SubmitRun(ctx, "k-art", hermes.RunRequest{Input: "make a #artifact"})
	require.NoError(t, err)
	st, err := f.c.Events(ctx, a.RunID)
	require.NoError(t, err)
	evs := collect(t, st)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type)
	b, err := os.ReadFile(filepath.Join(f.art, a.RunID, "report.md"))
	require.NoError(t, err)
	require.Contains(t, string(b), "# Report")
	// The model really was called twice: the tool result went back to it.
	require.Len(t, f.model.Requests(), 2)
	require.Equal(t, "tool", f.model.Requests()[1].Messages[len(f.model.Requests()[1].Messages)-1].Role)
}
