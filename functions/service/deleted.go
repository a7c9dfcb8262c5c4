package service

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/redis/go-redis/v9"

	"privateassistant/fault"
	"privateassistant/queue"
	"privateassistant/schema"
)

// Runs of a deleted conversation read as missing (issue 30): their records stay until
// they settle (the agent's purge then deletes them), but no route lists or reads them,
// exactly as if they were another user's. A conversation is deleted when its cached owner says "-" (set first by
// deleteConversation) or, with no owner cached, its record is gone.

// goneConversations returns which of convs (the owner's) are deleted.
func goneConversations(ctx context.Context, st *schema.Store, rdb redis.Cmdable, owner string, convs []string) (map[string]bool, error) {
	gone := map[string]bool{}
	if len(convs) == 0 {
		return gone, nil
	}
	cmds := make([]*redis.StringCmd, len(convs))
	_, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, c := range convs {
			cmds[i] = p.Get(ctx, queue.ConvOwnerKey(c))
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, &fault.Error{Kind: fault.Unavailable, Code: "queue_unavailable", Message: "runs cannot be read right now; try again", RetryAfter: 2 * time.Second}
	}
	var unknown []string
	for i, c := range convs {
		switch v, err := cmds[i].Result(); {
		case err == nil && v == deletedOwner:
			gone[c] = true
		case err == nil && v == owner:
		default:
			unknown = append(unknown, c)
		}
	}
	for len(unknown) > 0 {
		n := min(len(unknown), 100)
		batch := unknown[:n]
		unknown = unknown[n:]
		vals := make([]any, len(batch)) // a []string would be sent nested (sdk-for-go)
		for i, c := range batch {
			vals[i] = c
		}
		found, err := schema.For[schema.Conversation](st, schema.CollConversations).List(ctx, schema.ListQuery{Owner: owner,
			Filters: []string{query.Equal("$id", vals)}, Limit: n})
		if err != nil {
			return nil, storeErr(err, "conversation")
		}
		exists := map[string]bool{}
		for _, cv := range found.Items {
			exists[cv.ID] = true
		}
		for _, c := range batch {
			if !exists[c] {
				gone[c] = true
			}
		}
	}
	return gone, nil
}

// visibleRuns drops the runs of deleted conversations from a page of the owner's runs.
func visibleRuns(ctx context.Context, st *schema.Store, rdb redis.Cmdable, owner string, runs []schema.Run) ([]schema.Run, error) {
	var convs []string
	seen := map[string]bool{}
	for _, r := range runs {
		if !seen[r.ConversationID] {
			seen[r.ConversationID] = true
			convs = append(convs, r.ConversationID)
		}
	}
	gone, err := goneConversations(ctx, st, rdb, owner, convs)
	if err != nil {
		return nil, err
	}
	out := runs[:0]
	for _, r := range runs {
		if !gone[r.ConversationID] {
			out = append(out, r)
		}
	}
	return out, nil
}

// runOfLiveConversation is nil when conv (the owner's) is not deleted, else the 404 a
// missing run answers.
func runOfLiveConversation(ctx context.Context, st *schema.Store, rdb redis.Cmdable, owner, conv string) error {
	gone, err := goneConversations(ctx, st, rdb, owner, []string{conv})
	if err != nil {
		return err
	}
	if gone[conv] {
		return storeErr(schema.ErrNotFound, "run")
	}
	return nil
}

// CheckRunOwner is nil when the owner's runID exists and its conversation is not deleted,
// else the 404 a missing run answers (foreign, missing and deleted alike). It only reads
// (the stream service's Redis user may not write): the cached "<owner> <conversation>",
// else the record.
func CheckRunOwner(ctx context.Context, st *schema.Store, rdb redis.Cmdable, owner, runID string) error {
	var o, conv string
	if v, err := rdb.Get(ctx, queue.RunOwnerKey(runID)).Result(); err == nil {
		o, conv, _ = strings.Cut(v, " ")
	}
	if o == "" || conv == "" {
		run, err := schema.For[schema.Run](st, schema.CollRuns).Get(ctx, runID)
		if err != nil {
			return storeErr(err, "run")
		}
		o, conv = run.OwnerID, run.ConversationID
	}
	if o != owner {
		return fault.Missing("run", nil)
	}
	return runOfLiveConversation(ctx, st, rdb, owner, conv)
}
