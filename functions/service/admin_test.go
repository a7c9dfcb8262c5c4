package service_test

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/validator"
	"privateassistant/functions/functionstest"
	"privateassistant/functions/service"
	"privateassistant/hermes/hermestest"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

const hermesKey = "admin-test-hermes-key-0123456789abcdef"

func adminEnv(t *testing.T) (*functionstest.Env, string, string) {
	t.Helper()
	t.Setenv("PA_TEST_HERMES_KEY", hermesKey)
	env := functionstest.New(t, functionstest.Options{Mutate: func(c *service.Config) { c.KnownDevices = []string{"arc", "xtx"} }})
	uid, jwt := env.SignUp(t, "admin@example.com", "password-admin")
	users := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey)))
	_, err := users.UpdateLabels(uid, []string{"admin"})
	require.NoError(t, err)
	_, user := env.SignUp(t, "user@example.com", "password-user")
	return env, jwt, user
}

type planView struct {
	Kind           string
	BasedOn        int64 `json:"basedOnRevision"`
	NextRevision   int64
	Changes        []map[string]any
	AffectedRoles  []string
	AffectedRoutes []string
	PinnedRuns     int
	Warnings       []string
}

func TestAdminEndpointsRefuseNonAdmins(t *testing.T) {
	env, _, user := adminEnv(t)
	for _, c := range []struct {
		method, path string
		status       int
	}{
		{"GET", "/api/harnesses", 403}, {"POST", "/api/harnesses", 403}, {"GET", "/api/model-routes", 403},
		{"PUT", "/api/harness-selection", 403}, {"GET", "/api/audit", 403}, {"GET", "/api/settings", 403},
		{"POST", "/api/harnesses/direct/validate?revision=1", 404},
	} {
		var body any
		if c.method != "GET" {
			body = map[string]any{}
		}
		res := env.Do(t, c.method, c.path, user, body)
		require.Equal(t, c.status, res.Status, "%s %s: %s", c.method, c.path, res.Body)
	}
}

func TestRoutesAndHarnessesArePlannedThenCommitted(t *testing.T) {
	env, admin, _ := adminEnv(t)
	route := map[string]any{"routeId": "big", "alias": "big", "device": "gpu9", "backendModel": "qwen-72b", "contextBudget": 65536}
	res := env.Do(t, "POST", "/api/model-routes", admin, map[string]any{"input": route, "preview": true})
	require.Equal(t, 400, res.Status)
	require.Equal(t, "unknown_device", res.ErrorCode())

	route["device"] = "xtx"
	res = env.Do(t, "POST", "/api/model-routes", admin, map[string]any{"input": route, "preview": true})
	require.Equal(t, 200, res.Status, string(res.Body))
	var pv struct{ Plan planView }
	res.JSON(t, &pv)
	require.Equal(t, int64(0), pv.Plan.BasedOn)
	require.Equal(t, int64(1), pv.Plan.NextRevision)
	require.NotEmpty(t, pv.Plan.Changes)
	res = env.Do(t, "GET", "/api/model-routes", admin, nil)
	require.NotContains(t, string(res.Body), `"big"`, "a preview writes nothing")

	res = env.Do(t, "POST", "/api/model-routes", admin, map[string]any{"input": route, "expectedRevision": 0})
	require.Equal(t, 201, res.Status, string(res.Body))
	res = env.Do(t, "POST", "/api/model-routes", admin, map[string]any{"input": route, "expectedRevision": 0})
	require.Equal(t, 409, res.Status)
	require.Equal(t, "stale_revision", res.ErrorCode())
	require.Contains(t, string(res.Body), `"currentRevision":1`)

	// A key pasted where a reference belongs is refused.
	res = env.Do(t, "POST", "/api/harnesses", admin, map[string]any{"input": map[string]any{"profileId": "h2", "kind": "hermes",
		"baseUrl": "http://127.0.0.1:1", "keyRef": "a3f9c2e1b7d4a6f8c0e2b4d6f8a1c3e5b7"}, "preview": true})
	require.Equal(t, 400, res.Status)
	require.Equal(t, "key_not_reference", res.ErrorCode())
	res = env.Do(t, "POST", "/api/harnesses", admin, map[string]any{"input": map[string]any{"profileId": "h2", "kind": "hermes",
		"baseUrl": "http://user:pw@127.0.0.1:1", "keyRef": "env:X"}, "preview": true})
	require.Equal(t, "invalid_url", res.ErrorCode())
}

func startDouble(t *testing.T, durable bool) string {
	t.Helper()
	opts := hermestest.Options{APIKey: hermesKey, ModelURL: "http://127.0.0.1:1/v1"}
	if durable {
		opts.DataDir = t.TempDir()
	}
	d, err := hermestest.New(opts)
	require.NoError(t, err)
	s := httptest.NewServer(d)
	t.Cleanup(func() { s.Close(); d.Close() })
	return s.URL
}

// Validation happens where the key is (issue #11): the admin API records the request
// (202, validationRequestedAt, an audit entry) and the agent's validator, which can read
// the file: key a function cannot, probes Hermes and stores the result.
func TestValidateAndSelectOnlyVerifiedHarnesses(t *testing.T) {
	env, admin, _ := adminEnv(t)
	keyFile := filepath.Join(t.TempDir(), "hermes.key")
	require.NoError(t, os.WriteFile(keyFile, []byte(hermesKey+"\n"), 0o600))
	commit := func(id, url, ref string) {
		res := env.Do(t, "POST", "/api/harnesses", admin, map[string]any{"input": map[string]any{"profileId": id, "kind": "hermes",
			"baseUrl": url, "keyRef": ref}, "expectedRevision": 0})
		require.Equal(t, 201, res.Status, string(res.Body))
	}
	commit("good", startDouble(t, true), "file:"+keyFile)               // only the agent's host can read it
	commit("volatile", startDouble(t, false), "env:PA_TEST_HERMES_KEY") // idempotency store in memory: not durable
	var v struct {
		Pending               bool
		Verified              bool
		ValidationRequestedAt *string
		Reason                string
	}
	for _, id := range []string{"good", "volatile"} {
		res := env.Do(t, "POST", "/api/harnesses/"+id+"/validate?revision=1", admin, nil)
		require.Equal(t, 202, res.Status, string(res.Body))
		res.JSON(t, &v)
		require.True(t, v.Pending)
		require.False(t, v.Verified)
		require.NotNil(t, v.ValidationRequestedAt)
		require.Contains(t, v.Reason, "validation requested")
	}
	revs := func() map[string]schema.HarnessProfile {
		var l struct{ Harnesses []schema.HarnessProfile }
		res := env.Do(t, "GET", "/api/harnesses", admin, nil)
		require.Equal(t, 200, res.Status, string(res.Body))
		res.JSON(t, &l)
		out := map[string]schema.HarnessProfile{}
		for _, h := range l.Harnesses {
			out[h.ProfileID] = h
		}
		return out
	}
	require.NotNil(t, revs()["good"].ValidationRequestedAt, "the request is recorded")
	require.Contains(t, string(env.Do(t, "GET", "/api/audit", admin, nil).Body), `"action":"harness.validate.request"`)
	// Selecting a profile whose validation is still pending is refused.
	res := env.Do(t, "PUT", "/api/harness-selection", admin, map[string]any{"expectedRevision": 1, "roles": map[string]any{
		"research": map[string]any{"harness": "good", "harnessRevision": 1, "route": "work", "routeRevision": 1, "tools": []string{"web"}}}})
	require.Equal(t, "harness_unverified", res.ErrorCode(), string(res.Body))

	// The agent completes it.
	val := &validator.Validator{Store: env.Store, Every: 20 * time.Millisecond, AgentID: "admin-test"}
	require.NoError(t, val.Start(context.Background()))
	defer val.Stop()
	require.Eventually(t, func() bool {
		r := revs()
		return r["good"].ValidationRequestedAt == nil && r["volatile"].ValidationRequestedAt == nil
	}, 10*time.Second, 20*time.Millisecond)
	val.Stop()
	r := revs()
	require.True(t, r["good"].Verified, "the agent read the file: key")
	require.NotNil(t, r["good"].HermesVersion)
	require.NotNil(t, r["good"].VerifiedAt)
	require.False(t, r["volatile"].Verified)
	require.NotNil(t, r["volatile"].VerifiedAt)
	audit := string(env.Do(t, "GET", "/api/audit", admin, nil).Body)
	require.Contains(t, audit, `"actorId":"agent:admin-test","action":"harness.validate"`)
	require.Contains(t, audit, "durable", "the reason volatile is not verified")

	sel := func(harness string, rev int64, tools []string) map[string]any {
		return map[string]any{"expectedRevision": rev, "roles": map[string]any{
			"chat":     map[string]any{"harness": "direct", "harnessRevision": 1, "route": "chat", "routeRevision": 1, "tools": []string{}},
			"research": map[string]any{"harness": harness, "harnessRevision": 1, "route": "work", "routeRevision": 1, "tools": tools},
		}}
	}
	res = env.Do(t, "PUT", "/api/harness-selection", admin, sel("volatile", 1, []string{"web"}))
	require.Equal(t, 400, res.Status)
	require.Equal(t, "harness_unverified", res.ErrorCode())
	res = env.Do(t, "PUT", "/api/harness-selection", admin, sel("good", 1, []string{"web", "deploy"}))
	require.Equal(t, 400, res.Status)
	require.Equal(t, "tool_outside_ceiling", res.ErrorCode(), "a role can only narrow the ceiling")
	res = env.Do(t, "PUT", "/api/harness-selection", admin, sel("good", 1, []string{"web"}))
	require.Equal(t, 200, res.Status, string(res.Body))

	// A default harness applies to every role that does not name one.
	res = env.Do(t, "PUT", "/api/harness-selection", admin, map[string]any{"expectedRevision": 2,
		"default": map[string]any{"harness": "good", "harnessRevision": 1},
		"roles": map[string]any{"chat": map[string]any{"route": "chat", "routeRevision": 1, "tools": []string{}},
			"coding": map[string]any{"harness": "direct", "harnessRevision": 1, "route": "work", "routeRevision": 1}}})
	require.Equal(t, 200, res.Status, string(res.Body))
	res = env.Do(t, "GET", "/api/settings", admin, nil)
	require.Contains(t, string(res.Body), `"chat":{"harness":"good","harnessRevision":1`)
	require.Contains(t, string(res.Body), `"coding":{"harness":"direct"`)
}

func TestConcurrentCommitsExactlyOneWinsAndAuditIsComplete(t *testing.T) {
	ctx := context.Background()
	env, admin, user := adminEnv(t)
	conv := env.Conversation(t, user)
	before := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", user, map[string]any{"requestId": "pinned", "text": "before the change"})
	require.Equal(t, 202, before.Status)
	var pinned struct{ RunID string }
	before.JSON(t, &pinned)

	// A new route revision, then eight admins switch chat to it at once, all planned on revision 1.
	res := env.Do(t, "POST", "/api/model-routes", admin, map[string]any{"input": map[string]any{"routeId": "chat", "alias": "chat2",
		"device": "arc", "backendModel": "demo-chat-v2", "contextBudget": 131072}, "expectedRevision": 1})
	require.Equal(t, 201, res.Status, string(res.Body))
	body := map[string]any{"expectedRevision": 1, "roles": map[string]any{
		"chat":     map[string]any{"harness": "direct", "harnessRevision": 1, "route": "chat", "routeRevision": 2, "tools": []string{}},
		"research": map[string]any{"harness": "direct", "harnessRevision": 1, "route": "work", "routeRevision": 1, "tools": []string{"web"}},
		"coding":   map[string]any{"harness": "direct", "harnessRevision": 1, "route": "work", "routeRevision": 1, "tools": []string{"terminal", "file"}},
	}}
	prev := env.Do(t, "PUT", "/api/harness-selection", admin, map[string]any{"expectedRevision": 1, "roles": body["roles"], "preview": true})
	require.Equal(t, 200, prev.Status, string(prev.Body))
	var pv struct{ Plan planView }
	prev.JSON(t, &pv)
	require.Equal(t, []string{"chat"}, pv.Plan.AffectedRoles)
	require.Equal(t, 1, pv.Plan.PinnedRuns, "the queued run stays on its pinned revisions")

	var wg sync.WaitGroup
	codes := make(chan int, 8)
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			codes <- env.Do(t, "PUT", "/api/harness-selection", admin, body).Status
		}()
	}
	wg.Wait()
	close(codes)
	wins := 0
	for c := range codes {
		if c == 200 {
			wins++
		} else {
			require.Equal(t, 409, c)
		}
	}
	require.Equal(t, 1, wins, "exactly one commit wins")

	// The earlier run keeps its pinned route revision; a new one uses the new revision at once.
	b, err := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).Get(ctx, pinned.RunID)
	require.NoError(t, err)
	require.Equal(t, int64(1), b.RouteRevision)
	after := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", user, map[string]any{"requestId": "new", "text": "after"})
	require.Equal(t, 202, after.Status)
	var fresh struct{ RunID string }
	after.JSON(t, &fresh)
	b, err = schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).Get(ctx, fresh.RunID)
	require.NoError(t, err)
	require.Equal(t, int64(2), b.RouteRevision)

	// Audit: bootstrap, the route revision, the selection; with from/to and the actor.
	res = env.Do(t, "GET", "/api/audit", admin, nil)
	require.Equal(t, 200, res.Status)
	var au struct {
		Audit []schema.Audit
	}
	res.JSON(t, &au)
	actions := map[string]schema.Audit{}
	for _, a := range au.Audit {
		actions[a.Action] = a
	}
	require.Contains(t, actions, "route.register")
	require.Contains(t, actions, "bootstrap")
	for _, act := range []string{"release.propose", "release.evidence", "release.approve", "release.promote"} {
		require.Contains(t, actions, act)
	}
	sc := actions["release.promote"] // the live pointer moved from revision 1 to 2
	require.Equal(t, int64(1), *sc.FromRevision)
	require.Equal(t, int64(2), *sc.ToRevision)
	require.NotEmpty(t, sc.ActorID)

	// A crash between the settings write and its audit record is repaired on the next call.
	_, err = schema.For[schema.Settings](env.Store, schema.CollSettings).UpdateRevision(ctx, runconfig.SystemSettingsID, 2,
		map[string]any{"lastChange": `{"actor":"crashed-admin","action":"selection.commit","from":2,"to":3,"at":"` + time.Now().UTC().Format(time.RFC3339) + `","detail":"[]"}`})
	require.NoError(t, err)
	res = env.Do(t, "GET", "/api/audit", admin, nil)
	res.JSON(t, &au)
	found := false
	for _, a := range au.Audit {
		if a.ActorID == "crashed-admin" && *a.ToRevision == 3 {
			found = true
		}
	}
	require.True(t, found, "the missing audit record was written from the settings' lastChange")
}

// A direct profile is still probed by the function itself (GET /models, env: key): 200
// with the result, no request left pending.
func TestValidateDirectProfileInTheFunction(t *testing.T) {
	env, admin, _ := adminEnv(t)
	up := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/v1/models" || r.Header.Get("Authorization") != "Bearer "+hermesKey {
			http.Error(w, "no", 401)
			return
		}
		_, _ = w.Write([]byte(`{"data":[]}`))
	}))
	t.Cleanup(up.Close)
	res := env.Do(t, "POST", "/api/harnesses", admin, map[string]any{"input": map[string]any{"profileId": "upstream", "kind": "direct",
		"baseUrl": up.URL + "/v1", "keyRef": "env:PA_TEST_HERMES_KEY"}, "expectedRevision": 0})
	require.Equal(t, 201, res.Status, string(res.Body))
	res = env.Do(t, "POST", "/api/harnesses/upstream/validate?revision=1", admin, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	var v struct {
		Pending, Verified bool
		Harness           schema.HarnessProfile
	}
	res.JSON(t, &v)
	require.False(t, v.Pending)
	require.True(t, v.Verified)
	require.Nil(t, v.Harness.ValidationRequestedAt)
	require.NotNil(t, v.Harness.VerifiedAt)
}
