package hostapp_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/service"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// issueIn creates a runtime key of an environment through the admin API.
func issueIn(t *testing.T, env *stacktest.Env, adminJWT, app, environment string) key {
	t.Helper()
	res := env.Do(t, "POST", "/api/runtime-keys", adminJWT, map[string]any{"appId": app, "roles": []string{"chat"},
		"rateLimit": 1000, "rateWindowSeconds": 60, "environment": environment})
	require.Equal(t, 201, res.Status, string(res.Body))
	var k struct {
		key
		Environment string `json:"environment"`
	}
	res.JSON(t, &k)
	require.Equal(t, environment, k.Environment)
	return k.key
}

// TestEnvironmentsNeverMix (issue 35 item 3): a staging key and a production key of the
// same app, naming the same user, share nothing: not the user, not a response, not an
// idempotency key, not a link to a member, not the declared tools, not a user token.
func TestEnvironmentsNeverMix(t *testing.T) {
	env := stacktest.New(t, stacktest.Options{Functions: func(c *service.Config) { c.AppCallbackAllow = "https://home.example.com/pa/" }})
	env.StartAgent(t)
	adminID, adminJWT := env.SignUp(t, "env-admin@example.com", "password-env-admin")
	env.Label(t, adminID, "admin")
	memberID, _ := env.SignUp(t, "env-member@example.com", "password-env-member")
	ctx := context.Background()

	res := env.Do(t, "POST", "/api/runtime-keys", adminJWT, map[string]any{"appId": "appenv", "roles": []string{"chat"}, "environment": "Staging!"})
	require.Equal(t, 400, res.Status)
	kp := issueIn(t, env, adminJWT, "appenv", "production")
	ks := issueIn(t, env, adminJWT, "appenv", "staging")
	prod, stag := client(env, kp, "alice"), client(env, ks, "alice")

	// The same Idempotency-Key in each environment: two responses, two users.
	params := responses.ResponseNewParams{Model: "chat", Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hello env")}}
	rp, err := prod.Responses.New(ctx, params, option.WithHeader("Idempotency-Key", "same-key"))
	require.NoError(t, err)
	rs, err := stag.Responses.New(ctx, params, option.WithHeader("Idempotency-Key", "same-key"))
	require.NoError(t, err)
	require.NotEqual(t, rp.ID, rs.ID)
	poll(t, prod, rp.ID, responses.ResponseStatusCompleted)
	poll(t, stag, rs.ID, responses.ResponseStatusCompleted)
	runs := schema.For[schema.Run](env.Store, schema.CollRuns)
	runP, err := runs.Get(ctx, strings.TrimPrefix(rp.ID, "resp_"))
	require.NoError(t, err)
	runS, err := runs.Get(ctx, strings.TrimPrefix(rs.ID, "resp_"))
	require.NoError(t, err)
	require.Equal(t, runtimeapi.AppUserID("appenv", "alice"), runP.OwnerID)
	require.Equal(t, runtimeapi.AppUserID("appenv.staging", "alice"), runS.OwnerID)
	require.NotEqual(t, runP.ConversationID, runS.ConversationID)
	require.LessOrEqual(t, len(runS.RequestID), schema.SizeRequestID)

	// Neither reads, continues, cancels nor deletes the other's.
	_, err = prod.Responses.Get(ctx, rs.ID, responses.ResponseGetParams{})
	require.Equal(t, 404, status(t, err))
	_, err = stag.Responses.Get(ctx, rp.ID, responses.ResponseGetParams{})
	require.Equal(t, 404, status(t, err))
	_, err = stag.Responses.New(ctx, responses.ResponseNewParams{Model: "chat", PreviousResponseID: openai.String(rp.ID),
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("continue across")}})
	require.Equal(t, 404, status(t, err))
	res = env.Do(t, "DELETE", "/api/v1/responses/"+rp.ID, "", nil, "Authorization", "Bearer "+ks.Secret, "X-App-User", "alice")
	require.Equal(t, 404, res.Status)

	// A link to a member is production's: staging's alice stays staging's app user.
	res = env.Do(t, "PUT", "/api/runtime-links", adminJWT, map[string]any{"appId": "appenv", "user": "alice", "userId": memberID})
	require.Equal(t, 200, res.Status, string(res.Body))
	r2 := create(t, stag, "chat", "after the link", "")
	run2, err := runs.Get(ctx, strings.TrimPrefix(r2.ID, "resp_"))
	require.NoError(t, err)
	require.Equal(t, runtimeapi.AppUserID("appenv.staging", "alice"), run2.OwnerID)
	r3 := create(t, prod, "chat", "as the member", "")
	run3, err := runs.Get(ctx, strings.TrimPrefix(r3.ID, "resp_"))
	require.NoError(t, err)
	require.Equal(t, memberID, run3.OwnerID)

	// Tools declared in staging are staging's, named by its space.
	lights := map[string]any{"name": "turn_on_lights", "description": "Turn on the lights.", "schema": map[string]any{"type": "object"},
		"callbackUrl": "https://home.example.com/pa/lights"}
	res = env.Do(t, "PUT", "/api/v1/tools", "", map[string]any{"tools": []any{lights}}, "Authorization", "Bearer "+ks.Secret)
	require.Equal(t, 200, res.Status, string(res.Body))
	var declared struct{ Tools []struct{ App string } }
	res.JSON(t, &declared)
	require.Equal(t, "appenv.staging", declared.Tools[0].App)
	for k, want := range map[string]int{kp.Secret: 0, ks.Secret: 1} {
		res = env.Do(t, "GET", "/api/v1/tools", "", nil, "Authorization", "Bearer "+k)
		require.Equal(t, 200, res.Status, string(res.Body))
		var got struct{ Tools []json.RawMessage }
		res.JSON(t, &got)
		require.Len(t, got.Tools, want)
	}

	// A staging key's user tokens are addressed to the staging space.
	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	uk := &jose.JSONWebKey{Key: ecKey, KeyID: "s1", Algorithm: "ES256", Use: "sig"}
	res = env.Do(t, "PUT", "/api/v1/user-keys", "", map[string]any{"issuer": "https://app.example",
		"jwks": jose.JSONWebKeySet{Keys: []jose.JSONWebKey{uk.Public()}}}, "Authorization", "Bearer "+ks.Secret)
	require.Equal(t, 200, res.Status, string(res.Body))
	now := time.Now()
	res = env.Do(t, "GET", "/api/v1/responses/"+r2.ID, "", nil, "Authorization", "Bearer "+ks.Secret,
		"X-App-User-Token", userToken(t, uk, "https://app.example", "appenv", "alice", now, 5*time.Minute))
	require.Equal(t, 401, res.Status, "a production-addressed token in staging")
	res = env.Do(t, "GET", "/api/v1/responses/"+r2.ID, "", nil, "Authorization", "Bearer "+ks.Secret,
		"X-App-User-Token", userToken(t, uk, "https://app.example", "appenv.staging", "alice", now, 5*time.Minute))
	require.Equal(t, 200, res.Status, string(res.Body))

	// Forgetting staging's alice leaves production's untouched.
	res = env.Do(t, "DELETE", "/api/v1/user", "", nil, "Authorization", "Bearer "+ks.Secret,
		"X-App-User-Token", userToken(t, uk, "https://app.example", "appenv.staging", "alice", now, 5*time.Minute))
	require.Equal(t, 200, res.Status, string(res.Body))
	var forgot map[string]int
	require.NoError(t, json.Unmarshal(res.Body, &forgot))
	require.Equal(t, 2, forgot["deletedConversations"])
	_, err = prod.Responses.Get(ctx, r3.ID, responses.ResponseGetParams{})
	require.NoError(t, err, "production's response stays")
	_, err = runs.Get(ctx, runP.ID)
	require.NoError(t, err, "and so does the one made before the link")
}
