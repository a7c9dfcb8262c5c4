package executor_test

import (
	"context"
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
// names none, and the run still settles as cancelled. Without the delete the same
// cancelled run keeps its partial answer.
func TestAPartialAnswerAfterTheDeleteIsDropped(t *testing.T) {
	for _, deleted := range []bool{true, false} {
		parts := make([]string, 500)
		for i := range parts {
			parts[i] = "x"
		}
		fake := newFake(func(string) []harness.Event { return deltas(parts...) }, time.Millisecond)
		s := setup(t, fake)
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
		if deleted {
			require.ErrorIs(t, err, schema.ErrNotFound, "the late partial answer is dropped")
			require.Nil(t, rec.AssistantMessageID)
		} else {
			require.NoError(t, err, "a cancelled run keeps its partial answer")
			require.NotNil(t, rec.AssistantMessageID)
		}
	}
}
