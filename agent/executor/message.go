package executor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/schema"
)

func jsonString(v any) (string, error) {
	b, err := json.Marshal(v)
	return string(b), err
}

// reserveScript: KEYS conv seq, reservation; returns the reserved sequence, or -5 when the
// counter is missing (seed it from Appwrite first).
var reserveScript = redis.NewScript(`
local r = redis.call('GET', KEYS[2])
if r then return tonumber(r) end
if redis.call('EXISTS', KEYS[1]) == 0 then return -5 end
local s = redis.call('INCR', KEYS[1])
redis.call('SET', KEYS[2], s, 'EX', 604800)
return s
`)

// AssistantMessageID is the deterministic id of a run's answer.
func AssistantMessageID(runID string) string { return "a" + runID[1:] }

// assistantMessage stores the run's answer (StoreAnswer).
func (a *attempt) assistantMessage(ctx context.Context, text string) (string, error) {
	return StoreAnswer(ctx, a.e.Store, a.e.RDB, a.run, text)
}

// StoreAnswer stores a run's answer exactly once, with the conversation's next sequence.
// Text beyond the record's size is kept whole in the file textFileId names
// (schema/overflow.go), and reads through schema return it whole. A conversation already
// deleted gets nothing (ErrConversationDeleted); one deleted while the answer is written
// is dealt with by DropLateWrites, which the caller runs after it.
func StoreAnswer(ctx context.Context, st *schema.Store, rdb redis.Cmdable, run *schema.Run, text string) (string, error) {
	id := AssistantMessageID(run.ID)
	msgs := schema.For[schema.Message](st, schema.CollMessages)
	if _, err := msgs.Get(ctx, id); err == nil {
		return id, nil
	}
	if gone, err := ConversationDeleted(ctx, st, rdb, run.OwnerID, run.ConversationID); err != nil {
		return "", err
	} else if gone {
		return "", ErrConversationDeleted
	}
	rec := &schema.Message{OwnerID: run.OwnerID, ConversationID: run.ConversationID, Role: "assistant", RunID: schema.Ptr(run.ID), Text: &text}
	convSeq, resv := queue.ConvSeqKey(run.ConversationID), queue.AdmitKey(id)
	for try := 0; try < 5; try++ {
		seq, err := reserveScript.Run(ctx, rdb, []string{convSeq, resv}).Int64()
		if err != nil {
			return "", fmt.Errorf("reserve answer sequence: %w", err)
		}
		if seq == -5 {
			if err := seedCounter(ctx, st, rdb, run, false); err != nil {
				return "", err
			}
			continue
		}
		rec.Sequence = seq
		_, err = msgs.Create(ctx, id, run.OwnerID, rec)
		if err == nil {
			return id, nil
		}
		if !errors.Is(err, schema.ErrConflict) {
			return "", err
		}
		if _, gerr := msgs.Get(ctx, id); gerr == nil {
			return id, nil
		}
		// (conversation, sequence) is taken: the counter was behind Appwrite.
		if err := seedCounter(ctx, st, rdb, run, true); err != nil {
			return "", err
		}
		_ = rdb.Del(ctx, resv).Err()
	}
	return "", errors.New("could not store the answer: no free sequence")
}

func seedCounter(ctx context.Context, st *schema.Store, rdb redis.Cmdable, run *schema.Run, force bool) error {
	page, err := schema.For[schema.Message](st, schema.CollMessages).List(ctx, schema.ListQuery{Owner: run.OwnerID,
		Filters: []string{query.Equal("conversationId", run.ConversationID)}, Order: []string{query.OrderDesc("sequence")}, Limit: 1})
	if err != nil {
		return err
	}
	var max int64
	if len(page.Items) == 1 {
		max = page.Items[0].Sequence
	}
	if force {
		return rdb.Eval(ctx, `if tonumber(redis.call('GET', KEYS[1]) or '0') < tonumber(ARGV[1]) then redis.call('SET', KEYS[1], ARGV[1]) end return 1`,
			[]string{queue.ConvSeqKey(run.ConversationID)}, max).Err()
	}
	return rdb.SetNX(ctx, queue.ConvSeqKey(run.ConversationID), max, 0).Err()
}
