package modeltest

import (
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func post(t *testing.T, b *Backend, body any) map[string]any {
	t.Helper()
	raw, err := json.Marshal(body)
	require.NoError(t, err)
	rec := httptest.NewRecorder()
	b.ServeHTTP(rec, httptest.NewRequest("POST", "/v1/chat/completions", strings.NewReader(string(raw))))
	require.Equal(t, 200, rec.Code, rec.Body.String())
	var out map[string]any
	require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &out))
	return out
}

func message(out map[string]any) map[string]any {
	return out["choices"].([]any)[0].(map[string]any)["message"].(map[string]any)
}

// Hermes's title generator (agent/title_generator.py) sends the opening message with its
// own system prompt and a session_title json_schema. The opening message may carry a
// script marker: the title call must get a title, never the script's tool call.
func TestTitleCallIsAnsweredOutsideTheScripts(t *testing.T) {
	b := New("m")
	b.TokenDelay = 0
	for _, req := range []map[string]any{
		{"messages": []map[string]any{
			{"role": "system", "content": "You name chat sessions. Given the user's opening message, write a title."},
			{"role": "user", "content": "please #tool now"}}},
		{"messages": []map[string]any{{"role": "user", "content": "please #tool now"}},
			"response_format": map[string]any{"type": "json_schema", "json_schema": map[string]any{"name": "session_title"}}},
	} {
		msg := message(post(t, b, req))
		require.Nil(t, msg["tool_calls"])
		var title struct{ Title string }
		require.NoError(t, json.Unmarshal([]byte(msg["content"].(string)), &title))
		require.Equal(t, "Scripted session", title.Title)
	}
	require.EqualValues(t, 2, b.Calls())
	require.EqualValues(t, 0, b.MainCalls(), "auxiliary calls are not conversation turns")
	for _, r := range b.Requests() {
		require.Equal(t, AuxTitle, r.Aux)
	}

	// The same opening message as a conversation turn (with tools) plays the script.
	msg := message(post(t, b, map[string]any{
		"messages": []map[string]any{{"role": "user", "content": "please #tool now"}},
		"tools":    []map[string]any{{"type": "function", "function": map[string]any{"name": "terminal"}}}}))
	require.Len(t, msg["tool_calls"], 1)
	require.EqualValues(t, 1, b.MainCalls())
}

func TestToolCallIDsAreUnique(t *testing.T) {
	b := New("m")
	b.TokenDelay = 0
	seen := map[string]bool{}
	for i := 0; i < 3; i++ {
		msg := message(post(t, b, map[string]any{"messages": []map[string]any{{"role": "user", "content": "#artifact"}}}))
		id := msg["tool_calls"].([]any)[0].(map[string]any)["id"].(string)
		require.False(t, seen[id], "tool-call id %s repeated", id)
		seen[id] = true
	}
}

func TestModelListIsCounted(t *testing.T) {
	b := New("m")
	for i := 0; i < 2; i++ {
		rec := httptest.NewRecorder()
		b.ServeHTTP(rec, httptest.NewRequest("GET", "/v1/models", nil))
		require.Equal(t, 200, rec.Code)
		require.Contains(t, rec.Body.String(), `"context_length":131072`)
	}
	require.EqualValues(t, 2, b.ModelListCalls())
	require.Zero(t, b.Calls())
}

func TestTokenTextIsMadeAtSendTime(t *testing.T) {
	b := New("m")
	b.TokenDelay = 0
	n := 0
	b.SetScript("#stamp", Script{Turns: []Turn{{Tokens: make([]string, 3), TokenText: func(i int) string {
		n++
		return fmt.Sprintf("<%d>", i)
	}}}})
	msg := message(post(t, b, map[string]any{"messages": []map[string]any{{"role": "user", "content": "#stamp"}}}))
	require.Equal(t, "<0><1><2>", msg["content"])
	require.Equal(t, 3, n)
}

// Hermes's background review replays the conversation (markers included) and asks, as the
// last user message, to review it: it gets "Nothing to save.", not a script turn.
func TestReviewCallIsAnsweredOutsideTheScripts(t *testing.T) {
	b := New("m")
	b.TokenDelay = 0
	msg := message(post(t, b, map[string]any{
		"messages": []map[string]any{
			{"role": "user", "content": "please #tool now"},
			{"role": "assistant", "content": "The directory listing is done."},
			{"role": "user", "content": "Review the conversation above and consider saving to memory if appropriate."}},
		"tools": []map[string]any{{"type": "function", "function": map[string]any{"name": "memory"}}}}))
	require.Nil(t, msg["tool_calls"])
	require.Equal(t, "Nothing to save.", msg["content"])
	require.Equal(t, AuxReview, b.Requests()[0].Aux)
	require.Zero(t, b.MainCalls())
}
