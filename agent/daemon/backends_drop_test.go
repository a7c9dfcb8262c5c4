package daemon_test

import (
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/stacktest"
)

// dropProxy stands between the agent and a real Hermes (127.0.0.1, closed at test end).
// It passes every request through, except that Drop(run) cuts the run's open event
// streams (GET /v1/runs/{run}/events) mid-answer and then refuses every later request
// for that stream (the client's Last-Event-ID resume) with 502: the agent can only
// reconcile the run from GET /v1/runs/{run} and the session's messages.
type dropProxy struct {
	srv *httptest.Server

	mu      sync.Mutex
	open    map[string][]*http.Response // run id → its event streams passing through
	dropped map[string]bool
	refused int
}

func newDropProxy(t *testing.T, upstream string) *dropProxy {
	t.Helper()
	u, err := url.Parse(upstream)
	require.NoError(t, err)
	p := &dropProxy{open: map[string][]*http.Response{}, dropped: map[string]bool{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.FlushInterval = -1
	rp.ModifyResponse = func(res *http.Response) error {
		if run, ok := eventsRun(res.Request); ok {
			p.mu.Lock()
			p.open[run] = append(p.open[run], res)
			p.mu.Unlock()
		}
		return nil
	}
	p.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if run, ok := eventsRun(r); ok {
			p.mu.Lock()
			refuse := p.dropped[run]
			if refuse {
				p.refused++
			}
			p.mu.Unlock()
			if refuse {
				http.Error(w, "stream lost", http.StatusBadGateway)
				return
			}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(p.srv.Close)
	return p
}

// eventsRun reports the run id of a GET /v1/runs/{id}/events request.
func eventsRun(r *http.Request) (string, bool) {
	rest, ok := strings.CutPrefix(r.URL.Path, "/v1/runs/")
	if !ok || r.Method != http.MethodGet {
		return "", false
	}
	run, ok := strings.CutSuffix(rest, "/events")
	return run, ok && run != "" && !strings.Contains(run, "/")
}

// Drop cuts the run's open event streams (the upstream body is closed under the proxy's
// copy, which aborts the agent's connection) and refuses the resumes that follow.
func (p *dropProxy) Drop(run string) {
	p.mu.Lock()
	p.dropped[run] = true
	open := p.open[run]
	p.open[run] = nil
	p.mu.Unlock()
	for _, res := range open {
		_ = res.Body.Close()
	}
}

func (p *dropProxy) Refused() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.refused
}

// A run's event stream is lost mid-answer and cannot be resumed: the run still ends with
// the full answer exactly once, reconciled from the native run status and the session's
// messages, and is never submitted again. On the double, DropStream loses the connection;
// on real Hermes a proxy cuts the stream and refuses the Last-Event-ID resumes.
func TestBackendsDroppedStreamIsReconciled(t *testing.T) {
	t.Parallel()
	const marker = "#slowish-drop"
	answer := strings.Fields("a b c d e f g h i j k l m n o p")
	body := func(t *testing.T, env *stacktest.Env, drop func(nativeRun string)) {
		env.Model.SetScript(marker, modeltest.Script{Turns: []modeltest.Turn{{Tokens: answer, TokenDelay: 60 * time.Millisecond}}})
		env.StartAgent(t)
		owner, jwt := env.SignUp(t, "both-drop@example.com", "password-both-drop")
		conv := env.Conversation(t, jwt)
		a := env.Admit(t, jwt, conv, "d1", "a "+marker+" answer", "")
		dropped := false
		evs, status := env.Follow(t, jwt, a.RunID, 90*time.Second, func(ev queue.Event) bool {
			if ev.Type == queue.EventMessageDelta && !dropped {
				dropped = true
				drop(*binding(t, env, a.RunID).NativeRunID)
			}
			return true
		})
		require.True(t, dropped, "the stream was cut mid-answer")
		require.Equal(t, "completed", status)
		require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
		ans := answers(t, env, owner, a.RunID)
		require.Len(t, ans, 1, "the answer is kept exactly once")
		require.Equal(t, strings.Join(answer, ""), *ans[0].Text, "the final answer comes from the native status, not the lost deltas")
		require.Equal(t, 1, turnCalls(env, marker), "one native run: never resubmitted")
	}

	t.Run(stacktest.HermesDouble, func(t *testing.T) {
		t.Parallel()
		env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes", Hermes: stacktest.HermesDouble})
		body(t, env, func(run string) { env.Hermes.DropStream(run) })
		require.Equal(t, 1, env.Hermes.RunsCreated())
	})
	t.Run(stacktest.HermesReal, func(t *testing.T) {
		t.Parallel()
		srv, model := sharedRealHermes(t)
		proxy := newDropProxy(t, srv.URL)
		env := stacktest.New(t, stacktest.Options{
			ChatHarness: "hermes",
			External:    &stacktest.External{URL: proxy.srv.URL, Key: srv.Key, WorkDir: srv.WorkDir},
			Model:       model,
		})
		env.Settings.HermesWorkDir = env.WorkDir
		body(t, env, proxy.Drop)
		require.Positive(t, proxy.Refused(), "the client tried to resume the lost stream and was refused")
	})
}
