package service

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/redis/go-redis/v9"

	"privateassistant/admit"
	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/queue"
	"privateassistant/schema"
)

var (
	requestIDRe = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,64}$`)
	roleRe      = regexp.MustCompile(`^[a-z][a-z0-9_-]{0,31}$`)
)

// ConversationView is a conversation as the API shows it.
type ConversationView struct {
	ID             string `json:"id"`
	Title          string `json:"title"`
	LastActivityAt string `json:"lastActivityAt"`
	CreatedAt      string `json:"createdAt"`
}

func conversationView(c *schema.Conversation) ConversationView {
	return ConversationView{ID: c.ID, Title: c.Title, LastActivityAt: c.LastActivityAt, CreatedAt: c.CreatedAt}
}

// MessageView is a persisted message as the API shows it.
type MessageView struct {
	ID        string  `json:"id"`
	Sequence  int64   `json:"sequence"`
	Role      string  `json:"role"`
	Text      string  `json:"text"`
	RunID     *string `json:"runId"`
	CreatedAt string  `json:"createdAt"`
	// TextFileID is set when the text was too long for the record; Text is then empty.
	TextFileID *string `json:"textFileId,omitempty"`
	// Attachments are the ids of the files attached to a user message (schema.BucketUploads;
	// their owner reads names and sizes with their own session).
	Attachments []string `json:"attachments,omitempty"`
	// ParentID is the user message this one follows on its branch ("root": none); absent:
	// the previous user message by sequence (schema/branch.go).
	ParentID *string `json:"parentId,omitempty"`
}

func messageView(m *schema.Message) MessageView {
	v := MessageView{ID: m.ID, Sequence: m.Sequence, Role: m.Role, RunID: m.RunID, CreatedAt: m.CreatedAt, TextFileID: m.TextFileID,
		Attachments: m.Attachments, ParentID: m.ParentID}
	if m.Text != nil {
		v.Text = *m.Text
	}
	return v
}

// pathID validates an id from the path (400 when malformed, never a server fetch).
// PathID is pathID for the stream service (400 invalid_id).
func PathID(r *http.Request, name string) (string, error) { return pathID(r, name) }

func pathID(r *http.Request, name string) (string, error) {
	id := r.PathValue(name)
	if !queue.ValidID(id) {
		return "", fault.Invalidf("invalid_id", "%s is not a valid id", name)
	}
	return id, nil
}

// pageParams reads ?cursor= and ?limit= (1..100, default 25).
func pageParams(r *http.Request) (string, int, error) {
	q := r.URL.Query()
	cursor := q.Get("cursor")
	if cursor != "" && !queue.ValidID(cursor) {
		return "", 0, fault.Invalidf("invalid_cursor", "cursor is not valid")
	}
	limit := 25
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return "", 0, fault.Invalidf("invalid_limit", "limit must be 1..100")
		}
		limit = n
	}
	return cursor, limit, nil
}

// storeErr maps store errors onto the envelope: a missing or foreign record is 404.
// StoreErr is storeErr for the stream service: the same envelope for the same cause.
func StoreErr(err error, what string) error { return storeErr(err, what) }

func storeErr(err error, what string) error {
	if err == nil || fault.As(err) != nil {
		return err // the domain package already said what it means
	}
	switch {
	case errors.Is(err, schema.ErrNotFound):
		return fault.Missing(what, nil)
	case errors.Is(err, schema.ErrUnavailable):
		return &fault.Error{Kind: fault.Unavailable, Code: "appwrite_unavailable", Message: "storage is unavailable; try again", RetryAfter: 2 * time.Second}
	case errors.Is(err, schema.ErrInvalid):
		return fault.Invalidf("invalid", "%v", err)
	}
	if httpapi.FromError(err) != nil {
		return err // the HTTP edge already said what it means (a body too large, …)
	}
	// A cursor naming a foreign or deleted record.
	var ae *schema.APIError
	if errors.As(err, &ae) && ae.Type == "general_cursor_not_found" {
		return fault.Invalidf("invalid_cursor", "cursor is not valid")
	}
	return err
}

// errInvalidCursor is the one answer to a cursor naming a missing record or one of
// another user: the same bytes either way, never Appwrite's own text.
func errInvalidCursor() error { return fault.Invalidf("invalid_cursor", "cursor is not valid") }

// ownedCursor checks that a page cursor names a record of owner (a foreign and a missing
// one answer errInvalidCursor alike). An empty cursor is the first page.
func ownedCursor[T any](ctx context.Context, st *schema.Store, coll, owner, cursor string) error {
	if cursor == "" {
		return nil
	}
	_, err := schema.For[T](st, coll).GetOwned(ctx, owner, cursor)
	if errors.Is(err, schema.ErrNotFound) {
		return errInvalidCursor()
	}
	return storeErr(err, "cursor")
}

// repeatConversation answers a repeated creation: the same conversation when the title
// is the same, 409 request_id_reused when the requestId already named another title.
func repeatConversation(w http.ResponseWriter, conv *schema.Conversation, title string) error {
	if conv.Title != title {
		return fault.Conflictf("request_id_reused", "this requestId was already used for a conversation with another title")
	}
	httpapi.WriteJSON(w, 201, conversationView(conv))
	return nil
}

// convRateScript counts a user's conversation creations in the current window.
var convRateScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
if n > tonumber(ARGV[2]) then return redis.call('PTTL', KEYS[1]) end
return 0
`)

// limitConversations applies PA_CONVERSATION_RATE per PA_ADMIT_WINDOW to new
// conversations (429 rate_limited with Retry-After).
func (s *Service) limitConversations(ctx context.Context, owner string) error {
	window := s.cfg.AdmitWindow
	if window <= 0 {
		window = time.Minute
	}
	limit := s.cfg.ConversationRate
	if limit <= 0 {
		limit = 20
	}
	key := queue.ConvRateKey(owner, time.Now().UnixMilli()/window.Milliseconds())
	wait, err := convRateScript.Run(ctx, s.rdb, []string{key}, window.Milliseconds(), limit).Int64()
	if err != nil {
		return &fault.Error{Kind: fault.Unavailable, Code: "queue_unavailable", Message: "the rate limiter is unavailable; try again", RetryAfter: 2 * time.Second}
	}
	if wait > 0 {
		return &fault.Error{Kind: fault.RateLimited, Code: "rate_limited", Message: fmt.Sprintf("too many new conversations: at most %d per %s", limit, window), RetryAfter: time.Duration(wait) * time.Millisecond}
	}
	return nil
}

func (s *Service) conversationRoutes(a *httpapi.API) {
	a.Handle("GET /api/conversations", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		cursor, limit, err := pageParams(r)
		if err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		if err := ownedCursor[schema.Conversation](r.Context(), st, schema.CollConversations, c.User.ID, cursor); err != nil {
			return err
		}
		page, err := schema.For[schema.Conversation](st, schema.CollConversations).List(r.Context(), schema.ListQuery{
			Owner: c.User.ID, Order: []string{query.OrderDesc("lastActivityAt")}, Cursor: cursor, Limit: limit})
		if err != nil {
			return storeErr(err, "conversation")
		}
		out := make([]ConversationView, 0, len(page.Items))
		for i := range page.Items {
			out = append(out, conversationView(&page.Items[i]))
		}
		httpapi.WriteJSON(w, 200, map[string]any{"conversations": out, "next": page.Next})
		return nil
	})

	a.Handle("POST /api/conversations", httpapi.Route{MaxBody: 4 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		var body struct {
			Title     string `json:"title"`
			RequestID string `json:"requestId"`
		}
		if err := httpapi.DecodeJSON(r, &body); err != nil {
			return err
		}
		title := strings.TrimSpace(body.Title)
		if title == "" {
			title = "New conversation"
		}
		if !utf8.ValidString(title) || utf8.RuneCountInString(title) > schema.SizeTitle {
			return fault.Invalidf("invalid_title", "title must be at most %d characters", schema.SizeTitle)
		}
		id := "unique()"
		if body.RequestID != "" {
			if !requestIDRe.MatchString(body.RequestID) {
				return fault.Invalidf("invalid_request_id", "requestId must be 1-64 of [A-Za-z0-9._:-]")
			}
			id, _ = admit.IDs(c.User.ID, "conversation:"+body.RequestID)
			id = "c" + id[1:]
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		convs := schema.For[schema.Conversation](st, schema.CollConversations)
		if id != "unique()" {
			// A repeat answers the conversation it made, without counting against the limit.
			conv, err := convs.GetOwned(r.Context(), c.User.ID, id)
			if err == nil {
				return repeatConversation(w, conv, title)
			}
			if !errors.Is(err, schema.ErrNotFound) {
				return storeErr(err, "conversation")
			}
		}
		if err := s.limitConversations(r.Context(), c.User.ID); err != nil {
			return err
		}
		now := time.Now().UTC().Format(time.RFC3339Nano)
		conv, err := convs.Create(r.Context(), id, c.User.ID, &schema.Conversation{OwnerID: c.User.ID, Title: title, LastActivityAt: now})
		if errors.Is(err, schema.ErrConflict) && id != "unique()" {
			if conv, err = convs.GetOwned(r.Context(), c.User.ID, id); err == nil {
				return repeatConversation(w, conv, title)
			}
		}
		if err != nil {
			return storeErr(err, "conversation")
		}
		v := conversationView(conv)
		s.publish(r.Context(), c.User.ID, FeedConversationCreated, v)
		httpapi.WriteJSON(w, 201, v)
		return nil
	})

	a.Handle("GET /api/conversations/{id}", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		conv, err := ownedByPath[schema.Conversation](s, r, c, schema.CollConversations, "conversation")
		if err != nil {
			return err
		}
		httpapi.WriteJSON(w, 200, conversationView(conv))
		return nil
	})

	a.Handle("GET /api/conversations/{id}/messages", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		cursor, limit, err := pageParams(r)
		if err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		if _, err := schema.For[schema.Conversation](st, schema.CollConversations).GetOwned(r.Context(), c.User.ID, id); err != nil {
			return storeErr(err, "conversation")
		}
		if err := ownedCursor[schema.Message](r.Context(), st, schema.CollMessages, c.User.ID, cursor); err != nil {
			return err
		}
		page, err := schema.For[schema.Message](st, schema.CollMessages).List(r.Context(), schema.ListQuery{
			Owner: c.User.ID, Filters: []string{query.Equal("conversationId", id)},
			Order: []string{query.OrderAsc("sequence")}, Cursor: cursor, Limit: limit})
		if err != nil {
			return storeErr(err, "conversation")
		}
		out := make([]MessageView, 0, len(page.Items))
		for i := range page.Items {
			out = append(out, messageView(&page.Items[i]))
		}
		httpapi.WriteJSON(w, 200, map[string]any{"messages": out, "next": page.Next})
		return nil
	})

	a.Handle("POST /api/conversations/{id}/messages", httpapi.Route{MaxBody: 96 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		id, err := pathID(r, "id")
		if err != nil {
			return err
		}
		var body struct {
			RequestID   string   `json:"requestId"`
			Text        string   `json:"text"`
			Role        string   `json:"role"`
			Attachments []string `json:"attachments"`
			// Branches (issue 34): the user message this one follows ("root": none; an
			// edit, regeneration or retry names the parent of the one it replaces), and
			// the terminal run a retry replaces.
			ParentID string `json:"parentId"`
			RetryOf  string `json:"retryOf"`
		}
		if err := httpapi.DecodeJSON(r, &body); err != nil {
			return err
		}
		if body.ParentID != "" && body.ParentID != schema.RootParent && !queue.ValidID(body.ParentID) {
			return fault.Invalidf("invalid_parent", "parentId must be a message id or %q", schema.RootParent)
		}
		if body.RetryOf != "" && !queue.ValidID(body.RetryOf) {
			return fault.Invalidf("invalid_retry", "retryOf must be a run id")
		}
		if !requestIDRe.MatchString(body.RequestID) {
			return fault.Invalidf("invalid_request_id", "requestId must be 1-64 of [A-Za-z0-9._:-]")
		}
		if strings.HasPrefix(body.RequestID, "rt:") {
			// Reserved: a run whose request id starts with rt:<app>: was started by that host
			// app (runtimeapi.RequestIDPrefix), and may call its tools (apptools).
			return fault.Invalidf("invalid_request_id", "requestId must not start with rt: (reserved for the runtime API)")
		}
		if !utf8.ValidString(body.Text) || strings.TrimSpace(body.Text) == "" {
			return fault.Invalidf("invalid_text", "text must be non-empty UTF-8")
		}
		if n := utf8.RuneCountInString(body.Text); n > schema.SizeMessageText {
			return fault.Errorf(fault.TooLarge, "text_too_long", "text is %d characters; the limit is %d", n, schema.SizeMessageText)
		}
		role := body.Role
		if role == "" {
			role = queue.RoleChat
		}
		if !roleRe.MatchString(role) {
			return fault.Invalidf("invalid_role", "role must match %s", roleRe)
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		if body.RetryOf != "" {
			// Only a settled run of this conversation, the caller's own (foreign reads as missing).
			prev, err := schema.For[schema.Run](st, schema.CollRuns).GetOwned(r.Context(), c.User.ID, body.RetryOf)
			if err != nil || prev.ConversationID != id {
				if err == nil || errors.Is(err, schema.ErrNotFound) {
					return fault.Missing("run", nil)
				}
				return storeErr(err, "run")
			}
			if !schema.IsTerminal(prev.Status) {
				return fault.Conflictf("run_not_settled", "the run is still %s; cancel it or wait before retrying", prev.Status)
			}
		}
		res, err := s.admitter.Admit(r.Context(), st, admit.Request{Owner: c.User.ID, ConversationID: id,
			RequestID: body.RequestID, Text: body.Text, Role: role, Labels: c.User.Labels, Attachments: body.Attachments,
			ParentID: body.ParentID, RetryOf: body.RetryOf})
		if err != nil {
			return storeErr(err, "conversation")
		}
		s.rememberRunOwner(res.RunID, c.User.ID, id)
		fm := FeedMessage{ConversationID: id, MessageID: res.MessageID, RunID: res.RunID, RequestID: body.RequestID,
			Role: res.Role, Sequence: res.Sequence, Status: res.Status, Text: body.Text, Attachments: body.Attachments,
			ParentID: body.ParentID, RetryOf: body.RetryOf}
		if utf8.RuneCountInString(body.Text) > feedTextMax {
			fm.Text, fm.TextOmitted = "", true
		}
		s.publish(r.Context(), c.User.ID, FeedMessageCreated, fm)
		httpapi.WriteJSON(w, 202, res)
		return nil
	})

	s.feedRoutes(a)
	s.searchRoutes(a)
	s.conversationEditRoutes(a)
}
