package gateway

import (
	"bufio"
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/modeltest"
	"privateassistant/runconfig"
)

// slowSink records like Redis would, after a delay (a slow round trip).
type slowSink struct{ memSink }

func (s *slowSink) Record(ctx context.Context, u Usage) {
	time.Sleep(150 * time.Millisecond)
	s.memSink.Record(ctx, u)
}

// A request's usage is recorded before the caller receives the answer's end (the usage
// chunk and [DONE] of a stream, the body of an answer): a run that settles as soon as its
// last answer ends finds that answer counted. Also for an answer the policy refused.
func TestUsageIsDurableBeforeTheAnswerEnds(t *testing.T) {
	b := modeltest.New("m")
	b.TokenDelay = time.Millisecond
	b.SetScript("#rm", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{"Cleaning."},
		ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: `{"command":"rm -rf /"}`}}}}})
	up := httptest.NewServer(b)
	t.Cleanup(up.Close)
	sink := &slowSink{}
	g := &Gateway{APIKey: gatewayKey, Usage: sink,
		Routes: func() map[string]Route {
			return map[string]Route{"heavy": {Alias: "heavy", Device: "d", Model: "m", Budget: 65536}}
		},
		Devices: map[string]Fence{"d": openFence{endpoint: up.URL + "/v1"}},
		Tools:   func(context.Context, string) (runconfig.ToolPolicy, error) { return runconfig.ToolPolicy{"web"}, nil }}
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)

	recorded := func(run string) bool {
		for _, u := range sink.All() {
			if u.Run == run {
				return true
			}
		}
		return false
	}
	for _, c := range []struct {
		run, text string
		stream    bool
	}{{"run-plain", "hello", false}, {"run-stream", "hello", true}, {"run-refused", "go #rm", true}, {"run-refused-plain", "go #rm", false}} {
		req, _ := http.NewRequest("POST", gw.URL+"/runs/"+c.run+"/v1/chat/completions", bytes.NewReader(mustJSON(map[string]any{
			"model": "heavy", "stream": c.stream, "messages": []any{map[string]any{"role": "user", "content": c.text}}})))
		req.Header.Set("Authorization", "Bearer "+gatewayKey)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		if !c.stream {
			_, _ = io.ReadAll(resp.Body)
			require.True(t, recorded(c.run), "%s: recorded before the answer was sent", c.run)
		} else {
			sc := bufio.NewScanner(resp.Body)
			ended := false
			for sc.Scan() {
				line := sc.Text()
				if strings.Contains(line, `"usage"`) || strings.Contains(line, "[DONE]") || strings.Contains(line, "Refused") {
					require.True(t, recorded(c.run), "%s: recorded before %q reached the caller", c.run, line)
					ended = true
				}
			}
			require.True(t, ended, c.run)
		}
		resp.Body.Close()
	}
	n := map[string]int{}
	for _, u := range sink.All() {
		n[u.Run]++
	}
	require.Equal(t, map[string]int{"run-plain": 1, "run-stream": 1, "run-refused": 1, "run-refused-plain": 1}, n, "each request recorded once")
}
