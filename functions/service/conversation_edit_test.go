package service_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/schema"
)

type feedBatch struct {
	Events []struct {
		Sequence int64           `json:"sequence"`
		Type     string          `json:"type"`
		Data     json.RawMessage `json:"data"`
	} `json:"events"`
	Next  int64 `json:"next"`
	Reset bool  `json:"reset"`
}

func readFeed(t *testing.T, env *functionstest.Env, jwt string, after int64) feedBatch {
	t.Helper()
	res := env.Do(t, "GET", "/api/conversations/feed?after="+itoa(after)+"&wait=0", jwt, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	var b feedBatch
	res.JSON(t, &b)
	return b
}

func itoa(n int64) string { b, _ := json.Marshal(n); return string(b) }

// TestRenameAndDeleteConversations: rename and delete are the owner's only (another
// user's conversation answers exactly like a missing one); a deleted conversation takes
// its messages with it, cancels its runs and takes no new message; every change reaches
// the owner's feed, and only theirs.
func TestRenameAndDeleteConversations(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	_, alice := env.SignUp(t, "alice@example.com", "password-alice")
	_, mallory := env.SignUp(t, "mallory@example.com", "password-mallory")
	start := readFeed(t, env, alice, 0)
	require.Empty(t, start.Events)

	conv := env.Conversation(t, alice)
	res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", alice, map[string]any{"requestId": "r1", "text": "hello", "role": "chat"})
	require.Equal(t, 202, res.Status, string(res.Body))
	var adm struct{ RunID, MessageID string }
	res.JSON(t, &adm)

	// Rename: the owner only; a foreign id reads like a missing one.
	foreign := env.Do(t, "PATCH", "/api/conversations/"+conv, mallory, map[string]any{"title": "mine now"})
	missing := env.Do(t, "PATCH", "/api/conversations/cmissing0", mallory, map[string]any{"title": "mine now"})
	require.Equal(t, 404, foreign.Status)
	require.Equal(t, requestIDField.ReplaceAllString(string(missing.Body), ""), requestIDField.ReplaceAllString(string(foreign.Body), ""))
	res = env.Do(t, "PATCH", "/api/conversations/"+conv, alice, map[string]any{"title": "  Trip   to Porto "})
	require.Equal(t, 200, res.Status, string(res.Body))
	var v struct{ ID, Title string }
	res.JSON(t, &v)
	require.Equal(t, "Trip to Porto", v.Title)
	res = env.Do(t, "PATCH", "/api/conversations/"+conv, alice, map[string]any{"title": "   "})
	require.Equal(t, 400, res.Status)
	require.Equal(t, "invalid_title", res.ErrorCode())
	res = env.Do(t, "GET", "/api/conversations/"+conv, alice, nil)
	res.JSON(t, &v)
	require.Equal(t, "Trip to Porto", v.Title)

	// Delete: foreign reads like missing and deletes nothing.
	foreign = env.Do(t, "DELETE", "/api/conversations/"+conv, mallory, nil)
	missing = env.Do(t, "DELETE", "/api/conversations/cmissing0", mallory, nil)
	require.Equal(t, 404, foreign.Status)
	require.Equal(t, requestIDField.ReplaceAllString(string(missing.Body), ""), requestIDField.ReplaceAllString(string(foreign.Body), ""))
	require.Equal(t, 200, env.Do(t, "GET", "/api/conversations/"+conv, alice, nil).Status)

	res = env.Do(t, "DELETE", "/api/conversations/"+conv, alice, nil)
	require.Equal(t, 204, res.Status, string(res.Body))
	require.Equal(t, 404, env.Do(t, "GET", "/api/conversations/"+conv, alice, nil).Status)
	require.Equal(t, 404, env.Do(t, "GET", "/api/conversations/"+conv+"/messages", alice, nil).Status)
	res = env.Do(t, "POST", "/api/conversations/"+conv+"/messages", alice, map[string]any{"requestId": "r2", "text": "again", "role": "chat"})
	require.Equal(t, 404, res.Status, "a deleted conversation takes no message: %s", res.Body)
	// Its run is cancelled, and reads as missing to its owner (issue 30).
	run, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(context.Background(), adm.RunID)
	require.NoError(t, err)
	require.True(t, run.Status == schema.RunCancelled || run.CancelRequested, "its run is cancelled: %+v", run)
	require.Equal(t, 404, env.Do(t, "GET", "/api/runs/"+adm.RunID, alice, nil).Status)
	// Its events are to go once it has settled (the agent's retention sweep purges them:
	// agent/outbox TestDeletedConversationsRunsLoseTheirEvents).
	rdb := env.Redis.Client()
	defer rdb.Close()
	_, err = rdb.ZScore(context.Background(), queue.PurgeRunsKey, adm.RunID).Result()
	require.NoError(t, err, "the run is listed for purging")
	res = env.Do(t, "DELETE", "/api/conversations/"+conv, alice, nil)
	require.Equal(t, 404, res.Status, "deleted once")

	// The feed told alice everything, in order; mallory nothing.
	b := readFeed(t, env, alice, 0)
	var types []string
	for i, e := range b.Events {
		require.Equal(t, int64(i+1), e.Sequence)
		types = append(types, e.Type)
	}
	require.Equal(t, []string{"conversation.created", "message.created", "conversation.updated", "conversation.deleted"}, types)
	var fm struct{ ConversationID, RunID, MessageID, RequestID, Text string }
	require.NoError(t, json.Unmarshal(b.Events[1].Data, &fm))
	require.Equal(t, conv, fm.ConversationID)
	require.Equal(t, adm.RunID, fm.RunID)
	require.Equal(t, adm.MessageID, fm.MessageID)
	require.Equal(t, "r1", fm.RequestID)
	require.Equal(t, "hello", fm.Text)
	require.Empty(t, readFeed(t, env, mallory, 0).Events)
	require.Len(t, readFeed(t, env, alice, 3).Events, 1, "after a cursor")
}
