package service_test

import (
	"cmp"
	"context"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/role"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/functions/httpapi"
	"privateassistant/functions/service"
	"privateassistant/schema"
)

// sample is what the matrix sends to a route beyond its path: a query and a body that get
// past input validation, so the ownership check is what answers. A route without a sample
// gets "?runId={r}&conversationId={c}" (GET) or {} (POST/PUT): it is covered all the same.
type sample struct {
	query string
	body  any
}

var samples = map[string]sample{
	"POST /api/conversations":               {body: map[string]any{"title": "matrix"}},
	"POST /api/conversations/{id}/messages": {body: map[string]any{"requestId": "matrix-1", "text": "hi"}},
	"PATCH /api/conversations/{id}":         {body: map[string]any{"title": "renamed"}},
	"GET /api/runs/{id}/events":             {query: "after=0&wait=0"},
	"POST /api/runs/{id}/approval":          {body: map[string]any{"requestId": "a", "choice": "once"}},
	"POST /api/harnesses/{id}/validate":     {query: "revision=1"},
	"PUT /api/members/{id}":                 {body: map[string]any{"member": true}},
}

// ids names, per path prefix, what {id} is: the owner's record, and a missing one. A new
// route with an {id} under a prefix not listed here fails the matrix until it is added.
type ids struct{ conv, run, art, harness, user, device, route, invitation string }

// asMissing are the admin routes where a member's JWT must get exactly the answer an
// admin gets for a missing object (issue 33 item 5: every new people endpoint).
var asMissing = map[string]bool{"GET /api/members": true, "GET /api/invitations": true, "DELETE /api/invitations/{id}": true,
	"GET /api/releases": true, "GET /api/releases/{seq}": true, "POST /api/releases/{seq}/evidence": true,
	"POST /api/releases/{seq}/approve": true, "POST /api/releases/{seq}/promote": true, "POST /api/releases/{seq}/rollback": true}

func idFor(path string, x ids) (string, bool) {
	switch {
	case strings.HasPrefix(path, "/api/conversations/"):
		return x.conv, true
	case strings.HasPrefix(path, "/api/runs/"):
		return x.run, true
	case strings.HasPrefix(path, "/api/artifacts/"):
		return x.art, true
	case strings.HasPrefix(path, "/api/harnesses/"):
		return x.harness, true
	case strings.HasPrefix(path, "/api/invitations/"):
		return x.invitation, true
	case strings.HasPrefix(path, "/api/members/"):
		return x.user, true
	case strings.HasPrefix(path, "/api/gpus/"):
		return x.device, true
	case strings.HasPrefix(path, "/api/model-routes/"):
		return x.route, true
	case strings.HasPrefix(path, "/api/releases/"):
		return "1", true // the bootstrap's release
	case strings.HasPrefix(path, "/api/environments/"):
		return "staging", true // a runtime environment (none promoted: following is a no-op)
	case strings.HasPrefix(path, "/api/runtime-keys/"), strings.HasPrefix(path, "/api/v1/responses/"):
		return "resp_" + x.run, true // runtime keys and responses: hostapp/responses_test.go owns their matrix
	}
	return "", false
}

var paramRe = regexp.MustCompile(`\{[a-zA-Z]+\}`)

// request builds the method, path and body of a route for the ids given.
func request(t *testing.T, rt httpapi.RouteInfo, x ids) (string, string, any) {
	method, path, _ := strings.Cut(rt.Pattern, " ")
	if paramRe.MatchString(path) {
		id, ok := idFor(path, x)
		require.True(t, ok, "the matrix has no id for %s: add its prefix to idFor", rt.Pattern)
		path = paramRe.ReplaceAllString(path, id)
	}
	smp, ok := samples[rt.Pattern]
	q := smp.query
	if !ok && method == "GET" {
		q = "runId=" + x.run + "&conversationId=" + x.conv
	}
	if q != "" {
		path += "?" + q
	}
	var body any
	if method != "GET" {
		body = smp.body
		if body == nil {
			body = map[string]any{}
		}
	}
	return method, path, body
}

// adminRoute: served by the admin function (its prefixes).
func adminRoute(pattern string) bool {
	_, path, _ := strings.Cut(pattern, " ")
	for _, fn := range service.Functions {
		if fn.Name != "admin" {
			continue
		}
		for _, p := range fn.Prefixes {
			if path == p || strings.HasPrefix(path, p+"/") {
				return true
			}
		}
	}
	return false
}

// requestIDField is the envelope's request id, different for each request.
var requestIDField = regexp.MustCompile(`,?"requestId":"[^"]*"`)

// same asserts two answers are identical byte for byte: status, body (but its request
// id) and every header but Date, X-Appwrite-Execution-Id (Appwrite's random id of each
// execution, set by the runtime whatever the function answers) and X-Request-Id.
func same(t *testing.T, what string, a, b functionstest.Response) {
	t.Helper()
	require.Equal(t, a.Status, b.Status, "%s: status", what)
	// Each request has its own id (X-Request-Id and the envelope's requestId).
	require.Equal(t, requestIDField.ReplaceAllString(string(a.Body), ""), requestIDField.ReplaceAllString(string(b.Body), ""), "%s: body", what)
	ha, hb := a.Header.Clone(), b.Header.Clone()
	for _, h := range []string{"Date", "X-Appwrite-Execution-Id", "X-Request-Id"} {
		ha.Del(h)
		hb.Del(h)
	}
	require.Equal(t, ha, hb, "%s: headers", what)
}

// TestSecurityMatrix walks every route the functions register (the route table itself,
// so a new endpoint is in it without anyone adding it) as owner, other member, missing id,
// guest, non-member, non-admin and admin.
func TestSecurityMatrix(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	aliceID, alice := env.SignUp(t, "alice@example.com", "password-alice")
	_, mallory := env.SignUp(t, "mallory@example.com", "password-mallory")
	_, stranger := env.Stranger(t, "stranger@example.com", "password-stranger")
	adminID, admin := env.SignUp(t, "root@example.com", "password-root")
	env.Label(t, adminID, "admin")

	// Alice's records: a conversation, a run, an artifact.
	conv := env.Conversation(t, alice)
	res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", alice, map[string]any{"requestId": "r1", "text": "secret"})
	require.Equal(t, 202, res.Status, string(res.Body))
	var adm struct{ RunID string }
	res.JSON(t, &adm)
	p := filepath.Join(t.TempDir(), "f")
	require.NoError(t, os.WriteFile(p, []byte("artifact"), 0o600))
	_, err := appwrite.NewStorage(env.Client).CreateFile(schema.BucketArtifacts, "fm1", file.NewInputFile(p, "a.txt"),
		appwrite.NewStorage(env.Client).WithCreateFilePermissions([]string{permission.Read(role.User(aliceID, ""))}))
	require.NoError(t, err)
	_, err = schema.For[schema.Artifact](env.Store, schema.CollArtifacts).Create(ctx, "am1", aliceID, &schema.Artifact{OwnerID: aliceID,
		ConversationID: conv, RunID: adm.RunID, Filename: "a.txt", MimeType: "text/plain", Size: 8, Checksum: "x", BucketID: schema.BucketArtifacts, FileID: "fm1"})
	require.NoError(t, err)

	res = env.Do(t, "POST", "/api/invitations", admin, map[string]any{})
	require.Equal(t, 201, res.Status, string(res.Body))
	var inv struct{ ID string }
	res.JSON(t, &inv)

	own := ids{conv: conv, run: adm.RunID, art: "am1", harness: "direct", user: aliceID, device: "arc", route: "chat", invitation: inv.ID}
	missing := ids{conv: "cmissing0", run: "rmissing0", art: "amissing0", harness: "nosuchharness", user: "umissing0", device: "nosuchgpu", route: "nosuchroute",
		invitation: "imissing0"}

	api, err := env.Svc.API("all")
	require.NoError(t, err)
	routes := api.Routes()
	require.GreaterOrEqual(t, len(routes), 20)
	// The conversation's delete goes last: after it, its run and artifact read as missing
	// to their owner too (issue 30).
	slices.SortStableFunc(routes, func(a, b httpapi.RouteInfo) int {
		return cmp.Compare(boolInt(a.Pattern == "DELETE /api/conversations/{id}"), boolInt(b.Pattern == "DELETE /api/conversations/{id}"))
	})
	for _, rt := range routes {
		t.Logf("%s", rt.Pattern)
		m, ownPath, ownBody := request(t, rt, own)
		_, missPath, missBody := request(t, rt, missing)
		what := rt.Pattern

		// Guest: 401 on everything but the public routes.
		g := env.Do(t, m, ownPath, "", ownBody)
		if rt.RuntimeKey {
			// The runtime API takes a host app's key, never a JWT (hostapp/responses_test.go
			// walks keys, apps and users).
			require.Equal(t, 401, g.Status, "%s as guest: %s", what, g.Body)
			o := env.Do(t, m, ownPath, alice, ownBody, "X-App-User", "alice")
			require.Equal(t, 401, o.Status, "%s with a member's JWT: %s", what, o.Body)
			require.Equal(t, "invalid_api_key", o.ErrorCode(), what)
			continue
		}
		if rt.Public {
			require.NotEqual(t, 401, g.Status, what)
			continue
		}
		if rt.Scheduled {
			// Only a scheduled execution reaches it: no function domain serves its path.
			require.Equal(t, 404, g.Status, what)
			continue
		}
		require.Equal(t, 401, g.Status, "%s as guest: %s", what, g.Body)
		require.Equal(t, "unauthenticated", g.ErrorCode())

		// Non-member (public sign-up, never admitted): nothing but "who am I".
		nm := env.Do(t, m, ownPath, stranger, ownBody)
		if rt.AnyUser {
			require.Equal(t, 200, nm.Status, what)
			require.Contains(t, string(nm.Body), `"member":false`)
		} else {
			require.Equal(t, 403, nm.Status, "%s as non-member: %s", what, nm.Body)
			require.Equal(t, "not_a_member", nm.ErrorCode(), what)
			same(t, what+" non-member: foreign vs missing", nm, env.Do(t, m, missPath, stranger, missBody))
		}

		if adminRoute(rt.Pattern) {
			// Non-admin member: refused, and an existing id reads like a missing one.
			na := env.Do(t, m, ownPath, alice, ownBody)
			require.Contains(t, []int{403, 404}, na.Status, "%s as non-admin: %s", what, na.Body)
			same(t, what+" non-admin: existing vs missing", na, env.Do(t, m, missPath, alice, missBody))
			if asMissing[rt.Pattern] {
				_, invMiss, _ := request(t, httpapi.RouteInfo{Pattern: "DELETE /api/invitations/{id}"}, missing)
				same(t, what+" non-admin vs an admin's missing object", na, env.Do(t, "DELETE", invMiss, admin, map[string]any{}))
			}
			// Admin: reaches the handler.
			ad := env.Do(t, m, ownPath, admin, ownBody)
			require.NotContains(t, []int{401, 403}, ad.Status, "%s as admin: %s", what, ad.Body)
			require.Less(t, ad.Status, 500, "%s as admin: %s", what, ad.Body)
			continue
		}

		// Other member: a foreign id answers exactly like a missing one, and like the
		// owner asking for a missing one.
		foreign := env.Do(t, m, ownPath, mallory, ownBody)
		miss := env.Do(t, m, missPath, mallory, missBody)
		if !paramRe.MatchString(rt.Pattern) {
			// No id in the path: a list filtered by a foreign id is the list filtered by a
			// missing one (a creation or a status page may differ in ids and times).
			require.Equal(t, miss.Status, foreign.Status, "%s: foreign vs missing filter", what)
		} else {
			same(t, what+": foreign vs missing", foreign, miss)
			same(t, what+": missing (other) vs missing (owner)", miss, env.Do(t, m, missPath, alice, missBody))
			require.Contains(t, []int{400, 404}, foreign.Status, "%s: a foreign id: %s", what, foreign.Body)
		}
		require.NotContains(t, string(foreign.Body), conv, what)
		require.NotContains(t, string(foreign.Body), adm.RunID, what)

		// Owner: reaches their record.
		o := env.Do(t, m, ownPath, alice, ownBody)
		require.NotContains(t, []int{401, 403, 404}, o.Status, "%s as owner: %s", what, o.Body)
		require.Less(t, o.Status, 500, "%s as owner: %s", what, o.Body)
	}
}

// TestEveryRouteIsServedByAFunction: every route is registered by a deployed function
// whose prefixes reach it (else the function host would never send it there).
func TestEveryRouteIsServedByAFunction(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	api, err := env.Svc.API("all")
	require.NoError(t, err)
	for _, rt := range api.Routes() {
		_, path, _ := strings.Cut(rt.Pattern, " ")
		served := false
		for _, fn := range service.Functions {
			one, err := env.Svc.API(fn.Name)
			require.NoError(t, err)
			reaches := rt.Scheduled && fn.Schedule != "" // its schedule reaches it, no path does
			for _, p := range fn.Prefixes {
				reaches = reaches || path == p || strings.HasPrefix(path, p+"/")
			}
			for _, r := range one.Routes() {
				served = served || (reaches && r.Pattern == rt.Pattern)
			}
		}
		require.True(t, served, "%s is served by no deployed function", rt.Pattern)
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}
