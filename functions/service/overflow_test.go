package service_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// A message and an event larger than their fields reach the client whole, through each
// function with its own key (files.read), also when Redis no longer holds the run's
// events: the record names a file, and reads through schema fill it back in (issue 12;
// the event used to read {"truncated":true}). Runs on the default engine profile
// (mongodb, or $PA_APPWRITE_ENGINE).
func TestOversizedContentReachesTheClientWhole(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	owner, jwt := env.SignUp(t, "big@example.com", "password-bigbig")
	conv := env.Conversation(t, jwt)
	a := admitOne(t, env, jwt, conv, "rbig")

	answer := strings.Repeat("The whole answer, line after line — ünïcödé included.\n", 3*schema.SizeMessageText/50)
	require.Greater(t, len([]rune(answer)), schema.SizeMessageText)
	_, err := schema.For[schema.Message](env.Store, schema.CollMessages).Create(ctx, executor.AssistantMessageID(a.RunID), owner,
		&schema.Message{OwnerID: owner, ConversationID: conv, Sequence: 2, Role: "assistant", RunID: schema.Ptr(a.RunID), Text: &answer})
	require.NoError(t, err)
	res := env.Do(t, "GET", "/api/conversations/"+conv+"/messages", jwt, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	var msgs struct {
		Messages []struct {
			Role string `json:"role"`
			Text string `json:"text"`
		} `json:"messages"`
	}
	res.JSON(t, &msgs)
	require.Len(t, msgs.Messages, 2)
	require.Equal(t, answer, msgs.Messages[1].Text)

	delta, _ := json.Marshal(queue.MessageDeltaData{Text: answer})
	require.Greater(t, len(delta), schema.SizeEventData)
	_, err = schema.For[schema.Event](env.Store, schema.CollEvents).Create(ctx, schema.EventDocID(a.RunID, 1), owner,
		&schema.Event{OwnerID: owner, RunID: a.RunID, Sequence: 1, Type: queue.EventMessageDelta, Data: schema.Ptr(string(delta))})
	require.NoError(t, err)
	schematest.SetRunStatus(t, env.Store, a.RunID, schema.RunCompleted, map[string]any{"lastSequence": 1,
		"finishedAt": time.Now().UTC().Format(time.RFC3339Nano)})
	b := poll(t, env, jwt, a.RunID, 0, "0") // Redis has no stream for this run: Appwrite answers
	require.Len(t, b.Events, 1)
	var got queue.MessageDeltaData
	require.NoError(t, json.Unmarshal(b.Events[0].Data, &got))
	require.Equal(t, answer, got.Text)
}
