package service

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/redis/go-redis/v9"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/queue"
	"privateassistant/schema"
)

// deletedOwner is what a deleted conversation's cached owner becomes: admission compares
// it with the caller and answers "conversation not found" (admit).
const deletedOwner = queue.ConvDeleted

// conversationEditRoutes: rename and delete, owner-checked (another user's conversation
// answers exactly like a missing one). Registered last: a delete takes the conversation's
// messages with it.
func (s *Service) conversationEditRoutes(a *httpapi.API) {
	a.Handle("PATCH /api/conversations/{id}", httpapi.Route{MaxBody: 4 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		var body struct {
			Title string `json:"title"`
		}
		if err := httpapi.DecodeJSON(r, &body); err != nil {
			return err
		}
		title := strings.Join(strings.Fields(body.Title), " ")
		if title == "" || !utf8.ValidString(title) || utf8.RuneCountInString(title) > schema.SizeTitle {
			return fault.Invalidf("invalid_title", "title must be 1 to %d characters", schema.SizeTitle)
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		conv, err := schema.For[schema.Conversation](st, schema.CollConversations).UpdateOwned(r.Context(), c.User.ID, id, map[string]any{"title": title})
		if err != nil {
			return storeErr(err, "conversation")
		}
		v := conversationView(conv)
		s.publish(r.Context(), c.User.ID, FeedConversationUpdated, v)
		httpapi.WriteJSON(w, 200, v)
		return nil
	})

	a.Handle("DELETE /api/conversations/{id}", httpapi.Route{MaxBody: 1 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		// No body is needed; one that is sent must be a JSON object, like on every route.
		if raw, _ := io.ReadAll(r.Body); len(bytes.TrimSpace(raw)) > 0 {
			r.Body = io.NopCloser(bytes.NewReader(raw))
			var none struct{}
			if err := httpapi.DecodeJSON(r, &none); err != nil {
				return err
			}
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		if _, err := schema.For[schema.Conversation](st, schema.CollConversations).GetOwned(r.Context(), c.User.ID, id); err != nil {
			return storeErr(err, "conversation")
		}
		if err := s.deleteConversation(r.Context(), st, c.User.ID, id); err != nil {
			return err
		}
		s.publish(r.Context(), c.User.ID, FeedConversationDeleted, map[string]string{"id": id})
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
}

// deleteConversation closes the conversation to new messages, cancels its runs still
// going, deletes its messages (with their files and attachments no other message names),
// its artifacts (with their files) and then the conversation. Every step may be repeated:
// a delete that failed half-way is finished by the next one. The runs read as missing
// everywhere (deleted.go); once settled, the agent's purge deletes their events, then
// their records (agent/outbox Expirer.purge). An answer or file a run writes after this is dropped
// by the agent (DropLateWrites: write, then look for the mark step 1 sets).
func (s *Service) deleteConversation(ctx context.Context, st *schema.Store, owner, id string) error {
	// 1. No new message: admission compares the cached owner (a "-" is nobody's).
	if err := s.rdb.Set(ctx, queue.ConvOwnerKey(id), deletedOwner, 30*24*time.Hour).Err(); err != nil {
		return &fault.Error{Kind: fault.Unavailable, Code: "queue_unavailable", Message: "the conversation cannot be closed right now; try again", RetryAfter: 2 * time.Second}
	}
	// 2. Cancel what still runs.
	runs, err := schema.For[schema.Run](st, schema.CollRuns).All(ctx, schema.ListQuery{Owner: owner,
		Filters: []string{query.Equal("conversationId", id)}})
	if err != nil {
		return storeErr(err, "conversation")
	}
	// The runs' events (their text, tool previews, approval commands) and then their
	// records go too: the agent's retention sweep deletes them from Appwrite and Redis
	// once each run has settled (agent/outbox Expirer.purge).
	if len(runs) > 0 {
		at := float64(time.Now().UnixMilli())
		zs := make([]redis.Z, 0, len(runs))
		for _, run := range runs {
			zs = append(zs, redis.Z{Score: at, Member: run.ID})
		}
		if err := s.rdb.ZAddNX(ctx, queue.PurgeRunsKey, zs...).Err(); err != nil {
			return &fault.Error{Kind: fault.Unavailable, Code: "queue_unavailable", Message: "the conversation cannot be deleted right now; try again", RetryAfter: 2 * time.Second}
		}
	}
	ctl := s.controller()
	for _, run := range runs {
		if schema.IsTerminal(run.Status) {
			continue
		}
		if _, err := ctl.Cancel(ctx, st, owner, run.ID); err != nil && !errors.Is(err, schema.ErrNotFound) {
			return storeErr(err, "run")
		}
	}
	// 3. The messages (after the mark: a late answer is listed here or dropped by its writer).
	msgs := schema.For[schema.Message](st, schema.CollMessages)
	for {
		page, err := msgs.List(ctx, schema.ListQuery{Owner: owner, Filters: []string{query.Equal("conversationId", id)}, Limit: 100})
		if err != nil {
			return storeErr(err, "conversation")
		}
		for _, m := range page.Items {
			if err := msgs.Delete(ctx, m.ID); err != nil && !errors.Is(err, schema.ErrNotFound) {
				return storeErr(err, "message")
			}
		}
		if len(page.Items) < 100 {
			break
		}
	}
	// 4. Its runs' artifacts, each with its file (Table.Delete). A run still finishing
	// writes after this listing only if it then finds the conversation deleted, and deletes
	// what it wrote itself (agent/executor DropLateWrites).
	arts := schema.For[schema.Artifact](st, schema.CollArtifacts)
	for {
		page, err := arts.List(ctx, schema.ListQuery{Owner: owner, Filters: []string{query.Equal("conversationId", id)}, Limit: 100})
		if err != nil {
			return storeErr(err, "conversation")
		}
		for _, x := range page.Items {
			if err := arts.Delete(ctx, x.ID); err != nil && !errors.Is(err, schema.ErrNotFound) {
				return storeErr(err, "artifact")
			}
		}
		if len(page.Items) < 100 {
			break
		}
	}
	if err := schema.For[schema.Conversation](st, schema.CollConversations).Delete(ctx, id); err != nil && !errors.Is(err, schema.ErrNotFound) {
		return storeErr(err, "conversation")
	}
	return nil
}
