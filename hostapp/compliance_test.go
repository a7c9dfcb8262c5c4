package hostapp_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/stacktest"
)

// TestOpenResponsesCompliance re-expresses the Open Responses compliance cases
// (openresponses/openresponses src/lib/compliance-tests.ts: basic-response,
// system-prompt, tool-calling, multi-turn) for background mode: the create answers at
// once and the response is polled until it ends. Cases this server does not serve as
// written are held to the refusal docs/runtime-api.md describes, naming what to do
// instead; their background equivalents pass (multi-turn with previous_response_id;
// tools declared with PUT /api/v1/tools: TestHostAppToolsThroughTheAgent).
func TestOpenResponsesCompliance(t *testing.T) {
	env := stacktest.New(t)
	env.StartAgent(t)
	adminID, adminJWT := env.SignUp(t, "cmp-admin@example.com", "password-cmp-admin")
	env.Label(t, adminID, "admin")
	k := issue(t, env, adminJWT, "appcmp", []string{"chat"}, 1000)
	post := func(body map[string]any) (int, map[string]any) {
		return raw(t, env, k, "carla", "POST", "/api/v1/responses", body)
	}
	until := func(id string) map[string]any {
		var obj map[string]any
		require.Eventually(t, func() bool {
			_, obj = raw(t, env, k, "carla", "GET", "/api/v1/responses/"+id, nil)
			return obj["status"] == "completed" || obj["status"] == "failed"
		}, 30*time.Second, 100*time.Millisecond)
		return obj
	}
	valid := func(obj map[string]any) {
		t.Helper()
		for _, f := range responseRequired {
			require.Contains(t, obj, f)
		}
		require.Equal(t, "completed", obj["status"])
		require.NotEmpty(t, obj["output"], "hasOutput")
	}

	// basic-response
	st, obj := post(map[string]any{"model": "chat", "input": []any{map[string]any{"type": "message", "role": "user", "content": "Say hello in exactly 3 words."}}})
	require.Equal(t, 200, st, "%v", obj)
	first := until(obj["id"].(string))
	valid(first)

	// multi-turn: the history is the chain, named by previous_response_id.
	st, obj = post(map[string]any{"model": "chat", "previous_response_id": first["id"], "input": []any{map[string]any{"type": "message", "role": "user", "content": "What is my name?"}}})
	require.Equal(t, 200, st, "%v", obj)
	valid(until(obj["id"].(string)))
	// As written (history inline), refused with the way to do it.
	st, obj = post(map[string]any{"model": "chat", "input": []any{
		map[string]any{"type": "message", "role": "user", "content": "My name is Alice."},
		map[string]any{"type": "message", "role": "assistant", "content": "Hello Alice!"},
		map[string]any{"type": "message", "role": "user", "content": "What is my name?"}}})
	require.Equal(t, 400, st)
	require.Contains(t, obj["error"].(map[string]any)["message"], "previous_response_id")
	require.Equal(t, "input", obj["error"].(map[string]any)["param"])

	// system-prompt: the role's instructions are the administrator's.
	st, obj = post(map[string]any{"model": "chat", "input": []any{
		map[string]any{"type": "message", "role": "system", "content": "You are a pirate."},
		map[string]any{"type": "message", "role": "user", "content": "Say hello."}}})
	require.Equal(t, 400, st)
	require.Contains(t, obj["error"].(map[string]any)["message"], "administrator")
	require.Equal(t, "input", obj["error"].(map[string]any)["param"])

	// tool-calling: tools are declared once, not per request.
	tools, _ := json.Marshal([]any{map[string]any{"type": "function", "name": "get_weather", "parameters": map[string]any{"type": "object"}}})
	st, obj = post(map[string]any{"model": "chat", "input": "What's the weather like in San Francisco?", "tools": json.RawMessage(tools)})
	require.Equal(t, 400, st)
	require.Equal(t, "tools", obj["error"].(map[string]any)["param"])
	require.Contains(t, obj["error"].(map[string]any)["message"], "PUT /api/v1/tools")
}
