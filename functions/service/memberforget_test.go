package service_test

import (
	"context"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/users"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// TestAnAdminForgetsAMember (issue 30 item 6): forgetting a member deletes their
// conversations (messages, runs as missing), queues their Hermes home for deletion on
// every GPU host and deletes the account; it needs the account's email, never works on
// oneself, and a member's JWT gets what a missing route object gets.
func TestAnAdminForgetsAMember(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	adminID, admin := env.SignUp(t, "forget-admin@example.com", "password-forget-admin")
	env.Label(t, adminID, "admin")
	aliceID, alice := env.SignUp(t, "forget-alice@example.com", "password-forget-alice")
	_, bob := env.SignUp(t, "forget-bob@example.com", "password-forget-bob")
	conv := env.Conversation(t, alice)
	res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", alice, map[string]any{"requestId": "forget-1", "text": "a secret of mine"})
	require.Equal(t, 202, res.Status, string(res.Body))
	bobConv := env.Conversation(t, bob)

	path := "/api/members/" + aliceID + "/forget"
	missing := env.Do(t, "POST", "/api/members/umissing0/forget", bob, map[string]any{"email": "x@example.com"})
	foreign := env.Do(t, "POST", path, bob, map[string]any{"email": "forget-alice@example.com"})
	require.Equal(t, missing.Status, foreign.Status, "a member's JWT: as if missing")
	require.Equal(t, 400, env.Do(t, "POST", path, admin, map[string]any{"email": "someone-else@example.com"}).Status)
	require.Equal(t, 409, env.Do(t, "POST", "/api/members/"+adminID+"/forget", admin, map[string]any{"email": "forget-admin@example.com"}).Status)

	res = env.Do(t, "POST", path, admin, map[string]any{"email": "forget-alice@example.com"})
	require.Equal(t, 200, res.Status, string(res.Body))
	var out struct{ DeletedConversations int }
	res.JSON(t, &out)
	require.Equal(t, 1, out.DeletedConversations)

	_, err := schema.For[schema.Conversation](env.Store, schema.CollConversations).Get(ctx, conv)
	require.ErrorIs(t, err, schema.ErrNotFound)
	msgs, err := schema.For[schema.Message](env.Store, schema.CollMessages).All(ctx, schema.ListQuery{Owner: aliceID})
	require.NoError(t, err)
	require.Empty(t, msgs, "no message of hers is left")
	rdb := env.Redis.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	_, err = rdb.ZScore(ctx, queue.PurgeHomesKey, aliceID).Result()
	require.NoError(t, err, "her Hermes home is queued for deletion on every GPU host")
	_, err = users.New(env.Store.Client()).Get(aliceID)
	require.Error(t, err, "the account is gone")
	// Her JWT stops working once the functions' short cache of verified JWTs expires.
	require.Eventually(t, func() bool { return env.Do(t, "GET", "/api/conversations", alice, nil).Status == 401 }, 30*time.Second, 250*time.Millisecond)

	// Bob keeps everything.
	_, err = schema.For[schema.Conversation](env.Store, schema.CollConversations).Get(ctx, bobConv)
	require.NoError(t, err)
	audit, err := schema.For[schema.Audit](env.Store, schema.CollAudit).All(ctx, schema.ListQuery{})
	require.NoError(t, err)
	found := false
	for _, a := range audit {
		found = found || (a.Action == "member.forget" && a.Target == "member/"+aliceID)
	}
	require.True(t, found, "audited")
}
