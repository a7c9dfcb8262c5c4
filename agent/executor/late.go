package executor

import (
	"context"
	"errors"
	"fmt"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/schema"
)

// ErrConversationDeleted: the run's conversation was deleted; what the run would write
// into it is dropped.
var ErrConversationDeleted = errors.New("the run's conversation was deleted")

// ConversationDeleted reports whether a conversation is deleted: its cached owner says so,
// or (no owner cached) its record is gone.
func ConversationDeleted(ctx context.Context, st *schema.Store, rdb redis.Cmdable, owner, conv string) (bool, error) {
	v, err := rdb.Get(ctx, queue.ConvOwnerKey(conv)).Result()
	switch {
	case err == nil && v == queue.ConvDeleted:
		return true, nil
	case err == nil && v == owner:
		return false, nil
	case err != nil && !errors.Is(err, redis.Nil):
		return false, fmt.Errorf("conversation owner: %w", err)
	}
	_, err = schema.For[schema.Conversation](st, schema.CollConversations).GetOwned(ctx, owner, conv)
	if errors.Is(err, schema.ErrNotFound) {
		return true, nil
	}
	return false, err
}

// DropLateWrites is called after a run wrote its answer and artifacts: if the run's
// conversation was deleted meanwhile, it deletes them (the answer and its overflow file,
// every artifact of the run and its file) and reports true.
//
// It cannot race with the delete. The delete first marks the conversation deleted
// (its cached owner "-"), then lists and deletes its messages and artifacts; a writer
// writes first, then looks for the mark. Either the look comes after the mark (and the
// writer deletes what it wrote), or it comes before it, and then the write came before
// the delete's listing, which finds it (TestLateAnswersOfADeletedConversationAreDropped).
func DropLateWrites(ctx context.Context, st *schema.Store, rdb redis.Cmdable, run *schema.Run) (bool, error) {
	gone, err := ConversationDeleted(ctx, st, rdb, run.OwnerID, run.ConversationID)
	if err != nil || !gone {
		return false, err
	}
	if err := schema.For[schema.Message](st, schema.CollMessages).Delete(ctx, AssistantMessageID(run.ID)); err != nil && !errors.Is(err, schema.ErrNotFound) {
		return true, fmt.Errorf("drop the answer: %w", err)
	}
	arts := schema.For[schema.Artifact](st, schema.CollArtifacts)
	list, err := arts.All(ctx, schema.ListQuery{Owner: run.OwnerID, Filters: []string{query.Equal("runId", run.ID)}})
	if err != nil {
		return true, fmt.Errorf("drop the artifacts: %w", err)
	}
	for _, x := range list {
		// Table.Delete deletes the artifact's file first.
		if err := arts.Delete(ctx, x.ID); err != nil && !errors.Is(err, schema.ErrNotFound) {
			return true, fmt.Errorf("drop artifact %s: %w", x.ID, err)
		}
	}
	return true, nil
}
