package hostapp_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"

	"privateassistant/runtimeapi"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

type key struct {
	ID     string `json:"id"`
	Secret string `json:"secret"`
}

// issue creates a runtime key through the admin API.
func issue(t *testing.T, env *stacktest.Env, adminJWT, app string, roles []string, limit int) key {
	t.Helper()
	res := env.Do(t, "POST", "/api/runtime-keys", adminJWT, map[string]any{"appId": app, "roles": roles, "rateLimit": limit, "rateWindowSeconds": 60})
	require.Equal(t, 201, res.Status, string(res.Body))
	var k key
	res.JSON(t, &k)
	require.True(t, strings.HasPrefix(k.Secret, runtimeapi.SecretPrefix+k.ID+"_"), k.Secret)
	return k
}

// client is the host app's server: the official OpenAI client, its runtime key, and the
// user it acts for. No retries, so a 429 is seen as it is.
func client(env *stacktest.Env, k key, user string) openai.Client {
	return openai.NewClient(option.WithBaseURL(env.URL+"/api/v1/"), option.WithAPIKey(k.Secret),
		option.WithHeader("X-App-User", user), option.WithMaxRetries(0), option.WithRequestTimeout(20*time.Second))
}

func status(t *testing.T, err error) int {
	t.Helper()
	var e *openai.Error
	require.True(t, errors.As(err, &e), "an API error, got %v", err)
	return e.StatusCode
}

func create(t *testing.T, c openai.Client, model, text, prev string) *responses.Response {
	t.Helper()
	p := responses.ResponseNewParams{Model: model, Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String(text)}}
	if prev != "" {
		p.PreviousResponseID = openai.String(prev)
	}
	r, err := c.Responses.New(context.Background(), p)
	require.NoError(t, err)
	return r
}

// poll gets the response until it is in one of the statuses.
func poll(t *testing.T, c openai.Client, id string, want ...responses.ResponseStatus) *responses.Response {
	t.Helper()
	var last *responses.Response
	require.Eventually(t, func() bool {
		r, err := c.Responses.Get(context.Background(), id, responses.ResponseGetParams{})
		require.NoError(t, err)
		last = r
		for _, w := range want {
			if r.Status == w {
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "response %s never reached %v", id, want)
	return last
}

func TestOpenAIClientAgainstTheRuntimeAPI(t *testing.T) {
	env := stacktest.New(t)
	env.StartAgent(t)
	adminID, adminJWT := env.SignUp(t, "rt-admin@example.com", "password-rt-admin")
	env.Label(t, adminID, "admin")
	memberID, _ := env.SignUp(t, "rt-member@example.com", "password-rt-member")

	ka := issue(t, env, adminJWT, "appa", []string{"chat"}, 1000)
	kb := issue(t, env, adminJWT, "appb", []string{"chat"}, 1000)
	alice := client(env, ka, "alice@appa")

	// Create: queued at once (background mode), then polled until the scripted answer.
	r1 := create(t, alice, "chat", "hello there", "")
	require.Equal(t, responses.ResponseStatusQueued, r1.Status)
	require.True(t, strings.HasPrefix(r1.ID, "resp_"), r1.ID)
	done := poll(t, alice, r1.ID, responses.ResponseStatusCompleted)
	require.Equal(t, "You said: hello there", done.OutputText())
	require.Equal(t, "chat", done.Model)
	require.Positive(t, done.Usage.OutputTokens, "usage once the run ended")
	require.Equal(t, done.Usage.InputTokens+done.Usage.OutputTokens, done.Usage.TotalTokens)

	// The user is the app's own, never a member: a derived Appwrite user with the app's label.
	run, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(context.Background(), strings.TrimPrefix(r1.ID, "resp_"))
	require.NoError(t, err)
	require.Equal(t, runtimeapi.AppUserID("appa", "alice@appa"), run.OwnerID)
	require.NotEqual(t, memberID, run.OwnerID)

	// Continue: the same conversation, and the model sees the earlier turn.
	r2 := create(t, alice, "chat", "and once more", r1.ID)
	require.Equal(t, r1.ID, r2.PreviousResponseID)
	done = poll(t, alice, r2.ID, responses.ResponseStatusCompleted)
	require.Equal(t, "You said: and once more", done.OutputText())
	// GET echoes the response it continues, as OpenAI's does; a first response names none.
	require.Equal(t, r1.ID, done.PreviousResponseID)
	first, err := alice.Responses.Get(context.Background(), r1.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
	require.Empty(t, first.PreviousResponseID)
	run2, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(context.Background(), strings.TrimPrefix(r2.ID, "resp_"))
	require.NoError(t, err)
	require.Equal(t, run.ConversationID, run2.ConversationID)
	sawEarlier := false
	for _, req := range env.Model.Requests() {
		var texts []string
		for _, m := range req.Messages {
			if s, ok := m.Content.(string); ok {
				texts = append(texts, m.Role+": "+s)
			}
		}
		joined := strings.Join(texts, "\n")
		if strings.Contains(joined, "user: and once more") {
			require.Contains(t, joined, "user: hello there")
			require.Contains(t, joined, "assistant: You said: hello there")
			sawEarlier = true
		}
	}
	require.True(t, sawEarlier, "the second turn reached the model")

	// Cancel a running one.
	long := create(t, alice, "chat", "tell a #long story", "")
	poll(t, alice, long.ID, responses.ResponseStatusInProgress)
	_, err = alice.Responses.Cancel(context.Background(), long.ID)
	require.NoError(t, err)
	poll(t, alice, long.ID, responses.ResponseStatusCancelled)

	// Out of scope: a role the key is not scoped to.
	_, err = alice.Responses.New(context.Background(), responses.ResponseNewParams{Model: "research", Background: openai.Bool(true),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("dig")}})
	require.Equal(t, 403, status(t, err))

	// Another app's key, even naming the same user, and another user of the same app see
	// nothing: a foreign response reads exactly like a missing one.
	for _, c := range []openai.Client{client(env, kb, "alice@appa"), client(env, ka, "bob@appa")} {
		_, err = c.Responses.Get(context.Background(), r1.ID, responses.ResponseGetParams{})
		require.Equal(t, 404, status(t, err))
		_, err = c.Responses.Cancel(context.Background(), r1.ID)
		require.Equal(t, 404, status(t, err))
		_, err = c.Responses.New(context.Background(), responses.ResponseNewParams{Model: "chat", Background: openai.Bool(true),
			PreviousResponseID: openai.String(r1.ID), Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("steal")}})
		require.Equal(t, 404, status(t, err))
	}
	missing := env.Do(t, "GET", "/api/v1/responses/resp_rmissing0", "", nil, "Authorization", "Bearer "+kb.Secret, "X-App-User", "alice@appa")
	foreign := env.Do(t, "GET", "/api/v1/responses/"+r1.ID, "", nil, "Authorization", "Bearer "+kb.Secret, "X-App-User", "alice@appa")
	require.Equal(t, missing.Status, foreign.Status)
	require.Equal(t, missing.ErrorCode(), foreign.ErrorCode())

	// A body that is not a JSON object is 400, and admits nothing.
	for _, body := range []string{"null", "[]", `"x"`, "1", "true", " null ", "{"} {
		res := env.Do(t, "POST", "/api/v1/responses", "", body, "Authorization", "Bearer "+ka.Secret, "X-App-User", "alice@appa")
		require.Equal(t, 400, res.Status, "%s: %s", body, res.Body)
	}

	// No key, a JWT instead of a key, a wrong secret: 401.
	require.Equal(t, 401, env.Do(t, "GET", "/api/v1/responses/"+r1.ID, adminJWT, nil, "X-App-User", "alice@appa").Status)
	bad := key{ID: ka.ID, Secret: ka.Secret[:len(ka.Secret)-4] + "AAAA"}
	wrong := client(env, bad, "alice@appa")
	_, err = wrong.Responses.Get(context.Background(), r1.ID, responses.ResponseGetParams{})
	require.Equal(t, 401, status(t, err))

	// Rate limit: the fourth call in the window is refused with 429 and Retry-After.
	kc := issue(t, env, adminJWT, "appc", []string{"chat"}, 3)
	carol := client(env, kc, "carol")
	for i := 0; i < 3; i++ {
		_, err = carol.Responses.Get(context.Background(), "resp_rmissing0", responses.ResponseGetParams{})
		require.Equal(t, 404, status(t, err))
	}
	_, err = carol.Responses.Get(context.Background(), "resp_rmissing0", responses.ResponseGetParams{})
	require.Equal(t, 429, status(t, err))
	var oe *openai.Error
	require.True(t, errors.As(err, &oe))
	require.NotEmpty(t, oe.Response.Header.Get("Retry-After"))

	// Revocation takes effect on the next call.
	res := env.Do(t, "DELETE", "/api/runtime-keys/"+ka.ID, adminJWT, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	_, err = alice.Responses.Get(context.Background(), r1.ID, responses.ResponseGetParams{})
	require.Equal(t, 401, status(t, err))

	// Every use is audited under the key: creations, reads, the cancel, the refusal.
	audit, err := schema.For[schema.Audit](env.Store, schema.CollAudit).All(context.Background(),
		schema.ListQuery{Filters: []string{query.Equal("actorId", ka.ID)}})
	require.NoError(t, err)
	actions := map[string]int{}
	for _, a := range audit {
		actions[a.Action]++
		require.NotContains(t, *a.Detail, ka.Secret)
		require.NotContains(t, *a.Detail, "alice@appa", "the app's own user id stays with the app")
	}
	require.Equal(t, 3, actions[runtimeapi.ActionCreate], "%v", actions)
	require.Equal(t, 1, actions[runtimeapi.ActionCancel], "%v", actions)
	require.Equal(t, 4, actions[runtimeapi.ActionRefused], "the role out of scope, and bob's three tries at alice's response: %v", actions)
	require.Equal(t, 1, actions[runtimeapi.ActionContinue], "%v", actions)
	require.Greater(t, actions[runtimeapi.ActionGet], 3, "%v", actions)

	// The key's record holds no secret, only its hash.
	rec, err := schema.For[schema.RuntimeKey](env.Store, schema.CollRuntimeKeys).Get(context.Background(), ka.ID)
	require.NoError(t, err)
	require.Equal(t, runtimeapi.HashSecret(ka.Secret), rec.SecretHash)
	require.NotNil(t, rec.RevokedAt)
}

func TestLinkedMemberIdempotencyAndEvents(t *testing.T) {
	env := stacktest.New(t)
	env.StartAgent(t)
	adminID, adminJWT := env.SignUp(t, "rt-admin2@example.com", "password-rt-admin")
	env.Label(t, adminID, "admin")
	memberID, memberJWT := env.SignUp(t, "dave@example.com", "password-dave")
	strangerID, _ := env.Stranger(t, "stranger@example.com", "password-stranger")
	kd := issue(t, env, adminJWT, "appd", []string{"chat"}, 1000)
	ctx := context.Background()

	// The member's own web run.
	conv := env.Conversation(t, memberJWT)
	web := env.Admit(t, memberJWT, conv, "web-1", "from the web", "")

	// Only an admin links, and only to a member.
	link := func(jwt, userID string) int {
		return env.Do(t, "PUT", "/api/runtime-links", jwt, map[string]any{"appId": "appd", "user": "dave", "userId": userID}).Status
	}
	require.Equal(t, 403, link(memberJWT, memberID))
	require.Equal(t, 400, link(adminJWT, strangerID))
	require.Equal(t, 200, link(adminJWT, memberID))

	dave := client(env, kd, "dave")
	// Linked, the app acts as the member, but still sees only what it admitted itself.
	_, err := dave.Responses.Get(ctx, "resp_"+web.RunID, responses.ResponseGetParams{})
	require.Equal(t, 404, status(t, err), "the member's web run is not the app's")

	params := responses.ResponseNewParams{Model: "chat", Input: responses.ResponseNewParamsInputUnion{OfInputItemList: responses.ResponseInputParam{
		responses.ResponseInputItemParamOfMessage("first part", responses.EasyInputMessageRoleUser),
		responses.ResponseInputItemParamOfMessage("second part", responses.EasyInputMessageRoleUser),
	}}}
	r1, err := dave.Responses.New(ctx, params, option.WithHeader("Idempotency-Key", "idem-1"))
	require.NoError(t, err)
	again, err := dave.Responses.New(ctx, params, option.WithHeader("Idempotency-Key", "idem-1"))
	require.NoError(t, err)
	require.Equal(t, r1.ID, again.ID, "the same Idempotency-Key is the same response")
	run, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(ctx, strings.TrimPrefix(r1.ID, "resp_"))
	require.NoError(t, err)
	require.Equal(t, memberID, run.OwnerID)
	// The member's web chat hears of it on their change feed.
	feed := env.Do(t, "GET", "/api/conversations/feed?after=0&wait=0", memberJWT, nil)
	require.Equal(t, 200, feed.Status, string(feed.Body))
	require.Contains(t, string(feed.Body), `"runId":"`+run.ID+`"`)

	// Events, long-polled with the key until the run ends.
	var after int64
	terminal := false
	for deadline := time.Now().Add(30 * time.Second); !terminal && time.Now().Before(deadline); {
		res := env.Do(t, "GET", "/api/v1/responses/"+r1.ID+"/events?wait=5&after="+strconv.FormatInt(after, 10), "", nil,
			"Authorization", "Bearer "+kd.Secret, "X-App-User", "dave")
		require.Equal(t, 200, res.Status, string(res.Body))
		var b stacktest.Batch
		res.JSON(t, &b)
		for _, ev := range b.Events {
			require.Equal(t, after+1, ev.Sequence)
			after = ev.Sequence
		}
		terminal = b.Terminal
	}
	require.True(t, terminal)
	require.Positive(t, after)
	done := poll(t, dave, r1.ID, responses.ResponseStatusCompleted)
	require.Equal(t, "You said: first part second part", done.OutputText()) // the echo joins words with spaces

	// Unlinked, the app's user is its own again.
	require.Equal(t, 200, link(adminJWT, ""))
	r2 := create(t, dave, "chat", "hello", "")
	run, err = schema.For[schema.Run](env.Store, schema.CollRuns).Get(ctx, strings.TrimPrefix(r2.ID, "resp_"))
	require.NoError(t, err)
	require.Equal(t, runtimeapi.AppUserID("appd", "dave"), run.OwnerID)
	_, err = dave.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{})
	require.Equal(t, 404, status(t, err), "the member's responses stay the member's")
}
