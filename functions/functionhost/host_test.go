package functionhost_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/open-runtimes/types-for-go/v4/openruntimes"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionhost"
	"privateassistant/functions/functionstest"
	"privateassistant/functions/service"
)

func do(t *testing.T, url, method, path string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, _ := http.NewRequest(method, url+path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Add(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp, string(b)
}

func TestHostBehavesLikeAppwritesRouter(t *testing.T) {
	t.Parallel()
	var seen openruntimes.Context
	echo := func(c openruntimes.Context) openruntimes.Response {
		seen = c
		return c.Res.Json(map[string]any{"path": c.Req.Path, "query": c.Req.QueryString, "method": c.Req.Method})
	}
	release := make(chan struct{})
	slow := func(c openruntimes.Context) openruntimes.Response {
		<-release // past the host's timeout
		return c.Res.Text("late")
	}
	empty := func(c openruntimes.Context) openruntimes.Response {
		return c.Res.Binary(nil, c.Res.WithStatusCode(502))
	}
	h := &functionhost.Host{Timeout: 200 * time.Millisecond, Functions: []functionhost.Function{
		{Name: "echo", Prefixes: []string{"/api/echo"}, Main: echo, Key: "the-key"},
		{Name: "slow", Prefixes: []string{"/api/slow"}, Main: slow},
		{Name: "empty", Prefixes: []string{"/api/empty"}, Main: empty},
	}}
	s := httptest.NewServer(h)
	defer s.Close()

	resp, body := do(t, s.URL, "PUT", "/api/echo/x?a=1&a=2",
		"X-Appwrite-User-Id", "victim", "x-appwrite-user-jwt", "stolen", "X-Appwrite-Key", "forged",
		"X-Custom", "first", "X-Custom", "second", "X-Open-Runtimes-Secret", "nope")
	require.Equal(t, 200, resp.StatusCode)
	require.JSONEq(t, `{"path":"/api/echo/x","query":"a=1&a=2","method":"PUT"}`, body)
	require.Equal(t, "", seen.Req.Headers["x-appwrite-user-id"], "blanked whatever the client sent")
	require.Equal(t, "", seen.Req.Headers["x-appwrite-user-jwt"])
	require.Equal(t, "the-key", seen.Req.Headers["x-appwrite-key"])
	require.Equal(t, "first", seen.Req.Headers["x-custom"], "first value only, lower-cased")
	require.NotContains(t, seen.Req.Headers, "x-open-runtimes-secret")
	require.NotEmpty(t, resp.Header.Get("x-appwrite-execution-id"))

	resp, body = do(t, s.URL, "GET", "/api/slow")
	require.Equal(t, 408, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html"), "an HTML page outside /v1")
	require.Contains(t, body, "function_synchronous_timeout")
	close(release)

	resp, body = do(t, s.URL, "GET", "/api/empty")
	require.Equal(t, 502, resp.StatusCode)
	require.True(t, strings.HasPrefix(resp.Header.Get("Content-Type"), "text/html"))
	require.Contains(t, body, "Error 502")

	resp, body = do(t, s.URL, "GET", "/api/elsewhere")
	require.Equal(t, 404, resp.StatusCode)
	require.Contains(t, body, "router_host_not_found")
	resp, _ = do(t, s.URL, "GET", "/api/echoes")
	require.Equal(t, 404, resp.StatusCode, "prefixes match whole segments")
}

// TestRealMainsFromEnvironment drives the four real function entry points, configured
// only through the environment, as Appwrite runs them.
func TestRealMainsFromEnvironment(t *testing.T) {
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "mains@example.com", "password-mains")
	t.Setenv("APPWRITE_FUNCTION_API_ENDPOINT", env.TS.URL)
	t.Setenv("APPWRITE_FUNCTION_PROJECT_ID", env.TS.Project)
	t.Setenv("PA_REDIS_ADDR", env.Redis.Addr)
	t.Setenv("PA_CORS_ORIGINS", "http://127.0.0.1:8080")
	h := &functionhost.Host{Functions: functionhost.Deployed(functionstest.FunctionKey)}
	t.Cleanup(func() { require.NoError(t, functionhost.CloseDeployed()) })
	s := httptest.NewServer(h)
	defer s.Close()
	require.Len(t, h.Functions, len(service.Functions))
	for _, p := range []string{"/api/conversations", "/api/runs", "/api/artifacts?runId=x", "/api/system"} {
		resp, body := do(t, s.URL, "GET", p, "Authorization", "Bearer "+jwt)
		require.Equal(t, 200, resp.StatusCode, "%s: %s", p, body)
	}
	resp, _ := do(t, s.URL, "GET", "/api/runs")
	require.Equal(t, 401, resp.StatusCode)
}
