package hostapp_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// TestAppForgetsAUser: DELETE /api/v1/user deletes what the app made for that user — every
// conversation (a finished chain of two responses, one still streaming, which is
// cancelled), their messages, and the runs' events once settled — and their responses
// read as missing, and every agent is told to delete their Hermes home. Another user of the app and the same id in another app keep theirs; a
// user linked to a member is refused; the call is audited.
func TestAppForgetsAUser(t *testing.T) {
	env := stacktest.New(t)
	env.StartAgent(t)
	adminID, adminJWT := env.SignUp(t, "rt-admin4@example.com", "password-rt-admin")
	env.Label(t, adminID, "admin")
	memberID, _ := env.SignUp(t, "gina@example.com", "password-gina")
	kg := issue(t, env, adminJWT, "appg", []string{"chat"}, 1000)
	kh := issue(t, env, adminJWT, "apph", []string{"chat"}, 1000)
	gabe, hal, gabeElsewhere := client(env, kg, "gabe"), client(env, kg, "hal"), client(env, kh, "gabe")
	ctx := context.Background()
	forget := func(k key, user string) (int, string) {
		res := env.Do(t, "DELETE", "/api/v1/user", "", nil, "Authorization", "Bearer "+k.Secret, "X-App-User", user)
		return res.Status, string(res.Body)
	}

	r1 := create(t, gabe, "chat", "first", "")
	poll(t, gabe, r1.ID, responses.ResponseStatusCompleted)
	r2 := create(t, gabe, "chat", "second", r1.ID)
	poll(t, gabe, r2.ID, responses.ResponseStatusCompleted)
	long := create(t, gabe, "chat", "tell a #long story", "")
	poll(t, gabe, long.ID, responses.ResponseStatusInProgress)
	kept := create(t, hal, "chat", "hal's", "")
	keptElsewhere := create(t, gabeElsewhere, "chat", "gabe at apph", "")
	poll(t, hal, kept.ID, responses.ResponseStatusCompleted)
	poll(t, gabeElsewhere, keptElsewhere.ID, responses.ResponseStatusCompleted)

	code, body := forget(kg, "gabe")
	require.Equal(t, 200, code, body)
	require.JSONEq(t, `{"deletedConversations": 2}`, body)
	for _, id := range []string{r1.ID, r2.ID, long.ID} {
		_, err := gabe.Responses.Get(ctx, id, responses.ResponseGetParams{})
		require.Equal(t, 404, status(t, err), id)
	}
	_, err := gabe.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", PreviousResponseID: openai.String(r2.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("again")}})
	require.Equal(t, 404, status(t, err), "a forgotten response cannot be continued")
	owner := runtimeapi.AppUserID("appg", "gabe")
	msgs, err := schema.For[schema.Message](env.Store, schema.CollMessages).All(ctx, schema.ListQuery{Owner: owner})
	require.NoError(t, err)
	require.Empty(t, msgs)
	// The long one was cancelled; every run's events go once it has settled.
	require.Eventually(t, func() bool {
		run, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(ctx, strings.TrimPrefix(long.ID, "resp_"))
		return err == nil && run.Status == schema.RunCancelled
	}, 30*time.Second, 50*time.Millisecond)
	rdb := env.Redis.Client()
	defer rdb.Close()
	require.Eventually(t, func() bool {
		_, _ = env.Agent.Expirer.Once(ctx) // the agent's own sweep runs every minute
		evs, err := schema.For[schema.Event](env.Store, schema.CollEvents).All(ctx, schema.ListQuery{Owner: owner})
		n, _ := rdb.Exists(ctx, queue.PurgeRunsKey).Result()
		return err == nil && len(evs) == 0 && n == 0
	}, 30*time.Second, 100*time.Millisecond, "the forgotten runs' events are purged")
	at, err := rdb.ZScore(ctx, queue.PurgeHomesKey, owner).Result()
	require.NoError(t, err, "every agent deletes the user's Hermes home (agent/homes)")
	require.InDelta(t, float64(time.Now().UnixMilli()), at, float64(time.Minute.Milliseconds()))
	// ... and then their records (issue 30); no artifact of theirs is left.
	runs, err := schema.For[schema.Run](env.Store, schema.CollRuns).All(ctx, schema.ListQuery{Owner: owner})
	require.NoError(t, err)
	require.Empty(t, runs, "the forgotten runs' records are deleted once settled")
	arts, err := schema.For[schema.Artifact](env.Store, schema.CollArtifacts).All(ctx, schema.ListQuery{Owner: owner})
	require.NoError(t, err)
	require.Empty(t, arts)

	// Others keep theirs.
	for _, k := range []struct {
		c  openai.Client
		id string
	}{{hal, kept.ID}, {gabeElsewhere, keptElsewhere.ID}} {
		r, err := k.c.Responses.Get(ctx, k.id, responses.ResponseGetParams{})
		require.NoError(t, err)
		require.NotEmpty(t, r.OutputText())
	}
	code, body = forget(kg, "gabe")
	require.Equal(t, 200, code, body)
	require.JSONEq(t, `{"deletedConversations": 0}`, body, "a repeat deletes nothing more")

	// A user linked to a member is the member's.
	require.Equal(t, 200, env.Do(t, "PUT", "/api/runtime-links", adminJWT, map[string]any{"appId": "appg", "user": "gina", "userId": memberID}).Status)
	code, body = forget(kg, "gina")
	require.Equal(t, 409, code, body)
	require.Contains(t, body, "linked_member")

	audit, err := schema.For[schema.Audit](env.Store, schema.CollAudit).All(ctx,
		schema.ListQuery{Filters: []string{query.Equal("actorId", kg.ID), query.Equal("action", runtimeapi.ActionForget)}})
	require.NoError(t, err)
	require.Len(t, audit, 2, "both forgets of gabe are audited; the refused one is not a forget")
}
