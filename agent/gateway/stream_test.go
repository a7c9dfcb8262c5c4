package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/runconfig"
)

// rawStreamEnv: a gateway on an open fence in front of serve (an upstream writing its own
// SSE bytes), run "coder" allowed the file toolset; calls collects the reported calls.
type rawStreamEnv struct {
	gw    *httptest.Server
	mu    sync.Mutex
	calls []ToolCall
	sink  *memSink
}

func newRawStreamEnv(t *testing.T, serve http.HandlerFunc) *rawStreamEnv {
	e := &rawStreamEnv{sink: &memSink{}}
	up := httptest.NewServer(serve)
	t.Cleanup(up.Close)
	g := &Gateway{APIKey: gatewayKey,
		Routes: func() map[string]Route {
			return map[string]Route{"heavy": {Alias: "heavy", Device: "d", Model: "m", Budget: 65536}}
		},
		Devices: map[string]Fence{"d": openFence{endpoint: up.URL + "/v1"}},
		Usage:   e.sink,
		Tools: func(context.Context, string) (runconfig.ToolPolicy, error) {
			return runconfig.ToolPolicy{"file"}, nil
		},
		ToolCalls: func(_ context.Context, _ string, calls []ToolCall) {
			e.mu.Lock()
			e.calls = append(e.calls, calls...)
			e.mu.Unlock()
		}}
	e.gw = httptest.NewServer(g)
	t.Cleanup(e.gw.Close)
	return e
}

func (e *rawStreamEnv) open(t *testing.T) *http.Response {
	body := `{"model":"heavy@coder","stream":true,"messages":[{"role":"user","content":"hi"}]}`
	req, err := http.NewRequest("POST", e.gw.URL+"/v1/chat/completions", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+gatewayKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	t.Cleanup(func() { resp.Body.Close() })
	require.Equal(t, 200, resp.StatusCode)
	return resp
}

func sse(w http.ResponseWriter, s string) {
	_, _ = io.WriteString(w, s)
	w.(http.Flusher).Flush()
}

func chunk(delta string, finish string) string {
	f := "null"
	if finish != "" {
		f = `"` + finish + `"`
	}
	return `data: {"id":"c1","object":"chat.completion.chunk","model":"m","choices":[{"index":0,"delta":` + delta + `,"finish_reason":` + f + "}]}\n\n"
}

// An event is flushed to the caller as soon as it is complete, even when part of the next
// one has already arrived: the gateway holds an event back only while the whole next
// event is already in hand.
func TestStreamedEventIsNotHeldBehindAPartialNextEvent(t *testing.T) {
	got := make(chan string, 4)
	release := make(chan struct{})
	e := newRawStreamEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		// The first event and half of the second in one write.
		second := chunk(`{"content":" world"}`, "")
		sse(w, chunk(`{"role":"assistant","content":"hello"}`, "")+second[:20])
		select {
		case <-release:
		case <-r.Context().Done():
			return
		}
		sse(w, second[20:]+chunk(`{}`, "stop")+"data: [DONE]\n\n")
	})
	var once sync.Once
	unblock := func() { once.Do(func() { close(release) }) }
	t.Cleanup(unblock) // before the servers close, when the test fails early
	resp := e.open(t)
	go func() {
		sc := bufio.NewScanner(resp.Body)
		for sc.Scan() {
			if strings.HasPrefix(sc.Text(), "data: ") {
				got <- sc.Text()
			}
		}
		close(got)
	}()
	select {
	case first := <-got:
		require.Contains(t, first, "hello")
	case <-time.After(5 * time.Second):
		t.Fatal("the first event was held back while the second had not fully arrived")
	}
	unblock()
	var rest []string
	for l := range got {
		rest = append(rest, l)
	}
	require.Len(t, rest, 3)
	require.Contains(t, rest[0], "world")
	require.Equal(t, "data: [DONE]", rest[2])
}

// A line longer than the gateway's read buffer (a big tool argument in one chunk) goes
// through whole, its call is reported whole, and a forbidden call in such a line is still
// refused.
func TestLongStreamLinesAreCheckedAndForwardedWhole(t *testing.T) {
	big := strings.Repeat("x", 200<<10)
	call := func(name string) string {
		args, _ := json.Marshal(`{"path":"a.txt","content":"` + big + `"}`)
		return `{"tool_calls":[{"index":0,"id":"call_1","type":"function","function":{"name":"` + name + `","arguments":` + string(args) + `}}]}`
	}
	t.Run("allowed", func(t *testing.T) {
		stream := chunk(call("write_file"), "") + chunk(`{}`, "tool_calls") + "data: [DONE]\n\n"
		e := newRawStreamEnv(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, stream)
		})
		b, err := io.ReadAll(e.open(t).Body)
		require.NoError(t, err)
		require.Equal(t, stream, string(b))
		e.mu.Lock()
		defer e.mu.Unlock()
		require.Len(t, e.calls, 1)
		require.Equal(t, "write_file", e.calls[0].Name)
		require.Contains(t, e.calls[0].Arguments, big)
	})
	t.Run("forbidden", func(t *testing.T) {
		e := newRawStreamEnv(t, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			sse(w, chunk(call("terminal"), "")+chunk(`{}`, "tool_calls")+"data: [DONE]\n\n")
		})
		b, err := io.ReadAll(e.open(t).Body)
		require.NoError(t, err)
		require.NotContains(t, string(b), big)
		require.NotContains(t, string(b), "tool_calls")
		require.Contains(t, string(b), `Refused: the model asked to use the tool \"terminal\"`)
	})
}

// The model and usage are read from the chunks that carry them, the model's change
// included, without decoding every chunk.
func TestStreamUsageAndModelAreRead(t *testing.T) {
	e := newRawStreamEnv(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		sse(w, chunk(`{"content":"a"}`, "")+chunk(`{"content":"b"}`, ""))
		sse(w, strings.Replace(chunk(`{"content":"c"}`, "stop"), `"model":"m"`, `"model": "m-q4"`, 1))
		sse(w, `data: {"id":"c1","object":"chat.completion.chunk","model":"m-q4","choices":[],"usage":{"prompt_tokens":7,"completion_tokens":3}}`+"\n\ndata: [DONE]\n\n")
	})
	_, err := io.ReadAll(e.open(t).Body)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(e.sink.All()) == 1 }, 5*time.Second, 10*time.Millisecond)
	u := e.sink.All()[0]
	require.Equal(t, "m-q4", u.EffectiveModel)
	require.Equal(t, int64(7), u.PromptTokens)
	require.Equal(t, int64(3), u.CompletionTokens)
}

func TestMayFinish(t *testing.T) {
	for chunk, want := range map[string]bool{
		`{"choices":[{"delta":{},"finish_reason":null}]}`:                                    false,
		`{"choices":[{"delta":{},"finish_reason" : null}]}`:                                  false,
		`{"choices":[{"delta":{"content":"finish_reason"}}]}`:                                false,
		`{"choices":[{"delta":{}}]}`:                                                         false,
		`{"choices":[{"delta":{},"finish_reason":"stop"}]}`:                                  true,
		`{"choices":[{"delta":{},"finish_reason": "tool_calls"}]}`:                           true,
		`{"choices":[{"finish_reason":null},{"finish_reason":"length"}]}`:                    true,
		`{"choices":[{"delta":{"content":"\"finish_reason\":\"x\""},"finish_reason":null}]}`: false, // quotes inside a string are escaped
	} {
		require.Equal(t, want, mayFinish([]byte(chunk)), chunk)
		if !want {
			require.False(t, finished([]byte(chunk)), chunk)
		}
	}
}

func TestEncodeBodyKeepsEveryMember(t *testing.T) {
	in := []byte(`{"model":"m","stream":true,"messages":[{"role":"user","content":"a \"quoted\" <text>\u00e9"}],"tools":[ {"type":"function"} ],"weird \"key\"":null}`)
	var body map[string]json.RawMessage
	require.NoError(t, json.Unmarshal(in, &body))
	out := encodeBody(body)
	require.True(t, json.Valid(out), string(out))
	var a, b any
	require.NoError(t, json.Unmarshal(in, &a))
	require.NoError(t, json.Unmarshal(out, &b))
	require.Equal(t, a, b)
	require.True(t, bytes.HasPrefix(out, []byte(`{"messages":`)), "keys in order: %s", out)
}
