package hostapp_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"
	"github.com/openai/openai-go/v3/responses"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/service"
	"privateassistant/issuer"
	"privateassistant/stacktest"
)

// userToken is a user token an app signs: iss, aud = its app id, sub = its user.
func userToken(t *testing.T, k *jose.JSONWebKey, iss, aud, sub string, iat time.Time, life time.Duration) string {
	t.Helper()
	tok, err := issuer.Sign(k, jwt.Claims{Issuer: iss, Audience: jwt.Audience{aud}, Subject: sub,
		IssuedAt: jwt.NewNumericDate(iat), Expiry: jwt.NewNumericDate(iat.Add(life))})
	require.NoError(t, err)
	return tok
}

// signedClient acts for the user the token names, with no X-App-User header.
func signedClient(env *stacktest.Env, k key, token string) openai.Client {
	return openai.NewClient(option.WithBaseURL(env.URL+"/api/v1/"), option.WithAPIKey(k.Secret),
		option.WithHeader("X-App-User-Token", token), option.WithMaxRetries(0), option.WithRequestTimeout(20*time.Second))
}

// TestSignedUserClaims (issue 35 item 2): once an app registered its own keys with its
// runtime key, the key speaks for a user only through a short-lived JWT the app signed;
// the bare X-App-User header, a leaked key re-registering keys, another app's token, an
// expired, over-long or forged one are all refused.
func TestSignedUserClaims(t *testing.T) {
	jwksSrv := struct {
		set jose.JSONWebKeySet
	}{}
	pub := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_ = json.NewEncoder(w).Encode(jwksSrv.set)
	}))
	t.Cleanup(pub.Close)
	env := stacktest.New(t, stacktest.Options{Functions: func(c *service.Config) { c.AppCallbackAllow = pub.URL + "/keys/" }})
	env.StartAgent(t)
	adminID, adminJWT := env.SignUp(t, "uk-admin@example.com", "password-uk-admin")
	env.Label(t, adminID, "admin")
	ctx := context.Background()
	now := time.Now()

	ecKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	appKey := &jose.JSONWebKey{Key: ecKey, KeyID: "app-1", Algorithm: "ES256", Use: "sig"}
	forger, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	forged := &jose.JSONWebKey{Key: forger, KeyID: "app-1", Algorithm: "ES256", Use: "sig"}
	set := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{appKey.Public()}}

	k := issue(t, env, adminJWT, "appsig", []string{"chat"}, 1000)
	put := func(k key, body any) (int, map[string]any) {
		res := env.Do(t, "PUT", "/api/v1/user-keys", "", body, "Authorization", "Bearer "+k.Secret)
		var m map[string]any
		_ = json.Unmarshal(res.Body, &m)
		return res.Status, m
	}
	st, m := put(k, map[string]any{"issuer": "https://app.example", "jwks": map[string]any{"keys": []any{map[string]any{"kty": "oct", "k": "c2VjcmV0", "kid": "x"}}}})
	require.Equal(t, 400, st, "a shared-secret key is not a public key set: %v", m)
	st, m = put(k, map[string]any{"issuer": "https://app.example", "jwks": set})
	require.Equal(t, 200, st, "%v", m)
	require.Equal(t, "https://app.example", m["userKeys"].(map[string]any)["issuer"])
	// A leaked key cannot replace them.
	evil := jose.JSONWebKeySet{Keys: []jose.JSONWebKey{forged.Public()}}
	st, _ = put(k, map[string]any{"issuer": "https://app.example", "jwks": evil})
	require.Equal(t, 409, st)

	// The bare header no longer speaks for a user.
	bare := client(env, k, "alice")
	_, err := bare.Responses.New(ctx, responses.ResponseNewParams{Model: "chat",
		Input: responses.ResponseNewParamsInputUnion{OfString: openai.String("hi")}})
	require.Equal(t, 401, status(t, err))
	res := env.Do(t, "GET", "/api/v1/responses/resp_rmissing0", "", nil, "Authorization", "Bearer "+k.Secret, "X-App-User", "alice")
	require.Equal(t, "user_token_required", res.ErrorCode())

	// A token the app signed does.
	alice := signedClient(env, k, userToken(t, appKey, "https://app.example", "appsig", "alice", now, 5*time.Minute))
	r1 := create(t, alice, "chat", "hello signed", "")
	done := poll(t, alice, r1.ID, responses.ResponseStatusCompleted)
	require.Equal(t, "You said: hello signed", done.OutputText())

	for name, tok := range map[string]string{
		"another app's audience": userToken(t, appKey, "https://app.example", "otherapp", "alice", now, 5*time.Minute),
		"another issuer":         userToken(t, appKey, "https://evil.example", "appsig", "alice", now, 5*time.Minute),
		"expired":                userToken(t, appKey, "https://app.example", "appsig", "alice", now.Add(-20*time.Minute), 5*time.Minute),
		"a day long":             userToken(t, appKey, "https://app.example", "appsig", "alice", now, 24*time.Hour),
		"forged, same kid":       userToken(t, forged, "https://app.example", "appsig", "alice", now, 5*time.Minute),
		"not a JWT":              "alice",
	} {
		c := signedClient(env, k, tok)
		_, err := c.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{})
		require.Equal(t, 401, status(t, err), name)
	}
	// Another user's token sees nothing of alice's; a header naming another user than the
	// token is refused.
	bob := signedClient(env, k, userToken(t, appKey, "https://app.example", "appsig", "bob", now, 5*time.Minute))
	_, err = bob.Responses.Get(ctx, r1.ID, responses.ResponseGetParams{})
	require.Equal(t, 404, status(t, err))
	res = env.Do(t, "GET", "/api/v1/responses/"+r1.ID, "", nil, "Authorization", "Bearer "+k.Secret,
		"X-App-User-Token", userToken(t, appKey, "https://app.example", "appsig", "bob", now, 5*time.Minute), "X-App-User", "alice")
	require.Equal(t, 401, res.Status)

	// A key without user keys refuses a token instead of ignoring it.
	plain := issue(t, env, adminJWT, "appplain", []string{"chat"}, 1000)
	res = env.Do(t, "GET", "/api/v1/responses/resp_rmissing0", "", nil, "Authorization", "Bearer "+plain.Secret,
		"X-App-User-Token", userToken(t, appKey, "https://app.example", "appplain", "alice", now, 5*time.Minute))
	require.Equal(t, "user_keys_not_registered", res.ErrorCode())

	// By URL (on the admin's allow-list): set by an admin; an unlisted URL is refused.
	res = env.Do(t, "PUT", "/api/runtime-keys/"+plain.ID+"/user-keys", adminJWT, map[string]any{"issuer": "https://plain.example", "jwksUrl": "https://elsewhere.example/keys/jwks"})
	require.Equal(t, 400, res.Status, string(res.Body))
	rsaKey, _ := rsa.GenerateKey(rand.Reader, 2048)
	rsKey := &jose.JSONWebKey{Key: rsaKey, KeyID: "rs-1", Algorithm: "RS256", Use: "sig"}
	jwksSrv.set = jose.JSONWebKeySet{Keys: []jose.JSONWebKey{rsKey.Public()}}
	res = env.Do(t, "PUT", "/api/runtime-keys/"+plain.ID+"/user-keys", adminJWT, map[string]any{"issuer": "https://plain.example", "jwksUrl": pub.URL + "/keys/jwks"})
	require.Equal(t, 200, res.Status, string(res.Body))
	carol := signedClient(env, plain, userToken(t, rsKey, "https://plain.example", "appplain", "carol", now, 5*time.Minute))
	r2 := create(t, carol, "chat", "hello by url", "")
	poll(t, carol, r2.ID, responses.ResponseStatusCompleted)
	res = env.Do(t, "GET", "/api/v1/responses/"+r2.ID, "", nil, "Authorization", "Bearer "+plain.Secret, "X-App-User", "carol")
	require.Equal(t, 401, res.Status)
	// A member's JWT cannot set keys.
	_, memberJWT := env.SignUp(t, "uk-member@example.com", "password-uk-member")
	res = env.Do(t, "PUT", "/api/runtime-keys/"+plain.ID+"/user-keys", memberJWT, map[string]any{"issuer": ""})
	require.Equal(t, 404, res.Status, "an admin endpoint reads as missing to a member: %s", res.Body)

	// An admin clears them: the key names users with the header again.
	res = env.Do(t, "PUT", "/api/runtime-keys/"+plain.ID+"/user-keys", adminJWT, map[string]any{"issuer": ""})
	require.Equal(t, 200, res.Status, string(res.Body))
	carolBare := client(env, plain, "carol")
	_, err = carolBare.Responses.Get(ctx, r2.ID, responses.ResponseGetParams{})
	require.NoError(t, err)
}
