package deploy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"regexp"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/daemon"
	"privateassistant/functions/functionstest"
	"privateassistant/functions/service"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema/appwritetest"
	"privateassistant/stacktest"
	"privateassistant/stream"
)

// keyLog records, per API key, every Appwrite request made with it (a reverse proxy in
// front of the emulator).
type keyLog struct {
	mu   sync.Mutex
	seen map[string]map[string]bool // key → "METHOD /v1/path"
}

func (l *keyLog) front(t *testing.T, endpoint string) string {
	t.Helper()
	u, err := url.Parse(endpoint)
	require.NoError(t, err)
	rp := httputil.NewSingleHostReverseProxy(&url.URL{Scheme: u.Scheme, Host: u.Host})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if k := r.Header.Get("X-Appwrite-Key"); k != "" {
			l.mu.Lock()
			if l.seen[k] == nil {
				l.seen[k] = map[string]bool{}
			}
			l.seen[k][r.Method+" "+r.URL.Path] = true
			l.mu.Unlock()
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv.URL + "/v1"
}

var missingScope = regexp.MustCompile(`missing scopes \(\["([a-z.]+)"\]\)`)

// scopesOf asks a fresh emulator which scope each recorded request needs: with a key
// that holds none, Appwrite (and the emulator) refuses before any handler runs and names
// the missing scope. A request that needs none (public) adds nothing.
func scopesOf(t *testing.T, project string, reqs map[string]bool) []string {
	t.Helper()
	const none = "no-scopes-key-0123456789abcdef"
	ts := appwritetest.NewTestServer(t, appwritetest.Options{ProjectID: project, Keys: map[string][]string{none: {}}})
	u, _ := url.Parse(ts.URL)
	set := map[string]bool{}
	for r := range reqs {
		method, path, _ := strings.Cut(r, " ")
		req, err := http.NewRequest(method, "http://"+u.Host+path, strings.NewReader("{}"))
		require.NoError(t, err)
		req.Header.Set("X-Appwrite-Project", project)
		req.Header.Set("X-Appwrite-Key", none)
		req.Header.Set("Content-Type", "application/json")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var e struct{ Message, Type string }
		_ = json.Unmarshal(b, &e)
		if m := missingScope.FindStringSubmatch(e.Message); resp.StatusCode == 401 && e.Type == "general_unauthorized_scope" && m != nil {
			set[m[1]] = true
		}
	}
	out := make([]string, 0, len(set))
	for s := range set {
		out = append(out, s)
	}
	sort.Strings(out)
	return out
}

// documentedRuntimeScopes reads the runtime key's scopes from .env.example's comment.
func documentedRuntimeScopes(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile("../.env.example")
	require.NoError(t, err)
	m := regexp.MustCompile(`(?s)# secret: runtime key for the agent[^:]*: scopes (.*?)\(`).FindSubmatch(b)
	require.NotNil(t, m, ".env.example documents the runtime key's scopes")
	var out []string
	for _, f := range strings.FieldsFunc(string(m[1]), func(r rune) bool { return r == ',' || r == ' ' || r == '\n' || r == '#' }) {
		if strings.Contains(f, ".") {
			out = append(out, f)
		}
	}
	sort.Strings(out)
	return out
}

// TestKeyScopes: each function's key scopes (service.Functions, appwrite.json), the
// runtime key's (.env.example, deploy/agent.env.example) and the stream service's
// (stream.Scopes, deploy/stream.env.example) are exactly those the calls its code makes
// need: the scopes are derived from every Appwrite request each key made while every route
// of every function and of the stream service was called and runs of each kind went
// through the agent (chat, a tool approval, an artifact, a cancel). An extra scope or a
// missing one fails.
func TestKeyScopes(t *testing.T) {
	t.Parallel()
	log := &keyLog{seen: map[string]map[string]bool{}}
	const streamKey = "stream-scopes-key-0123456789"
	env := stacktest.New(t, stacktest.Options{
		Keys:      map[string][]string{streamKey: stream.Scopes},
		Functions: func(c *service.Config) { c.Endpoint = log.front(t, c.Endpoint) },
		Settings:  func(s *daemon.Settings) { s.AppwriteEndpoint = log.front(t, s.AppwriteEndpoint) },
	})
	env.Model.SetScript("#smallfile", modeltest.Script{Turns: []modeltest.Turn{
		{ToolCalls: []modeltest.ToolCall{{Name: "write_file", Arguments: `{"path":"out/small.txt","size":100}`}}},
		{Tokens: []string{"Wrote", " it."}},
	}})
	// An answer longer than a message's text field: kept whole in a file the functions read.
	env.Model.SetScript("#huge", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{strings.Repeat("word ", 8000)}}}})
	env.StartAgent(t)
	owner, jwt := env.SignUp(t, "scopes@example.com", "password-scopes")
	adminID, adminJWT := env.SignUp(t, "scopes-admin@example.com", "password-scopes-admin")
	env.Label(t, adminID, "admin")
	conv := env.Conversation(t, jwt)

	// Runs of each kind.
	chat := env.Admit(t, jwt, conv, "chat", "hello", "")
	_, status := env.Follow(t, jwt, chat.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	art := env.Admit(t, jwt, conv, "art", "make a #smallfile", "research")
	evs, status := env.Follow(t, jwt, art.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	artifactID := ""
	for _, e := range evs {
		if e.Type == queue.EventArtifact {
			var d struct{ ArtifactID string }
			require.NoError(t, json.Unmarshal(e.Data, &d))
			artifactID = d.ArtifactID
		}
	}
	require.NotEmpty(t, artifactID)
	tool := env.Admit(t, jwt, conv, "tool", "please run #tool", "coding")
	_, status = env.Follow(t, jwt, tool.RunID, 30*time.Second, func(ev queue.Event) bool {
		if ev.Type == queue.EventApprovalRequest {
			var d struct{ RequestID string }
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			res := env.Do(t, "POST", "/api/runs/"+tool.RunID+"/approval", jwt, map[string]any{"requestId": d.RequestID, "choice": "once"})
			require.Equal(t, 202, res.Status, string(res.Body))
		}
		return true
	})
	require.Equal(t, "completed", status)
	huge := env.Admit(t, jwt, conv, "huge", "a #huge answer", "")
	_, status = env.Follow(t, jwt, huge.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	// Once Redis no longer holds that run (retention), its events come from Appwrite, the
	// long delta's data from its file.
	rdb := env.Redis.Client()
	require.NoError(t, rdb.Del(context.Background(), queue.EventsKey(huge.RunID), queue.StateKey(huge.RunID)).Err())
	rdb.Close()
	evs, status = env.Follow(t, jwt, huge.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	require.NotEmpty(t, evs)
	long := env.Admit(t, jwt, conv, "long", "tell a #long story", "")
	cancelled := false
	_, status = env.Follow(t, jwt, long.RunID, 60*time.Second, func(ev queue.Event) bool {
		if ev.Type == queue.EventMessageDelta && !cancelled {
			cancelled = true
			require.Equal(t, 202, env.Do(t, "POST", "/api/runs/"+long.RunID+"/cancel", jwt, nil).Status)
		}
		return true
	})
	require.Equal(t, "cancelled", status)

	// Every route of every function, as its owner or as the admin.
	// The runtime API (hostapp/responses_test.go): a key, the app's user made on first use
	// (users.read, users.write), a long answer read back whole (files.read), forgotten
	// with its file (files.write).
	kres := env.Do(t, "POST", "/api/runtime-keys", adminJWT, map[string]any{"appId": "scopes", "roles": []string{"chat"}})
	require.Equal(t, 201, kres.Status, string(kres.Body))
	var rk struct{ Secret string }
	kres.JSON(t, &rk)
	rt := func(method, path string, body any) functionstest.Response {
		return env.Do(t, method, path, "", body, "Authorization", "Bearer "+rk.Secret, "X-App-User", "scopes-user")
	}
	cr := rt("POST", "/api/v1/responses", map[string]any{"model": "chat", "input": "a #huge answer"})
	require.Equal(t, 200, cr.Status, string(cr.Body))
	var resp struct{ ID, Status string }
	cr.JSON(t, &resp)
	require.Eventually(t, func() bool {
		g := rt("GET", "/api/v1/responses/"+resp.ID, nil)
		require.Equal(t, 200, g.Status, string(g.Body))
		g.JSON(t, &resp)
		return resp.Status == "completed"
	}, 30*time.Second, 100*time.Millisecond)
	// Every route of the stream service, with its own key (before the forget and the
	// conversation's delete, which make the runs missing to it): the huge run's events (from
	// Appwrite now, the long delta from its file), the feed, the response's events, the
	// artifact.
	ss, err := stream.New(stream.Config{Endpoint: log.front(t, env.TS.URL), ProjectID: env.TS.Project, DatabaseID: env.Model0(),
		APIKey: streamKey, RedisAddr: env.Redis.Addr, Heartbeat: time.Second, WriteTimeout: 5 * time.Second, MaxPerUser: 4,
		JWTCacheTTL: time.Second, MemberLabel: "member", AdminLabel: "admin"}, nil, nil)
	require.NoError(t, err)
	require.NoError(t, ss.Start(context.Background()))
	streamSrv := httptest.NewServer(ss)
	defer func() { ss.Stop(); streamSrv.Close() }()
	for _, c := range []struct{ path, tok, user, want string }{
		{"/stream/runs/" + huge.RunID + "/events", jwt, "", "event: end"},
		{"/stream/feed", jwt, "", "event: reset"},
		{"/stream/v1/responses/" + resp.ID + "/events", rk.Secret, "scopes-user", "event: end"},
		{"/stream/artifacts/" + artifactID + "/download", jwt, "", ""},
	} {
		req, err := http.NewRequest("GET", streamSrv.URL+c.path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+c.tok)
		if c.user != "" {
			req.Header.Set("X-App-User", c.user)
		}
		res, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		require.Equal(t, 200, res.StatusCode, c.path)
		if c.want == "" {
			_, err = io.Copy(io.Discard, res.Body)
			require.NoError(t, err, c.path)
		} else {
			sc := bufio.NewScanner(res.Body)
			found := false
			for !found && sc.Scan() {
				found = sc.Text() == c.want
			}
			require.True(t, found, "%s: %s", c.path, c.want)
		}
		res.Body.Close()
	}

	// Forgetting the app's user deletes its long answer's file (files.write).
	fg := rt("DELETE", "/api/v1/user", nil)
	require.Equal(t, 200, fg.Status, string(fg.Body))

	inv := env.Do(t, "POST", "/api/invitations", adminJWT, map[string]any{"expiresInHours": 24})
	require.Equal(t, 201, inv.Status, string(inv.Body))
	var invite struct{ Token string }
	inv.JSON(t, &invite)
	revoke := env.Do(t, "POST", "/api/invitations", adminJWT, map[string]any{"expiresInHours": 24}) // DELETE revokes it
	require.Equal(t, 201, revoke.Status, string(revoke.Body))
	var revoked struct{ ID string }
	revoke.JSON(t, &revoked)
	bodies := map[string]any{
		"POST /api/conversations":               map[string]any{"title": "scopes"},
		"PATCH /api/conversations/{id}":         map[string]any{"title": "renamed"},
		"POST /api/conversations/{id}/messages": map[string]any{"requestId": "walk", "text": "hi"},
		"POST /api/runs/{id}/approval":          map[string]any{"requestId": "a", "choice": "once"},
		"POST /api/members":                     map[string]any{"email": "walk-member@example.com", "password": "password-walk1"},
		"PUT /api/members/{id}":                 map[string]any{"member": true},
		"POST /api/invitations":                 map[string]any{"expiresInHours": 1},
		"POST /api/invitations/redeem":          map[string]any{"token": invite.Token, "email": "invited@example.com", "password": "password-invited1"},
	}
	queries := map[string]string{
		"GET /api/runs/{id}/events":         "?after=0&wait=0",
		"POST /api/harnesses/{id}/validate": "?revision=1",
	}
	ids := map[string]string{"/api/conversations/": conv, "/api/runs/": chat.RunID, "/api/artifacts/": artifactID,
		"/api/harnesses/": "hermes", "/api/members/": owner, "/api/gpus/": "xtx", "/api/model-routes/": "work", "/api/releases/": "1", "/api/environments/": "staging",
		"/api/v1/responses/": resp.ID, "/api/runtime-keys/": "rk0000000000000000", "/api/invitations/": revoked.ID}
	param := regexp.MustCompile(`\{[a-zA-Z]+\}`)
	walked := 0
	type walk struct{ fn, pattern string }
	var walks []walk
	for fn, patterns := range functionRoutes(t, env.Env) {
		for _, pattern := range patterns {
			walks = append(walks, walk{fn, pattern})
		}
	}
	// The conversation's delete last: it takes the artifact (and its file) with it.
	slices.SortStableFunc(walks, func(a, b walk) int {
		last := func(w walk) bool { return w.pattern == "DELETE /api/conversations/{id}" }
		switch {
		case last(a) == last(b):
			return 0
		case last(a):
			return 1
		}
		return -1
	})
	for _, w := range walks {
		fn, pattern := w.fn, w.pattern
		{
			method, path, _ := strings.Cut(pattern, " ")
			for pre, id := range ids {
				if strings.HasPrefix(path, pre) {
					path = param.ReplaceAllString(path, id)
				}
			}
			require.NotContains(t, path, "{", "no id for %s", pattern)
			path += queries[pattern]
			who := jwt
			if fn == "admin" {
				who = adminJWT
			}
			var body any
			if method != "GET" {
				body = map[string]any{}
			}
			if b, ok := bodies[pattern]; ok {
				body = b
			}
			res := env.Do(t, method, path, who, body)
			require.Less(t, res.Status, 500, "%s: %s", pattern, res.Body)
			walked++
		}
	}
	require.Greater(t, walked, 25)

	// An admin forgets a member: their long answer's file goes too (files.write).
	gone, goneJWT := env.SignUp(t, "scopes-forget@example.com", "password-scopes-forget")
	goneConv := env.Conversation(t, goneJWT)
	goneRun := env.Admit(t, goneJWT, goneConv, "huge", "a #huge answer", "")
	_, status = env.Follow(t, goneJWT, goneRun.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	fg = env.Do(t, "POST", "/api/members/"+gone+"/forget", adminJWT, map[string]any{"email": "scopes-forget@example.com"})
	require.Equal(t, 200, fg.Status, string(fg.Body))

	names := map[string]string{env.RuntimeKey: "agent", streamKey: "stream"}
	for _, f := range service.Functions {
		names[functionstest.FunctionKey(f.Name)] = f.Name
	}
	log.mu.Lock()
	defer log.mu.Unlock()
	for key, reqs := range log.seen {
		require.Contains(t, names, key, "a request with an unknown key")
		used := scopesOf(t, env.TS.Project, reqs)
		switch who := names[key]; who {
		case "agent":
			require.Equal(t, documentedRuntimeScopes(t), used, "the runtime key (.env.example) has exactly the scopes the agent uses")
			ae, err := os.ReadFile("agent.env.example")
			require.NoError(t, err)
			require.Contains(t, string(ae), "# secret: the runtime key ("+strings.Join(used, ", ")+").")
		case "stream":
			want := append([]string(nil), stream.Scopes...)
			sort.Strings(want)
			require.Equal(t, want, used, "the stream service's key scopes are exactly what its code uses")
			se, err := os.ReadFile("stream.env.example")
			require.NoError(t, err)
			for _, sc := range want {
				require.Contains(t, string(se), sc, "stream.env.example names the key's scopes")
			}
		default:
			for _, f := range service.Functions {
				if f.Name == who {
					want := append([]string(nil), f.Scopes...)
					sort.Strings(want)
					require.Equal(t, want, used, "function %s's key scopes are exactly what its code uses", who)
				}
			}
		}
	}
	for _, f := range service.Functions {
		require.Contains(t, log.seen, functionstest.FunctionKey(f.Name), "function %s made Appwrite calls", f.Name)
	}
	require.Contains(t, log.seen, env.RuntimeKey, "the agent made Appwrite calls")
	require.Contains(t, log.seen, streamKey, "the stream service made Appwrite calls")

	// appwrite.json carries the same scopes.
	b, err := os.ReadFile("../appwrite.json")
	require.NoError(t, err)
	var aj struct {
		Functions []struct {
			ID     string   `json:"$id"`
			Scopes []string `json:"scopes"`
		} `json:"functions"`
	}
	require.NoError(t, json.Unmarshal(b, &aj))
	for _, f := range service.Functions {
		found := false
		for _, a := range aj.Functions {
			if a.ID == f.Name {
				found = true
				require.ElementsMatch(t, f.Scopes, a.Scopes, fmt.Sprintf("appwrite.json %s", f.Name))
			}
		}
		require.True(t, found, f.Name)
	}
}

// functionRoutes are the route patterns each function registers.
func functionRoutes(t *testing.T, env *functionstest.Env) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, f := range service.Functions {
		api, err := env.Svc.API(f.Name)
		require.NoError(t, err)
		for _, r := range api.Routes() {
			if r.Route.Scheduled {
				continue // the schedule's own execution (functions/service TestScheduledReconcilerCollectsEvidence)
			}
			out[f.Name] = append(out[f.Name], r.Pattern)
		}
	}
	return out
}
