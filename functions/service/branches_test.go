package service_test

import (
	"context"
	"testing"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// TestEditRegenerateRetryAdmitExactlyOnce (issue 34): an edit, a regeneration and a retry
// are new user messages naming their parent, each admitted exactly once by its requestId;
// a retry names a settled run of the caller's own in the same conversation, and a repeat
// naming another parent or another run is a reused requestId that stores nothing.
func TestEditRegenerateRetryAdmitExactlyOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	owner, jwt := env.SignUp(t, "branch@example.com", "password-branch")
	_, otherJWT := env.SignUp(t, "other-branch@example.com", "password-other")
	conv := env.Conversation(t, jwt)
	post := func(jwt string, body map[string]any) functionstest.Response {
		return env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, body)
	}
	var first, edit, retry admitted
	r := post(jwt, map[string]any{"requestId": "b-1", "text": "first"})
	require.Equal(t, 202, r.Status, string(r.Body))
	r.JSON(t, &first)

	// An edit of the first message: twice, one message and one run.
	for i := 0; i < 2; i++ {
		r = post(jwt, map[string]any{"requestId": "b-2", "text": "first, edited", "parentId": schema.RootParent})
		require.Equal(t, 202, r.Status, string(r.Body))
		var a admitted
		r.JSON(t, &a)
		require.True(t, i == 0 || a == edit, "a repeat answers the same ids and sequence")
		edit = a
	}
	r = post(jwt, map[string]any{"requestId": "b-2", "text": "first, edited", "parentId": first.MessageID})
	require.Equal(t, 409, r.Status, "the same requestId naming another parent")
	require.Contains(t, string(r.Body), "request_id_reused")
	r = post(jwt, map[string]any{"requestId": "b-x", "text": "x", "parentId": "not/an id"})
	require.Equal(t, 400, r.Status)

	// A retry names a settled run only.
	r = post(jwt, map[string]any{"requestId": "b-3", "text": "first, edited", "parentId": schema.RootParent, "retryOf": edit.RunID})
	require.Equal(t, 409, r.Status, "the run is still queued: %s", r.Body)
	require.Contains(t, string(r.Body), "run_not_settled")
	schematest.SetRunStatus(t, env.Store, edit.RunID, schema.RunFailed, nil)
	for i := 0; i < 2; i++ {
		r = post(jwt, map[string]any{"requestId": "b-3", "text": "first, edited", "parentId": schema.RootParent, "retryOf": edit.RunID})
		require.Equal(t, 202, r.Status, string(r.Body))
		r.JSON(t, &retry)
	}
	r = post(jwt, map[string]any{"requestId": "b-3", "text": "first, edited", "parentId": schema.RootParent, "retryOf": first.RunID})
	require.Equal(t, 409, r.Status, "the same requestId retrying another run")
	var run struct{ RetryOf string }
	env.Do(t, "GET", "/api/runs/"+retry.RunID, jwt, nil).JSON(t, &run)
	require.Equal(t, edit.RunID, run.RetryOf)

	// Another user's run, or a missing one, reads the same: not found; and the other user
	// cannot post into this conversation at all.
	missing := post(jwt, map[string]any{"requestId": "b-4", "text": "t", "retryOf": "r0000000000000000000000000000000"})
	require.Equal(t, 404, missing.Status)
	otherConv := env.Conversation(t, otherJWT)
	o := env.Do(t, "POST", "/api/conversations/"+otherConv+"/messages", otherJWT, map[string]any{"requestId": "o-1", "text": "mine"})
	require.Equal(t, 202, o.Status)
	var theirs admitted
	o.JSON(t, &theirs)
	schematest.SetRunStatus(t, env.Store, theirs.RunID, schema.RunFailed, nil)
	foreign := post(jwt, map[string]any{"requestId": "b-4", "text": "t", "retryOf": theirs.RunID})
	require.Equal(t, 404, foreign.Status)
	var e1, e2 struct {
		Error struct{ Code, Message string }
	}
	missing.JSON(t, &e1)
	foreign.JSON(t, &e2)
	require.Equal(t, e1, e2)

	// Exactly three messages and three runs; the messages say their parents.
	msgs, err := schema.For[schema.Message](env.Store, schema.CollMessages).All(ctx, schema.ListQuery{Owner: owner, Filters: []string{query.Equal("conversationId", conv)}})
	require.NoError(t, err)
	require.Len(t, msgs, 3)
	runs, err := schema.For[schema.Run](env.Store, schema.CollRuns).All(ctx, schema.ListQuery{Owner: owner, Filters: []string{query.Equal("conversationId", conv)}})
	require.NoError(t, err)
	require.Len(t, runs, 3)
	var page struct {
		Messages []struct{ ID, ParentID string }
	}
	env.Do(t, "GET", "/api/conversations/"+conv+"/messages", jwt, nil).JSON(t, &page)
	parents := map[string]string{}
	for _, m := range page.Messages {
		parents[m.ID] = m.ParentID
	}
	require.Equal(t, map[string]string{first.MessageID: "", edit.MessageID: schema.RootParent, retry.MessageID: schema.RootParent}, parents)
}
