package executor_test

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
)

// Issue 30: a run cancelled because its conversation was deleted writes its partial
// answer after the delete; the answer is dropped (finish's DropLateWrites), the record
// names none, its folder is deleted, and the run still settles as cancelled. Without the
// delete the same cancelled run keeps its partial answer and folder.
func TestAPartialAnswerAfterTheDeleteIsDropped(t *testing.T) {
	for _, deleted := range []bool{true, false} {
		parts := make([]string, 500)
		for i := range parts {
			parts[i] = "x"
		}
		fake := newFake(func(string) []harness.Event { return deltas(parts...) }, time.Millisecond)
		s := setup(t, fake)
		work := t.TempDir()
		s.exec.HermesWorkDir = work
		id := s.newRun(t)
		ctx := context.Background()
		done := make(chan error, 1)
		go func() { done <- s.exec.Execute(ctx, id) }()
		waitForDelta(t, s, id)
		conv := s.record(t, id).ConversationID
		if deleted {
			// What functions/service deleteConversation does: the mark, the cancel, the
			// messages, the conversation.
			require.NoError(t, s.rdb.Set(ctx, queue.ConvOwnerKey(conv), queue.ConvDeleted, time.Hour).Err())
		}
		cancelRun(t, s, id)
		if deleted {
			msgs := schema.For[schema.Message](s.store, schema.CollMessages)
			list, err := msgs.All(ctx, schema.ListQuery{AllOwners: true, Filters: []string{`{"method":"equal","attribute":"conversationId","values":["` + conv + `"]}`}})
			require.NoError(t, err)
			for _, m := range list {
				require.NoError(t, msgs.Delete(ctx, m.ID))
			}
			require.NoError(t, schema.For[schema.Conversation](s.store, schema.CollConversations).Delete(ctx, conv))
		}
		require.NoError(t, <-done)
		rec := s.record(t, id)
		require.Equal(t, schema.RunCancelled, rec.Status)
		_, err := schema.For[schema.Message](s.store, schema.CollMessages).Get(ctx, executor.AssistantMessageID(id))
		folder := filepath.Join(work, executor.RunsDir, id)
		if deleted {
			require.ErrorIs(t, err, schema.ErrNotFound, "the late partial answer is dropped")
			require.Nil(t, rec.AssistantMessageID)
			require.NoDirExists(t, folder, "the run's folder is deleted with its conversation")
		} else {
			require.NoError(t, err, "a cancelled run keeps its partial answer")
			require.NotNil(t, rec.AssistantMessageID)
			require.DirExists(t, folder)
		}
	}
}
