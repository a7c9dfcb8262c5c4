package service_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/functions/service"
	"privateassistant/schema"
)

// signIn signs in with email and password and returns a JWT (as the web and CLI do).
func signIn(t *testing.T, env *functionstest.Env, email, password string) (string, error) {
	t.Helper()
	acc := appwrite.NewAccount(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project)))
	if _, err := acc.CreateEmailPasswordSession(email, password); err != nil {
		return "", err
	}
	j, err := acc.CreateJWT()
	if err != nil {
		return "", err
	}
	return j.Jwt, nil
}

func countOwned[T any](t *testing.T, env *functionstest.Env, coll, owner string) int {
	t.Helper()
	all, err := schema.For[T](env.Store, coll).All(context.Background(), schema.ListQuery{Owner: owner})
	require.NoError(t, err)
	return len(all)
}

func TestPublicSignUpGetsNothing(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	uid, stranger := env.Stranger(t, "walkin@example.com", "password-walkin")
	res := env.Do(t, "POST", "/api/conversations", stranger, map[string]any{"title": "x"})
	require.Equal(t, 403, res.Status, string(res.Body))
	require.Equal(t, "not_a_member", res.ErrorCode())
	require.Contains(t, string(res.Body), "invitation")
	require.Zero(t, countOwned[schema.Conversation](t, env, schema.CollConversations, uid), "nothing stored")
	me := env.Do(t, "GET", "/api/me", stranger, nil)
	require.Equal(t, 200, me.Status)
	require.JSONEq(t, fmt.Sprintf(`{"id":%q,"email":"walkin@example.com","name":"","member":false,"admin":false,"roles":[]}`, uid), string(me.Body))

	// Admitted by an admin (the member label), the same JWT works; removed, it stops.
	bossID, admin := env.SignUp(t, "boss@example.com", "password-boss")
	env.Label(t, bossID, "admin")
	res = env.Do(t, "PUT", "/api/members/"+uid, admin, map[string]any{"member": true})
	require.Equal(t, 200, res.Status, string(res.Body))
	require.Eventually(t, func() bool {
		return env.Do(t, "GET", "/api/conversations", stranger, nil).Status == 200
	}, 10*time.Second, 100*time.Millisecond, "admitted within the JWT cache bound")
	res = env.Do(t, "PUT", "/api/members/"+uid, admin, map[string]any{"member": false})
	require.Equal(t, 200, res.Status, string(res.Body))
	require.Eventually(t, func() bool {
		return env.Do(t, "GET", "/api/conversations", stranger, nil).Status == 403
	}, 10*time.Second, 100*time.Millisecond, "removed within the JWT cache bound")
}

func TestAdminCreatesMembers(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	adminID, admin := env.SignUp(t, "root@example.com", "password-root")
	env.Label(t, adminID, "admin")
	_, member := env.SignUp(t, "plain@example.com", "password-plain")

	res := env.Do(t, "POST", "/api/members", member, map[string]any{"email": "new@example.com", "password": "password-new1"})
	require.Equal(t, 403, res.Status, "a member is not an admin")
	res = env.Do(t, "POST", "/api/members", admin, map[string]any{"email": "new@example.com", "password": "password-new1", "name": "New"})
	require.Equal(t, 201, res.Status, string(res.Body))
	require.Contains(t, string(res.Body), `"member":true`)
	jwt, err := signIn(t, env, "new@example.com", "password-new1")
	require.NoError(t, err)
	require.Equal(t, 200, env.Do(t, "GET", "/api/conversations", jwt, nil).Status)
	res = env.Do(t, "POST", "/api/members", admin, map[string]any{"email": "new@example.com", "password": "password-new2"})
	require.Equal(t, 409, res.Status)
	require.Equal(t, "account_exists", res.ErrorCode())
	res = env.Do(t, "POST", "/api/members", admin, map[string]any{"email": "x@example.com", "password": "short"})
	require.Equal(t, "invalid_password", res.ErrorCode())
}

func TestInvitationIsConsumedExactlyOnce(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	adminID, admin := env.SignUp(t, "root@example.com", "password-root")
	env.Label(t, adminID, "admin")
	_, member := env.SignUp(t, "plain@example.com", "password-plain")
	require.Equal(t, 403, env.Do(t, "POST", "/api/invitations", member, map[string]any{}).Status, "members do not invite")

	res := env.Do(t, "POST", "/api/invitations", admin, map[string]any{"expiresInHours": 24})
	require.Equal(t, 201, res.Status, string(res.Body))
	var inv struct{ ID, Token, ExpiresAt string }
	res.JSON(t, &inv)
	require.Len(t, inv.Token, 43)
	require.Equal(t, service.InvitationID(inv.Token), inv.ID)
	// The token is not in the record.
	rec, err := schema.For[schema.Invitation](env.Store, schema.CollInvitations).Get(context.Background(), inv.ID)
	require.NoError(t, err)
	require.NotContains(t, fmt.Sprint(*rec), inv.Token)

	// Twenty redeem at once, each with its own email: exactly one account is made.
	const n = 20
	var wg sync.WaitGroup
	statuses := make([]functionstest.Response, n)
	start := make(chan struct{})
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			statuses[i] = env.Do(t, "POST", "/api/invitations/redeem", "", map[string]any{"token": inv.Token,
				"email": fmt.Sprintf("guest%02d@example.com", i), "password": "password-guest"})
		}()
	}
	close(start)
	wg.Wait()
	won := -1
	for i, r := range statuses {
		switch r.Status {
		case 201:
			require.Equal(t, -1, won, "a second redemption succeeded")
			won = i
		case 409:
			require.Equal(t, "invitation_used", r.ErrorCode(), string(r.Body))
		default:
			t.Fatalf("redeem %d: %d %s", i, r.Status, r.Body)
		}
	}
	require.NotEqual(t, -1, won)
	jwt, err := signIn(t, env, fmt.Sprintf("guest%02d@example.com", won), "password-guest")
	require.NoError(t, err)
	require.Equal(t, 200, env.Do(t, "GET", "/api/conversations", jwt, nil).Status, "the invitee is a member")
	for i := range n {
		if i != won {
			_, err := signIn(t, env, fmt.Sprintf("guest%02d@example.com", i), "password-guest")
			require.Error(t, err, "no account for a losing redemption")
		}
	}
	// Later: still used.
	res = env.Do(t, "POST", "/api/invitations/redeem", "", map[string]any{"token": inv.Token, "email": "late@example.com", "password": "password-late"})
	require.Equal(t, 409, res.Status)

	// An unknown token and an expired invitation.
	res = env.Do(t, "POST", "/api/invitations/redeem", "", map[string]any{"token": strings.Repeat("A", 43), "email": "u@example.com", "password": "password-uuuu"})
	require.Equal(t, 403, res.Status)
	require.Equal(t, "invitation_invalid", res.ErrorCode())
	expiredTok := strings.Repeat("B", 43)
	_, err = schema.For[schema.Invitation](env.Store, schema.CollInvitations).Create(context.Background(), service.InvitationID(expiredTok), "",
		&schema.Invitation{CreatedBy: adminID, ExpiresAt: time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	res = env.Do(t, "POST", "/api/invitations/redeem", "", map[string]any{"token": expiredTok, "email": "e@example.com", "password": "password-eeee"})
	require.Equal(t, 403, res.Status)
	require.Equal(t, "invitation_expired", res.ErrorCode())
	_, err = signIn(t, env, "e@example.com", "password-eeee")
	require.Error(t, err)
}

const restrictedBootstrap = `{
  "harnesses": [{"profileId": "direct", "kind": "direct", "baseUrl": "http://127.0.0.1:1/v1", "profileName": "", "keyRef": "GATEWAY_API_KEY"}],
  "routes": [{"routeId": "chat", "alias": "chat", "device": "arc", "backendModel": "demo-chat", "contextBudget": 131072, "maxOutput": 1024}],
  "toolCeiling": ["terminal", "file", "web"],
  "roles": {
    "chat": {"harness": "direct", "route": "chat", "tools": []},
    "coding": {"harness": "direct", "route": "chat", "tools": ["terminal", "file"], "labels": ["admin", "coder"]}
  }
}`

func TestRolesByPermission(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t, functionstest.Options{Bootstrap: restrictedBootstrap})
	uid, member := env.SignUp(t, "m@example.com", "password-mmmm")
	conv := env.Conversation(t, member)

	res := env.Do(t, "GET", "/api/roles", member, nil)
	require.Equal(t, 200, res.Status)
	require.JSONEq(t, `{"roles":[{"name":"chat","tools":[]}]}`, string(res.Body))

	res = env.Do(t, "POST", "/api/conversations/"+conv+"/messages", member, map[string]any{"requestId": "r1", "text": "rm -rf", "role": "coding"})
	require.Equal(t, 403, res.Status, string(res.Body))
	require.Equal(t, "role_not_allowed", res.ErrorCode())
	require.Zero(t, countOwned[schema.Message](t, env, schema.CollMessages, uid), "nothing stored")
	require.Zero(t, countOwned[schema.Run](t, env, schema.CollRuns, uid), "nothing stored")
	// No sequence was used either: the next message is number 1.
	res = env.Do(t, "POST", "/api/conversations/"+conv+"/messages", member, map[string]any{"requestId": "r2", "text": "hi"})
	require.Equal(t, 202, res.Status, string(res.Body))
	require.Contains(t, string(res.Body), `"sequence":1`)

	env.Label(t, uid, "member", "coder")
	require.Eventually(t, func() bool {
		return env.Do(t, "POST", "/api/conversations/"+conv+"/messages", member, map[string]any{"requestId": "r3", "text": "ls", "role": "coding"}).Status == 202
	}, 10*time.Second, 100*time.Millisecond)
	res = env.Do(t, "GET", "/api/roles", member, nil)
	require.JSONEq(t, `{"roles":[{"name":"chat","tools":[]},{"name":"coding","tools":["file","terminal"]}]}`, string(res.Body))
}

func TestFoundDefects(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t, functionstest.Options{Mutate: func(c *service.Config) { c.ConversationRate = 5 }})
	aliceID, alice := env.SignUp(t, "alice@example.com", "password-alice")
	_, mallory := env.SignUp(t, "mallory@example.com", "password-mallory")
	conv := env.Conversation(t, alice)
	res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", alice, map[string]any{"requestId": "r1", "text": "first"})
	require.Equal(t, 202, res.Status, string(res.Body))
	var adm struct{ RunID, MessageID string }
	res.JSON(t, &adm)

	t.Run("a foreign cursor answers like a missing one", func(t *testing.T) {
		mconv := env.Conversation(t, mallory)
		for _, c := range []struct{ path, foreign string }{
			{"/api/conversations?cursor=", conv},
			{"/api/runs?cursor=", adm.RunID},
			{"/api/conversations/" + mconv + "/messages?cursor=", adm.MessageID},
			{"/api/artifacts?conversationId=" + mconv + "&cursor=", adm.RunID},
		} {
			f := env.Do(t, "GET", c.path+c.foreign, mallory, nil)
			m := env.Do(t, "GET", c.path+"xmissing1", mallory, nil)
			same(t, c.path, f, m)
			require.Equal(t, 400, f.Status, "%s: %s", c.path, f.Body)
			require.JSONEq(t, `{"error":{"code":"invalid_cursor","message":"cursor is not valid"}}`, requestIDField.ReplaceAllString(string(f.Body), ""))
		}
	})

	t.Run("a reused requestId with another text or role is 409 and stores nothing", func(t *testing.T) {
		before := countOwned[schema.Message](t, env, schema.CollMessages, aliceID)
		for _, body := range []map[string]any{
			{"requestId": "r1", "text": "different"},
			{"requestId": "r1", "text": "first", "role": "research"},
		} {
			res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", alice, body)
			require.Equal(t, 409, res.Status, string(res.Body))
			require.Equal(t, "request_id_reused", res.ErrorCode())
		}
		require.Equal(t, before, countOwned[schema.Message](t, env, schema.CollMessages, aliceID))
		run, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(context.Background(), adm.RunID)
		require.NoError(t, err)
		require.Equal(t, "chat", run.Role)
		// The same request again is still the same answer.
		res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", alice, map[string]any{"requestId": "r1", "text": "first"})
		require.Equal(t, 202, res.Status, string(res.Body))
		require.Contains(t, string(res.Body), adm.RunID)

		a := env.Do(t, "POST", "/api/conversations", alice, map[string]any{"title": "one", "requestId": "cr-1"})
		require.Equal(t, 201, a.Status)
		b := env.Do(t, "POST", "/api/conversations", alice, map[string]any{"title": "two", "requestId": "cr-1"})
		require.Equal(t, 409, b.Status, string(b.Body))
		require.Equal(t, "request_id_reused", b.ErrorCode())
		var c struct{ ID string }
		a.JSON(t, &c)
		got, err := schema.For[schema.Conversation](env.Store, schema.CollConversations).Get(context.Background(), c.ID)
		require.NoError(t, err)
		require.Equal(t, "one", got.Title)
	})

	t.Run("a body that is not a JSON object is 400 on every route taking one", func(t *testing.T) {
		api, err := env.Svc.API("all")
		require.NoError(t, err)
		before := countOwned[schema.Conversation](t, env, schema.CollConversations, aliceID)
		for _, rt := range api.Routes() {
			m, path, _ := strings.Cut(rt.Pattern, " ")
			if m == "GET" || rt.RuntimeKey {
				continue // a JWT is not a runtime key: 401 first (hostapp/responses_test.go sends these bodies with a key)
			}
			path = paramRe.ReplaceAllString(path, conv)
			for _, body := range []string{"null", "[]", `"x"`, "1", "true", " null "} {
				res := env.Do(t, m, path, alice, body)
				require.Contains(t, []int{400, 403, 404}, res.Status, "%s %s: %s", rt.Pattern, body, res.Body)
				if rt.Pattern == "POST /api/conversations" {
					require.Equal(t, 400, res.Status)
					require.Equal(t, "invalid_json", res.ErrorCode())
				}
			}
		}
		require.Equal(t, before, countOwned[schema.Conversation](t, env, schema.CollConversations, aliceID), "no conversation from a null body")
	})

	t.Run("admin path ids are validated before use", func(t *testing.T) {
		adminID, admin := env.SignUp(t, "root@example.com", "password-root")
		env.Label(t, adminID, "admin")
		for _, id := range []string{strings.Repeat("h", 5000), "bad$id"} {
			res := env.Do(t, "POST", "/api/harnesses/"+id+"/validate?revision=1", admin, map[string]any{})
			require.Equal(t, 400, res.Status, string(res.Body))
			require.Equal(t, "invalid_id", res.ErrorCode())
			res = env.Do(t, "PUT", "/api/members/"+id, admin, map[string]any{"member": true})
			require.Equal(t, 400, res.Status, string(res.Body))
			require.Equal(t, "invalid_id", res.ErrorCode())
		}
		res := env.Do(t, "GET", "/api/audit?target="+strings.Repeat("t", 5000), admin, nil)
		require.Equal(t, 400, res.Status)
		require.NotContains(t, strings.ToLower(string(res.Body)), "appwrite")
	})

	t.Run("conversation creation is rate limited", func(t *testing.T) {
		_, carol := env.SignUp(t, "carol@example.com", "password-carol")
		for i := range 5 {
			res := env.Do(t, "POST", "/api/conversations", carol, map[string]any{"title": fmt.Sprint(i)})
			require.Equal(t, 201, res.Status, string(res.Body))
		}
		res := env.Do(t, "POST", "/api/conversations", carol, map[string]any{"title": "one too many"})
		require.Equal(t, 429, res.Status, string(res.Body))
		require.Equal(t, "rate_limited", res.ErrorCode())
		require.NotEmpty(t, res.Header.Get("Retry-After"))
		page, err := schema.For[schema.Conversation](env.Store, schema.CollConversations).List(context.Background(), schema.ListQuery{AllOwners: true,
			Filters: []string{query.Equal("title", "one too many")}})
		require.NoError(t, err)
		require.Empty(t, page.Items)
	})
}
