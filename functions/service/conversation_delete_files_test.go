package service_test

import (
	"context"
	"strings"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/functions/functionstest"
	"privateassistant/schema"
)

// Deleting a conversation deletes its long messages' overflow files from the bucket, with
// the conversations function's own key (issue 12 item 6: they stayed, readable by the
// owner through the file id, after the conversation was gone). Another conversation's
// file stays. Runs on the default engine profile (mongodb, or $PA_APPWRITE_ENGINE).
func TestDeleteConversationDeletesItsOverflowFiles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	owner, jwt := env.SignUp(t, "delbig@example.com", "password-delbig")
	msgs := schema.For[schema.Message](env.Store, schema.CollMessages)
	answer := strings.Repeat("A long answer, kept whole in a file — ünïcödé.\n", 2*schema.SizeMessageText/45)
	require.Greater(t, len([]rune(answer)), schema.SizeMessageText)

	// Two conversations, each with an answer longer than a message's field.
	fileOf := map[string]string{}
	convs := []string{env.Conversation(t, jwt), env.Conversation(t, jwt)}
	for i, conv := range convs {
		a := admitOne(t, env, jwt, conv, "rq"+string(rune('a'+i)))
		m, err := msgs.Create(ctx, executor.AssistantMessageID(a.RunID), owner,
			&schema.Message{OwnerID: owner, ConversationID: conv, Sequence: 2, Role: "assistant", RunID: schema.Ptr(a.RunID), Text: &answer})
		require.NoError(t, err)
		require.NotNil(t, m.TextFileID)
		fileOf[conv] = *m.TextFileID
	}
	files := appwrite.NewStorage(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey)))
	bucket := func() []string {
		list, err := files.ListFiles(schema.BucketArtifacts)
		require.NoError(t, err)
		var ids []string
		for _, f := range list.Files {
			ids = append(ids, f.Id)
		}
		return ids
	}
	require.ElementsMatch(t, []string{fileOf[convs[0]], fileOf[convs[1]]}, bucket())

	res := env.Do(t, "DELETE", "/api/conversations/"+convs[0], jwt, nil)
	require.Equal(t, 204, res.Status, string(res.Body))
	require.Equal(t, []string{fileOf[convs[1]]}, bucket(), "the deleted conversation's overflow file is gone; the other's stays")
	require.Equal(t, 404, env.Do(t, "GET", "/api/conversations/"+convs[0], jwt, nil).Status)
	res = env.Do(t, "GET", "/api/conversations/"+convs[1]+"/messages", jwt, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	require.Contains(t, string(res.Body), "A long answer")
}
