package service

import (
	"context"
	"errors"
	"net/http"
	"time"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/longpoll"
)

// Change types of a user's feed (GET /api/conversations/feed).
const (
	FeedConversationCreated = "conversation.created" // data: ConversationView
	FeedConversationUpdated = "conversation.updated" // data: ConversationView
	FeedConversationDeleted = "conversation.deleted" // data: {id}
	FeedMessageCreated      = "message.created"      // data: FeedMessage
)

// FeedMessage says a message was admitted with its run: the other tabs show the message
// and follow the run. The text travels only when short (the tab reads the rest).
type FeedMessage struct {
	ConversationID string `json:"conversationId"`
	MessageID      string `json:"messageId"`
	RunID          string `json:"runId"`
	RequestID      string `json:"requestId"`
	Role           string `json:"role"`
	Sequence       int64  `json:"sequence"`
	Status         string `json:"status"`
	Text           string `json:"text,omitempty"`
	TextOmitted    bool   `json:"textOmitted,omitempty"`
	// Attachments are the message's attached file ids (issue 17).
	Attachments []string `json:"attachments,omitempty"`
	// ParentID and RetryOf as the message was sent (issue 34: branches).
	ParentID string `json:"parentId,omitempty"`
	RetryOf  string `json:"retryOf,omitempty"`
}

// feedTextMax bounds the message text a feed entry carries.
const feedTextMax = 2000

// publish tells owner's other tabs and devices about a change. It is a notification
// only: the change is already stored, so a failure is logged, never answered (a client
// that misses it reads its lists again when it finds a hole or comes back into view).
func (s *Service) publish(ctx context.Context, owner, typ string, data any) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	if _, err := longpoll.PublishFeed(ctx, s.rdb, owner, typ, data); err != nil {
		s.log.Warn("change feed not written", "component", "feed", "type", typ, "err", err)
	}
}

func (s *Service) feedRoutes(a *httpapi.API) {
	// GET /api/conversations/feed?after=N&wait=S: the caller's changes after N, waiting up
	// to S seconds (at most the long-poll bound) for the first. Without after: only the
	// current position, where a new client starts.
	a.Handle("GET /api/conversations/feed", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		after, wait, err := pollQuery(r.URL.Query(), -1)
		if err != nil {
			return err
		}
		wait, release := s.pollWait(r.Context(), wait)
		defer release()
		b, err := s.follow.WaitFeed(r.Context(), c.User.ID, after, wait)
		if errors.Is(err, longpoll.ErrRedis) {
			return &fault.Error{Kind: fault.Unavailable, Code: "events_unavailable", Message: "live updates are unavailable; retry", RetryAfter: 2 * time.Second}
		}
		if err != nil {
			return storeErr(err, "feed")
		}
		httpapi.WriteJSON(w, 200, b)
		return nil
	})
}
