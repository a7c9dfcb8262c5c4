package service

import (
	"errors"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/functions/admit"
	"privateassistant/functions/fault"
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
}

func messageView(m *schema.Message) MessageView {
	v := MessageView{ID: m.ID, Sequence: m.Sequence, Role: m.Role, RunID: m.RunID, CreatedAt: m.CreatedAt, TextFileID: m.TextFileID}
	if m.Text != nil {
		v.Text = *m.Text
	}
	return v
}

// pathID validates an id from the path (400 when malformed, never a server fetch).
func pathID(r *http.Request, name string) (string, error) {
	id := r.PathValue(name)
	if !queue.ValidID(id) {
		return "", httpapi.BadRequest("invalid_id", "%s is not a valid id", name)
	}
	return id, nil
}

// pageParams reads ?cursor= and ?limit= (1..100, default 25).
func pageParams(r *http.Request) (string, int, error) {
	q := r.URL.Query()
	cursor := q.Get("cursor")
	if cursor != "" && !queue.ValidID(cursor) {
		return "", 0, httpapi.BadRequest("invalid_cursor", "cursor is not valid")
	}
	limit := 25
	if l := q.Get("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 1 || n > 100 {
			return "", 0, httpapi.BadRequest("invalid_limit", "limit must be 1..100")
		}
		limit = n
	}
	return cursor, limit, nil
}

// storeErr maps store errors onto the envelope: a missing or foreign record is 404.
func storeErr(err error, what string) error {
	if err == nil || fault.As(err) != nil {
		return err // the domain package already said what it means
	}
	switch {
	case errors.Is(err, schema.ErrNotFound):
		return httpapi.NotFound(what)
	case errors.Is(err, schema.ErrUnavailable):
		return &httpapi.Error{Status: 503, Code: "appwrite_unavailable", Message: "storage is unavailable; try again", RetryAfter: 2 * time.Second}
	case errors.Is(err, schema.ErrInvalid):
		return httpapi.BadRequest("invalid", "%v", err)
	}
	var he *httpapi.Error
	if errors.As(err, &he) {
		return he
	}
	// A cursor naming a foreign or deleted record.
	var ae *schema.APIError
	if errors.As(err, &ae) && ae.Type == "general_cursor_not_found" {
		return httpapi.BadRequest("invalid_cursor", "cursor is not valid")
	}
	return err
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
			return httpapi.BadRequest("invalid_title", "title must be at most %d characters", schema.SizeTitle)
		}
		id := "unique()"
		if body.RequestID != "" {
			if !requestIDRe.MatchString(body.RequestID) {
				return httpapi.BadRequest("invalid_request_id", "requestId must be 1-64 of [A-Za-z0-9._:-]")
			}
			id, _ = admit.IDs(c.User.ID, "conversation:"+body.RequestID)
			id = "c" + id[1:]
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		convs := schema.For[schema.Conversation](st, schema.CollConversations)
		now := time.Now().UTC().Format(time.RFC3339Nano)
		conv, err := convs.Create(r.Context(), id, c.User.ID, &schema.Conversation{OwnerID: c.User.ID, Title: title, LastActivityAt: now})
		if errors.Is(err, schema.ErrConflict) && id != "unique()" {
			conv, err = convs.GetOwned(r.Context(), c.User.ID, id)
		}
		if err != nil {
			return storeErr(err, "conversation")
		}
		httpapi.WriteJSON(w, 201, conversationView(conv))
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
			RequestID string `json:"requestId"`
			Text      string `json:"text"`
			Role      string `json:"role"`
		}
		if err := httpapi.DecodeJSON(r, &body); err != nil {
			return err
		}
		if !requestIDRe.MatchString(body.RequestID) {
			return httpapi.BadRequest("invalid_request_id", "requestId must be 1-64 of [A-Za-z0-9._:-]")
		}
		if !utf8.ValidString(body.Text) || strings.TrimSpace(body.Text) == "" {
			return httpapi.BadRequest("invalid_text", "text must be non-empty UTF-8")
		}
		if n := utf8.RuneCountInString(body.Text); n > schema.SizeMessageText {
			return httpapi.Errorf(413, "text_too_long", "text is %d characters; the limit is %d", n, schema.SizeMessageText)
		}
		role := body.Role
		if role == "" {
			role = queue.RoleChat
		}
		if !roleRe.MatchString(role) {
			return httpapi.BadRequest("invalid_role", "role must match %s", roleRe)
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		res, err := s.admitter.Admit(r.Context(), st, admit.Request{Owner: c.User.ID, ConversationID: id,
			RequestID: body.RequestID, Text: body.Text, Role: role})
		if err != nil {
			return storeErr(err, "conversation")
		}
		s.rememberRunOwner(res.RunID, c.User.ID)
		httpapi.WriteJSON(w, 202, res)
		return nil
	})
}
