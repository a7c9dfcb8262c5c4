package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"privateassistant/stacktest"
	"privateassistant/stream"
)

// TestCLIAgainstTheLocalStack drives the CLI against the whole local stack (functions,
// agent, Appwrite emulator, Redis).
func TestCLIAgainstTheLocalStack(t *testing.T) {
	env, _, polls := startStack(t)
	uid, _ := env.SignUp(t, "cli@example.com", "password-cli-1")
	pa := func(args ...string) (int, string, string) {
		var out, errw bytes.Buffer
		code := run(context.Background(), args, strings.NewReader(""), &out, &errw)
		return code, out.String(), errw.String()
	}
	code, _, stderr := pa("runs")
	require.Equal(t, 3, code, "not signed in")
	require.Contains(t, stderr, "pa login")

	t.Setenv("PA_PASSWORD", "wrong-password")
	code, _, stderr = pa("login", "cli@example.com")
	require.Equal(t, 3, code)
	require.Equal(t, "pa: wrong email or password for cli@example.com\n", stderr)
	t.Setenv("PA_PASSWORD", "password-cli-1")
	code, out, _ := pa("login", "cli@example.com")
	require.Equal(t, 0, code, out)

	code, out, _ = pa("new", "from the cli", "--json")
	require.Equal(t, 0, code)
	var conv struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(out), &conv))
	code, out, _ = pa("send", conv.ID, "hello cli", "--json")
	require.Equal(t, 0, code, out)
	var adm struct{ RunID string }
	require.NoError(t, json.Unmarshal([]byte(out), &adm))
	code, out, _ = pa("tail", adm.RunID)
	require.Equal(t, 0, code, out)
	require.Contains(t, out, "You said: hello cli")
	require.Contains(t, out, "run completed")
	require.Zero(t, polls.Load(), "pa tail followed the run over SSE, not the function long-poll")
	code, out, _ = pa("runs", "--json")
	require.Equal(t, 0, code)
	require.Contains(t, out, adm.RunID)
	// For people: tables of the server's real answers.
	code, out, _ = pa("runs")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^RUN +QUEUED +ROLE +STATUS +CONVERSATION +ERROR\n`+adm.RunID+` +\d{4}-\d\d-\d\d \d\d:\d\d +chat +(running|completed) +`+conv.ID+`\n`, out)
	code, out, _ = pa("conversations")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^`+conv.ID+` +\d{4}-\d\d-\d\d \d\d:\d\d +from the cli$`, out)
	code, _, stderr = pa("approve", adm.RunID, "req", "once", "-yes")
	require.Equal(t, 5, code, "a conflict")
	require.Contains(t, stderr, "approval_not_pending")
	code, _, _ = pa("tail", "rnonexistent")
	require.Equal(t, 4, code)

	// Admin operations: refused for a plain user, previewed then committed for an admin.
	code, _, stderr = pa("admin", "routes")
	require.Equal(t, 1, code)
	require.Contains(t, stderr, "forbidden")
	users := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey)))
	_, err := users.UpdateLabels(uid, []string{"admin"})
	require.NoError(t, err)
	// A verified JWT is cached by the functions for at most 5 s (labels are read at each
	// verification); a JWT minted in a later second is verified afresh at once.
	require.Eventually(t, func() bool { code, _, _ := pa("admin", "routes"); return code == 0 }, 10*time.Second, 100*time.Millisecond)
	code, out, stderr = pa("admin", "route", "chat", "--alias", "chat", "--device", "arc", "--model", "bigger", "--context", "131072")
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "commit with -yes")
	require.Contains(t, out, `"nextRevision": 2`)
	code, out, _ = pa("admin", "routes")
	require.NotContains(t, out, "bigger", "a preview commits nothing")
	code, out, stderr = pa("admin", "route", "chat", "--alias", "chat", "--device", "arc", "--model", "bigger", "--context", "131072", "--yes")
	require.Equal(t, 0, code, stderr)
	code, out, _ = pa("admin", "routes")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^chat +2 +chat +arc +bigger +131072 +- +yes +never$`, out)
	code, out, stderr = pa("admin", "select", "chat=direct@1:chat@2:", "research=hermes@1:work@1:write_file", "coding=hermes@1:work@1", "--yes")
	require.Equal(t, 0, code, stderr+out)
	require.Contains(t, out, `"revision": 2`)
	code, out, _ = pa("admin", "settings")
	require.Equal(t, 0, code)
	require.Regexp(t, `(?m)^chat +direct@1 +chat@2 +\(none\)$`, out)
	require.Regexp(t, `(?m)^research +hermes@1 +work@1 +write_file$`, out)
	code, out, _ = pa("admin", "audit", "--json")
	require.Equal(t, 0, code)
	require.Contains(t, out, "release.promote")
	require.Contains(t, out, "route.register")
	code, _, _ = pa("admin", "select", "chat=bad")
	require.Equal(t, 2, code)
}

// startStack starts the whole local stack (functions, agent, Appwrite emulator, Redis,
// the stream service) behind one origin, as behind the proxy: /stream/ to the stream
// service, the rest to the functions; the function long-polls are counted (pa tail and
// pa chat must not make any). PA_URL and the rest point the CLI at it.
func startStack(t *testing.T) (*stacktest.Env, *httptest.Server, *atomic.Int64) {
	const streamKey = "stream-key-cli-0123456789"
	env := stacktest.New(t, stacktest.Options{Keys: map[string][]string{streamKey: stream.Scopes}})
	env.StartAgent(t)
	ss, err := stream.New(stream.Config{Endpoint: env.TS.URL, ProjectID: env.TS.Project, DatabaseID: env.Cfg.DatabaseID, APIKey: streamKey,
		RedisAddr: env.Redis.Addr, JWTCacheTTL: 5 * time.Second, MemberLabel: "member", AdminLabel: "admin",
		Heartbeat: 15 * time.Second, WriteTimeout: 2 * time.Second, MaxPerUser: 16, Readers: 2}, nil, prometheus.NewRegistry())
	require.NoError(t, err)
	require.NoError(t, ss.Start(context.Background()))
	fns, err := url.Parse(env.URL)
	require.NoError(t, err)
	toFns := httputil.NewSingleHostReverseProxy(fns)
	polls := new(atomic.Int64)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, stream.Prefix) {
			ss.ServeHTTP(w, r)
			return
		}
		if strings.HasSuffix(r.URL.Path, "/events") {
			polls.Add(1)
		}
		toFns.ServeHTTP(w, r)
	}))
	t.Cleanup(func() {
		ss.Stop()
		front.Close()
	})
	t.Setenv("PA_URL", front.URL)
	t.Setenv("APPWRITE_ENDPOINT", env.TS.URL)
	t.Setenv("APPWRITE_PROJECT_ID", env.TS.Project)
	t.Setenv("PA_CONFIG_DIR", t.TempDir())
	return env, front, polls
}
