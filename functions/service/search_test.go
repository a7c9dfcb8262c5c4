package service_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/schema"
)

type searchPage struct {
	Results []struct {
		MessageID, ConversationID, ConversationTitle, Role string
		Snippet                                            []struct {
			Text string
			Hit  bool
		}
	}
	Next string
}

func marked(p searchPage, i int) string {
	var b strings.Builder
	for _, s := range p.Results[i].Snippet {
		if s.Hit {
			b.WriteString("[" + s.Text + "]")
		} else {
			b.WriteString(s.Text)
		}
	}
	return b.String()
}

// TestSearchOverWhatWasSaid: the caller's own messages and answers only, newest first,
// with the conversation's title and a snippet whose matched words are marked; another
// user's matching message is never listed; a bad query is refused.
func TestSearchOverWhatWasSaid(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	owner, jwt := env.SignUp(t, "search@example.com", "password-search")
	_, other := env.SignUp(t, "search-other@example.com", "password-other")
	post := func(jwt, conv, req, text string) {
		r := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": req, "text": text})
		require.Equal(t, 202, r.Status, string(r.Body))
	}
	c1 := env.Conversation(t, jwt)
	c2 := env.Conversation(t, jwt)
	co := env.Conversation(t, other)
	post(jwt, c1, "s-1", "Plan a weekend in Porto with two kids")
	post(jwt, c2, "s-2", "Nothing to see here")
	post(other, co, "o-1", "my secret Porto notes")
	long := strings.Repeat("filler words here ", 20) + "and then Porto appears, " + strings.Repeat("more text after ", 20)
	_, err := schema.For[schema.Message](env.Store, schema.CollMessages).Create(ctx, "a-search-1", owner, &schema.Message{
		OwnerID: owner, ConversationID: c2, Sequence: 2, Role: "assistant", Text: &long})
	require.NoError(t, err)

	get := func(jwt, q string) (int, searchPage) {
		r := env.Do(t, "GET", "/api/conversations/search?q="+url.QueryEscape(q), jwt, nil)
		var p searchPage
		if r.Status != 200 {
			t.Logf("%s: %s", q, r.Body)
		}
		if r.Status == 200 {
			r.JSON(t, &p)
		}
		return r.Status, p
	}
	st, p := get(jwt, "porto")
	require.Equal(t, 200, st)
	require.Len(t, p.Results, 2, "the owner's two, never the other user's")
	require.Equal(t, "a-search-1", p.Results[0].MessageID, "newest first")
	require.Equal(t, "assistant", p.Results[0].Role)
	require.Equal(t, c2, p.Results[0].ConversationID)
	require.Equal(t, "test", p.Results[0].ConversationTitle)
	require.True(t, strings.HasPrefix(marked(p, 0), "…"), marked(p, 0))
	require.Contains(t, marked(p, 0), "and then [Porto] appears")
	require.Equal(t, "Plan a weekend in [Porto] with two kids", marked(p, 1))

	_, p = get(other, "porto")
	require.Len(t, p.Results, 1)
	require.Equal(t, "my secret [Porto] notes", marked(p, 0))
	_, p = get(jwt, "nothing")
	require.Len(t, p.Results, 1)
	_, p = get(jwt, "absent")
	require.Empty(t, p.Results)
	for _, bad := range []string{"", "  ", "***", strings.Repeat("x", 201)} {
		st, _ := get(jwt, bad)
		require.Equal(t, 400, st, fmt.Sprintf("%q", bad))
	}
}
