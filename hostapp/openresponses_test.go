package hostapp_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/openai/openai-go/v3/shared"
	"github.com/stretchr/testify/require"

	"privateassistant/stacktest"
)

// responseRequired are the fields the Open Responses specification requires of every
// response object: openresponses/openresponses, schema/components/schemas/
// ResponseResource.json, "required" (commit 3452c01).
var responseRequired = []string{"id", "object", "created_at", "completed_at", "status", "incomplete_details",
	"model", "previous_response_id", "instructions", "output", "error", "tools", "tool_choice", "truncation",
	"parallel_tool_calls", "text", "top_p", "presence_penalty", "frequency_penalty", "top_logprobs", "temperature",
	"reasoning", "user", "usage", "max_output_tokens", "max_tool_calls", "store", "background", "service_tier",
	"metadata", "safety_identifier", "prompt_cache_key"}

// raw reads a runtime API answer as a generic object.
func raw(t *testing.T, env *stacktest.Env, k key, user, method, path string, body any) (int, map[string]any) {
	t.Helper()
	res := env.Do(t, method, path, "", body, "Authorization", "Bearer "+k.Secret, "X-App-User", user)
	var m map[string]any
	require.NoError(t, json.Unmarshal(res.Body, &m), string(res.Body))
	return res.Status, m
}

// TestOpenResponsesObjects holds the runtime API to the Open Responses object shapes and
// to what OpenAI's clients read: every required field on every response, completed_at
// once completed, metadata kept, input items listed, cancel answering the outcome, delete,
// errors with type and param, and a streamed retrieve refused instead of read as empty.
func TestOpenResponsesObjects(t *testing.T) {
	env := stacktest.New(t)
	env.StartAgent(t)
	adminID, adminJWT := env.SignUp(t, "or-admin@example.com", "password-or-admin")
	env.Label(t, adminID, "admin")
	k := issue(t, env, adminJWT, "appor", []string{"chat"}, 1000)
	c := client(env, k, "olivia")
	ctx := context.Background()

	// Metadata is kept and echoed; a first response names no previous one (null, present).
	r1, err := c.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", Background: openai.Bool(true),
		Input:    responses.ResponseNewParamsInputUnion{OfString: openai.String("hello objects")},
		Metadata: shared.Metadata{"ticket": "T-42", "room": "kitchen"}})
	require.NoError(t, err)
	require.Equal(t, map[string]string{"ticket": "T-42", "room": "kitchen"}, map[string]string(r1.Metadata))
	st, obj := raw(t, env, k, "olivia", "GET", "/api/v1/responses/"+r1.ID, nil)
	require.Equal(t, 200, st)
	for _, f := range responseRequired {
		require.Contains(t, obj, f, "a queued response lacks %q", f)
	}
	require.Nil(t, obj["previous_response_id"])
	require.Nil(t, obj["completed_at"], "not completed yet")

	done := poll(t, c, r1.ID, responses.ResponseStatusCompleted)
	require.Equal(t, "You said: hello objects", done.OutputText())
	require.GreaterOrEqual(t, done.CompletedAt, done.CreatedAt)
	require.Positive(t, done.CompletedAt, "completed_at once completed")
	require.Equal(t, "T-42", done.Metadata["ticket"])
	st, obj = raw(t, env, k, "olivia", "GET", "/api/v1/responses/"+r1.ID, nil)
	require.Equal(t, 200, st)
	for _, f := range responseRequired {
		require.Contains(t, obj, f, "a completed response lacks %q", f)
	}
	usage := obj["usage"].(map[string]any)
	require.Contains(t, usage["input_tokens_details"], "cache_write_tokens")
	require.Contains(t, usage["input_tokens_details"], "cached_tokens")

	// Input items: the user message the response answered.
	r2 := create(t, c, "chat", "and the second turn", r1.ID)
	items, err := c.Responses.InputItems.List(ctx, r2.ID, responses.InputItemListParams{})
	require.NoError(t, err)
	require.Len(t, items.Data, 1)
	require.Equal(t, "message", items.Data[0].Type)
	require.Equal(t, "user", string(items.Data[0].Role))
	require.Equal(t, "and the second turn", items.Data[0].Content.OfInputItemContentList[0].Text)
	poll(t, c, r2.ID, responses.ResponseStatusCompleted)

	// Errors carry OpenAI's type and param; bad metadata names itself.
	st, obj = raw(t, env, k, "olivia", "POST", "/api/v1/responses", map[string]any{"model": "chat", "input": "x", "metadata": map[string]any{"n": 1}})
	require.Equal(t, 400, st)
	e := obj["error"].(map[string]any)
	require.Equal(t, "invalid_request_error", e["type"])
	require.Equal(t, "metadata", e["param"])
	many := map[string]string{}
	for i := 0; i < 17; i++ {
		many[string(rune('a'+i))] = "v"
	}
	st, obj = raw(t, env, k, "olivia", "POST", "/api/v1/responses", map[string]any{"model": "chat", "input": "x", "metadata": many})
	require.Equal(t, 400, st)
	require.Equal(t, "metadata", obj["error"].(map[string]any)["param"])
	st, obj = raw(t, env, k, "olivia", "GET", "/api/v1/responses/resp_rmissing0", nil)
	require.Equal(t, 404, st)
	e = obj["error"].(map[string]any)
	require.Equal(t, "invalid_request_error", e["type"])
	require.Contains(t, e, "param")
	require.Nil(t, e["param"])

	// retrieve(id, stream=True) is refused plainly, not answered with JSON.
	st, obj = raw(t, env, k, "olivia", "GET", "/api/v1/responses/"+r1.ID+"?stream=true", nil)
	require.Equal(t, 400, st)
	require.Equal(t, "stream", obj["error"].(map[string]any)["param"])

	// Cancel of a running response answers its outcome: it waits, up to the long-poll
	// bound (2 s here), for the agent to stop the run. Only a run that has not stopped by
	// then answers in_progress (a loaded machine), and then it reaches cancelled.
	long := create(t, c, "chat", "tell a #long story", "")
	poll(t, c, long.ID, responses.ResponseStatusInProgress)
	t0 := time.Now()
	cancelled, err := c.Responses.Cancel(ctx, long.ID)
	took := time.Since(t0)
	require.NoError(t, err)
	if cancelled.Status != responses.ResponseStatusCancelled {
		require.Equal(t, responses.ResponseStatusInProgress, cancelled.Status)
		require.GreaterOrEqual(t, took, 1900*time.Millisecond, "answered in_progress without waiting for the outcome")
		cancelled = poll(t, c, long.ID, responses.ResponseStatusCancelled)
	}
	require.Zero(t, cancelled.CompletedAt, "completed_at is for completed responses only")

	// Delete: the whole chain (r1 and r2 share a conversation) is gone, the other stays.
	st, obj = raw(t, env, k, "olivia", "DELETE", "/api/v1/responses/"+r2.ID, nil)
	require.Equal(t, 200, st)
	require.Equal(t, map[string]any{"id": r2.ID, "object": "response.deleted", "deleted": true}, obj)
	for _, id := range []string{r1.ID, r2.ID} {
		_, err = c.Responses.Get(ctx, id, responses.ResponseGetParams{})
		require.Equal(t, 404, status(t, err), id)
		_, err = c.Responses.InputItems.List(ctx, id, responses.InputItemListParams{})
		require.Equal(t, 404, status(t, err), id)
	}
	_, err = c.Responses.Get(ctx, long.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	// Another app user cannot delete olivia's: foreign reads as missing.
	st, _ = raw(t, env, k, "mallory", "DELETE", "/api/v1/responses/"+long.ID, nil)
	require.Equal(t, 404, st)
	_, err = c.Responses.Get(ctx, long.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(long.ID, "resp_"))
}
