package service_test

import (
	"fmt"
	"strings"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
)

type endpoint struct {
	method, path string
	body         any
}

// every endpoint, with a placeholder {c} conversation, {r} run, {a} artifact.
var endpoints = []endpoint{
	{"GET", "/api/conversations", nil},
	{"POST", "/api/conversations", map[string]any{"title": "x"}},
	{"GET", "/api/conversations/{c}", nil},
	{"GET", "/api/conversations/{c}/messages", nil},
	{"GET", "/api/conversations/search?q=x", nil},
	{"POST", "/api/conversations/{c}/messages", map[string]any{"requestId": "req-1", "text": "hi"}},
	{"GET", "/api/runs", nil},
	{"GET", "/api/runs/{r}", nil},
	{"GET", "/api/runs/{r}/events?after=0&wait=0", nil},
	{"POST", "/api/runs/{r}/cancel", map[string]any{}},
	{"POST", "/api/runs/{r}/approval", map[string]any{"requestId": "a", "choice": "once"}},
	{"GET", "/api/artifacts?runId={r}", nil},
	{"GET", "/api/artifacts/{a}/download", nil},
	{"GET", "/api/system", nil},
}

func fill(p, c, r, a string) string {
	return strings.NewReplacer("{c}", c, "{r}", r, "{a}", a).Replace(p)
}

func TestEveryEndpointNeedsAVerifiedJWT(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	uid, _ := env.SignUp(t, "a@example.com", "password-aaaa")
	// A JWT that expired: duration 0.
	admin := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey)))
	expired, err := admin.CreateJWT(uid, admin.WithCreateJWTDuration(0))
	require.NoError(t, err)
	for _, ep := range endpoints {
		path := fill(ep.path, "c1", "r1", "a1")
		for name, tok := range map[string]string{"none": "", "garbage": "not-a-jwt", "expired": expired.Jwt} {
			res := env.Do(t, ep.method, path, tok, ep.body)
			require.Equal(t, 401, res.Status, "%s %s with %s token: %s", ep.method, path, name, res.Body)
			require.Equal(t, "unauthenticated", res.ErrorCode())
		}
		// A bearer with a non-Bearer scheme.
		res := env.Do(t, ep.method, path, "", ep.body, "Authorization", "Basic abc")
		require.Equal(t, 401, res.Status)
	}
	// Health is public.
	res := env.Do(t, "GET", "/api/health", "", nil)
	require.Equal(t, 200, res.Status)
}

func TestForeignIDsAnswerLikeMissingOnes(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	_, alice := env.SignUp(t, "alice@example.com", "password-alice")
	_, mallory := env.SignUp(t, "mallory@example.com", "password-mallory")
	conv := env.Conversation(t, alice)
	res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", alice, map[string]any{"requestId": "r1", "text": "secret"})
	require.Equal(t, 202, res.Status, string(res.Body))
	var adm struct{ RunID, MessageID string }
	res.JSON(t, &adm)

	for _, ep := range endpoints {
		if !strings.Contains(ep.path, "{") {
			continue
		}
		foreign := env.Do(t, ep.method, fill(ep.path, conv, adm.RunID, adm.RunID), mallory, ep.body)
		missing := env.Do(t, ep.method, fill(ep.path, "cmissing", "rmissing", "amissing"), mallory, ep.body)
		if strings.HasPrefix(ep.path, "/api/artifacts?") {
			// A list filtered by a foreign run is simply empty.
			require.Equal(t, 200, foreign.Status)
			require.JSONEq(t, `{"artifacts":[],"next":""}`, string(foreign.Body))
			continue
		}
		require.Equal(t, 404, foreign.Status, "%s %s: %s", ep.method, ep.path, foreign.Body)
		require.Equal(t, missing.Status, foreign.Status, ep.path)
		require.Equal(t, requestIDField.ReplaceAllString(string(missing.Body), ""), requestIDField.ReplaceAllString(string(foreign.Body), ""), "%s: a foreign id must read exactly like a missing one", ep.path)
	}
	// Lists never show another user's records.
	for _, p := range []string{"/api/conversations", "/api/runs"} {
		res := env.Do(t, "GET", p, mallory, nil)
		require.Equal(t, 200, res.Status)
		require.NotContains(t, string(res.Body), conv)
		require.NotContains(t, string(res.Body), adm.RunID)
	}
}

func TestSpoofedIdentityHeadersAreIgnored(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	victim, victimJWT := env.SignUp(t, "victim@example.com", "password-victim")
	_, attacker := env.SignUp(t, "attacker@example.com", "password-attacker")
	conv := env.Conversation(t, victimJWT)
	for _, h := range []string{"X-Appwrite-User-Id", "x-appwrite-user-id", "X-APPWRITE-USER-ID"} {
		res := env.Do(t, "GET", "/api/conversations/"+conv, attacker, nil, h, victim, "X-Appwrite-User-Jwt", victimJWT)
		require.Equal(t, 404, res.Status, h)
		list := env.Do(t, "GET", "/api/conversations", attacker, nil, h, victim)
		require.NotContains(t, string(list.Body), conv)
	}
	// No Authorization but a spoofed user id: still unauthenticated.
	res := env.Do(t, "GET", "/api/conversations", "", nil, "X-Appwrite-User-Id", victim)
	require.Equal(t, 401, res.Status)
	// Identity in a body is rejected as an unknown field, never used.
	res = env.Do(t, "POST", "/api/conversations/"+conv+"/messages", attacker, map[string]any{"requestId": "x", "text": "t", "ownerId": victim})
	require.Equal(t, 400, res.Status)
	require.Equal(t, "unknown_field", res.ErrorCode())
}

func TestBadInputIsRefusedClearly(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "b@example.com", "password-bbbb")
	conv := env.Conversation(t, jwt)
	cases := []struct {
		method, path string
		body         any
		status       int
		code         string
	}{
		{"POST", "/api/conversations/" + conv + "/messages", strings.Repeat("x", 200<<10), 413, "body_too_large"},
		{"POST", "/api/conversations/" + conv + "/messages", map[string]any{"requestId": "r", "text": strings.Repeat("é", 16385)}, 413, "text_too_long"},
		{"POST", "/api/conversations/" + conv + "/messages", map[string]any{"requestId": "r", "text": "  "}, 400, "invalid_text"},
		{"POST", "/api/conversations/" + conv + "/messages", map[string]any{"requestId": "bad id!", "text": "x"}, 400, "invalid_request_id"},
		{"POST", "/api/conversations/" + conv + "/messages", map[string]any{"requestId": "r", "text": "x", "role": "Bad Role"}, 400, "invalid_role"},
		{"POST", "/api/conversations/" + conv + "/messages", map[string]any{"requestId": "r", "text": "x", "role": "poetry"}, 400, "invalid_role"},
		{"POST", "/api/conversations/" + conv + "/messages", `{"requestId":"r","text":"x"} trailing`, 400, "invalid_json"},
		{"POST", "/api/conversations/" + conv + "/messages", `[1,2]`, 400, "invalid_json"},
		{"GET", "/api/conversations/bad$id/messages", nil, 400, "invalid_id"},
		{"GET", "/api/conversations?limit=1000", nil, 400, "invalid_limit"},
		{"GET", "/api/runs?status=sleeping", nil, 400, "invalid_status"},
		{"GET", "/api/runs/r1/events?after=-1", nil, 400, "invalid_after"},
		{"GET", "/api/runs/r1/events?wait=60", nil, 400, "invalid_wait"},
		{"POST", "/api/runs/r1/approval", map[string]any{"requestId": "a", "choice": "always"}, 400, "invalid_choice"},
		{"POST", "/api/runs/r1/cancel", strings.Repeat("x", 2000), 413, "body_too_large"},
		{"POST", "/api/conversations", map[string]any{"title": strings.Repeat("t", 201)}, 400, "invalid_title"},
		{"GET", "/api/artifacts", nil, 400, "invalid_filter"},
		{"DELETE", "/api/conversations", nil, 405, "method_not_allowed"},
		{"GET", "/api/runs/r1/nothing", nil, 404, "route_not_found"},
	}
	for _, c := range cases {
		res := env.Do(t, c.method, c.path, jwt, c.body)
		require.Equal(t, c.status, res.Status, "%s %s: %s", c.method, c.path, res.Body)
		require.Equal(t, c.code, res.ErrorCode(), "%s %s", c.method, c.path)
	}
}

func TestCORSAllowList(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "cors@example.com", "password-cors")
	ok := env.Do(t, "OPTIONS", "/api/conversations", "", nil, "Origin", "http://127.0.0.1:8080", "Access-Control-Request-Method", "POST")
	require.Equal(t, 204, ok.Status)
	require.Equal(t, "http://127.0.0.1:8080", ok.Header.Get("Access-Control-Allow-Origin"))
	require.Contains(t, ok.Header.Get("Access-Control-Allow-Headers"), "Authorization")
	// The stream service shares this API: a web on another origin resumes its streams.
	require.Contains(t, ok.Header.Get("Access-Control-Allow-Headers"), "Last-Event-ID")
	bad := env.Do(t, "OPTIONS", "/api/conversations", "", nil, "Origin", "https://evil.example")
	require.Equal(t, 403, bad.Status)
	require.Empty(t, bad.Header.Get("Access-Control-Allow-Origin"))
	res := env.Do(t, "GET", "/api/conversations", jwt, nil, "Origin", "https://evil.example")
	require.Equal(t, 403, res.Status)
	res = env.Do(t, "GET", "/api/conversations", jwt, nil, "Origin", "http://127.0.0.1:8080")
	require.Equal(t, 200, res.Status)
	require.Equal(t, "http://127.0.0.1:8080", res.Header.Get("Access-Control-Allow-Origin"))
}

func TestConversationsAndMessagesPaginate(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "p@example.com", "password-pppp")
	// Idempotent create by requestId.
	a := env.Do(t, "POST", "/api/conversations", jwt, map[string]any{"title": "same", "requestId": "conv-1"})
	b := env.Do(t, "POST", "/api/conversations", jwt, map[string]any{"title": "same", "requestId": "conv-1"})
	require.Equal(t, 201, a.Status)
	require.JSONEq(t, string(a.Body), string(b.Body))
	var conv struct{ ID string }
	a.JSON(t, &conv)
	for i := 0; i < 30; i++ {
		res := env.Do(t, "POST", "/api/conversations/"+conv.ID+"/messages", jwt, map[string]any{"requestId": fmt.Sprintf("m%02d", i), "text": fmt.Sprintf("message %d", i)})
		require.Equal(t, 202, res.Status, string(res.Body))
	}
	var seqs []int64
	cursor := ""
	for {
		res := env.Do(t, "GET", "/api/conversations/"+conv.ID+"/messages?limit=7&cursor="+cursor, jwt, nil)
		require.Equal(t, 200, res.Status)
		var page struct {
			Messages []struct {
				Sequence int64
				Text     string
				Role     string
			}
			Next string
		}
		res.JSON(t, &page)
		for _, m := range page.Messages {
			seqs = append(seqs, m.Sequence)
			require.Equal(t, "user", m.Role)
		}
		if page.Next == "" {
			break
		}
		cursor = page.Next
	}
	require.Len(t, seqs, 30)
	for i, s := range seqs {
		require.Equal(t, int64(i+1), s)
	}
	res := env.Do(t, "GET", "/api/runs?limit=100", jwt, nil)
	var runs struct {
		Runs []struct {
			Status   string
			Progress any
			Terminal bool
		}
	}
	res.JSON(t, &runs)
	require.Len(t, runs.Runs, 30)
	require.Equal(t, "queued", runs.Runs[0].Status)
	require.Nil(t, runs.Runs[0].Progress, "unknown progress stays unknown")
}
