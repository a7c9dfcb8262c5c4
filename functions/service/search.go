package service

import (
	"net/http"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/schema"
)

// SearchHit is one message that matched, with a snippet around the first match cut into
// parts (hit: a matched word): the client marks them up as text, never as HTML.
type SearchHit struct {
	MessageID         string        `json:"messageId"`
	ConversationID    string        `json:"conversationId"`
	ConversationTitle string        `json:"conversationTitle"`
	Role              string        `json:"role"`
	RunID             *string       `json:"runId"`
	Sequence          int64         `json:"sequence"`
	CreatedAt         string        `json:"createdAt"`
	Snippet           []SnippetPart `json:"snippet"`
}

// SnippetPart is a piece of a snippet.
type SnippetPart struct {
	Text string `json:"text"`
	Hit  bool   `json:"hit,omitempty"`
}

const (
	maxSearchQuery = 200
	snippetBefore  = 60
	snippetAfter   = 140
)

// searchRoutes: GET /api/conversations/search?q=…&cursor=&limit= searches what the caller
// said and was answered (messages.text, the fulltext index text_search), newest first,
// only the caller's (the owner filter). Matching is the engine's (MariaDB boolean mode,
// Mongo $text: schema/appwritetest/fulltext.go); the snippet marks the query's words.
func (s *Service) searchRoutes(a *httpapi.API) {
	a.Handle("GET /api/conversations/search", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		q := strings.Join(strings.Fields(r.URL.Query().Get("q")), " ")
		if q == "" || !utf8.ValidString(q) || utf8.RuneCountInString(q) > maxSearchQuery || len(searchTerms(q)) == 0 {
			return fault.Invalidf("invalid_query", "q must be 1 to %d characters with a letter or digit", maxSearchQuery)
		}
		cursor, limit, err := pageParams(r)
		if err != nil {
			return err
		}
		st, err := s.store(c)
		if err != nil {
			return err
		}
		if err := ownedCursor[schema.Message](r.Context(), st, schema.CollMessages, c.User.ID, cursor); err != nil {
			return err
		}
		page, err := schema.For[schema.Message](st, schema.CollMessages).List(r.Context(), schema.ListQuery{Owner: c.User.ID,
			Filters: []string{query.Search("text", q)}, Order: []string{query.OrderDesc("$createdAt")}, Cursor: cursor, Limit: limit})
		if err != nil {
			return storeErr(err, "message")
		}
		titles := map[string]string{}
		var ids []any // a []string would be sent nested (sdk-for-go)
		for _, m := range page.Items {
			if _, ok := titles[m.ConversationID]; !ok {
				titles[m.ConversationID] = ""
				ids = append(ids, m.ConversationID)
			}
		}
		if len(ids) > 0 {
			convs, err := schema.For[schema.Conversation](st, schema.CollConversations).List(r.Context(), schema.ListQuery{Owner: c.User.ID,
				Filters: []string{query.Equal("$id", ids)}, Limit: len(ids)})
			if err != nil {
				return storeErr(err, "conversation")
			}
			for _, cv := range convs.Items {
				titles[cv.ID] = cv.Title
			}
		}
		terms := searchTerms(q)
		out := make([]SearchHit, 0, len(page.Items))
		for _, m := range page.Items {
			title := titles[m.ConversationID]
			if title == "" {
				continue // its conversation is being deleted
			}
			text := ""
			if m.Text != nil {
				text = *m.Text
			}
			out = append(out, SearchHit{MessageID: m.ID, ConversationID: m.ConversationID, ConversationTitle: title, Role: m.Role,
				RunID: m.RunID, Sequence: m.Sequence, CreatedAt: m.CreatedAt, Snippet: snippet(text, terms)})
		}
		httpapi.WriteJSON(w, 200, map[string]any{"results": out, "next": page.Next})
		return nil
	})
}

// searchTerms are the query's words, lower-case (letters and digits).
func searchTerms(q string) []string {
	return strings.FieldsFunc(strings.ToLower(q), func(r rune) bool { return !unicode.IsLetter(r) && !unicode.IsDigit(r) })
}

// snippet cuts text around the first word that starts with a term and marks every such
// word in it.
func snippet(text string, terms []string) []SnippetPart {
	rs := []rune(text)
	type span struct{ from, to int }
	var words []span
	for i := 0; i < len(rs); {
		if !unicode.IsLetter(rs[i]) && !unicode.IsDigit(rs[i]) {
			i++
			continue
		}
		j := i
		for j < len(rs) && (unicode.IsLetter(rs[j]) || unicode.IsDigit(rs[j])) {
			j++
		}
		w := strings.ToLower(string(rs[i:j]))
		for _, t := range terms {
			if strings.HasPrefix(w, t) {
				words = append(words, span{i, j})
				break
			}
		}
		i = j
	}
	start, end := 0, min(len(rs), snippetBefore+snippetAfter)
	if len(words) > 0 {
		start = max(0, words[0].from-snippetBefore)
		end = min(len(rs), words[0].from+snippetAfter)
	}
	// Whole words at the edges.
	for start > 0 && !unicode.IsSpace(rs[start-1]) && words != nil && start < words[0].from {
		start++
	}
	for end < len(rs) && end > start && !unicode.IsSpace(rs[end-1]) {
		end--
		if end <= start+1 {
			end = min(len(rs), start+snippetBefore+snippetAfter)
			break
		}
	}
	var parts []SnippetPart
	add := func(s string, hit bool) {
		if s == "" {
			return
		}
		c := strings.Join(strings.Fields(s), " ") // whitespace runs (newlines) read as one space
		r0, _ := utf8.DecodeRuneInString(s)
		r1, _ := utf8.DecodeLastRuneInString(s)
		switch {
		case c == "":
			c = " "
		default:
			if unicode.IsSpace(r0) {
				c = " " + c
			}
			if unicode.IsSpace(r1) {
				c += " "
			}
		}
		parts = append(parts, SnippetPart{Text: c, Hit: hit})
	}
	if start > 0 {
		add("…", false)
	}
	at := start
	for _, w := range words {
		if w.from < start || w.to > end {
			continue
		}
		add(string(rs[at:w.from]), false)
		add(string(rs[w.from:w.to]), true)
		at = w.to
	}
	add(string(rs[at:end]), false)
	if end < len(rs) {
		add("…", false)
	}
	return parts
}
