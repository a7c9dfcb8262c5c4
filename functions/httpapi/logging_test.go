package httpapi_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/httpapi"
	"privateassistant/schema/appwritetest"
)

// syncBuffer is a bytes.Buffer safe for the logger and the test at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func (s *syncBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, l := range strings.Split(strings.TrimSpace(s.String()), "\n") {
		if l == "" {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &m), l)
		out = append(out, m)
	}
	return out
}

// TestEachRequestLogsOneLineWithoutSecrets: one JSON line per request with the request id,
// method, route pattern, status, duration, the verified user and, for a 5xx, the cause;
// the JWT, the API key, the body and the query string never appear.
func TestEachRequestLogsOneLineWithoutSecrets(t *testing.T) {
	t.Parallel()
	ts := appwritetest.NewTestServer(t, appwritetest.Options{})
	users := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(ts.URL), appwrite.WithProject(ts.Project), appwrite.WithKey(ts.AdminKey)))
	u, err := users.Create("loguser", users.WithCreateEmail("log@example.com"), users.WithCreatePassword("password-1234"))
	require.NoError(t, err)
	_, err = users.CreateSession(u.Id)
	require.NoError(t, err)
	jwt, err := users.CreateJWT(u.Id)
	require.NoError(t, err)

	var buf syncBuffer
	a := httpapi.New(&httpapi.Authenticator{Endpoint: ts.URL, Project: ts.Project, HTTP: http.DefaultClient}, nil, httpapi.NewLogger(&buf, "info"))
	const apiKey = "standard_0123456789secretkeyvalue"
	const bodySecret = "body-secret-text-42"
	const querySecret = "query-secret-token-7"
	a.Handle("POST /api/runs/{id}/cancel", httpapi.Route{MaxBody: 1024}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		return errors.New("redis: connection refused while cancelling")
	})
	a.Handle("GET /api/runs/{id}", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		httpapi.WriteJSON(w, 200, map[string]any{"ok": true})
		return nil
	})

	// A 500 with an execution id from Appwrite, a JWT, a key, a body and a query string.
	w := httptest.NewRecorder()
	req := httptest.NewRequest("POST", "/api/runs/run123/cancel?token="+querySecret, strings.NewReader(`{"text":"`+bodySecret+`"}`))
	req.Header.Set("Authorization", "Bearer "+jwt.Jwt)
	req.Header.Set("X-Appwrite-Key", apiKey)
	req.Header.Set("X-Appwrite-Execution-Id", "exec-abc123")
	a.ServeHTTP(w, req)
	require.Equal(t, 500, w.Code)
	require.Equal(t, "exec-abc123", w.Header().Get("X-Request-Id"))
	require.Contains(t, w.Body.String(), `"requestId":"exec-abc123"`)

	// A 200 with no id given: one is generated and echoed.
	w2 := httptest.NewRecorder()
	req2 := httptest.NewRequest("GET", "/api/runs/run123?access_token="+querySecret, nil)
	req2.Header.Set("Authorization", "Bearer "+jwt.Jwt)
	a.ServeHTTP(w2, req2)
	require.Equal(t, 200, w2.Code)
	gen := w2.Header().Get("X-Request-Id")
	require.Regexp(t, `^[0-9a-f]{24}$`, gen)

	// An unauthenticated request, and an unknown route; a request id that is not a plain
	// token is replaced, not logged.
	w3 := httptest.NewRecorder()
	req3 := httptest.NewRequest("GET", "/api/runs/x", nil)
	req3.Header.Set("Authorization", "Bearer not-a-real-jwt-"+querySecret)
	req3.Header.Set("X-Request-Id", "evil\n{\"injected\":true}")
	a.ServeHTTP(w3, req3)
	require.Equal(t, 401, w3.Code)
	require.NotContains(t, w3.Header().Get("X-Request-Id"), "evil")
	w4 := httptest.NewRecorder()
	a.ServeHTTP(w4, httptest.NewRequest("GET", "/api/nope", nil))
	require.Equal(t, 404, w4.Code)

	out := buf.String()
	for _, secret := range []string{jwt.Jwt, apiKey, bodySecret, querySecret, "Bearer", "evil", "injected"} {
		require.NotContains(t, out, secret)
	}
	lines := buf.lines(t)
	require.Len(t, lines, 4, out)

	l := lines[0]
	require.Equal(t, "ERROR", l["level"])
	require.Equal(t, "exec-abc123", l["requestId"])
	require.Equal(t, "POST", l["method"])
	require.Equal(t, "POST /api/runs/{id}/cancel", l["route"])
	require.Equal(t, "/api/runs/run123/cancel", l["path"])
	require.EqualValues(t, 500, l["status"])
	require.Contains(t, l, "durationMs")
	require.Equal(t, "loguser", l["userId"])
	require.Equal(t, "internal", l["code"])
	require.Equal(t, "redis: connection refused while cancelling", l["err"])

	l = lines[1]
	require.Equal(t, "INFO", l["level"])
	require.Equal(t, gen, l["requestId"])
	require.Equal(t, "GET /api/runs/{id}", l["route"])
	require.Equal(t, "/api/runs/run123", l["path"])
	require.EqualValues(t, 200, l["status"])
	require.Equal(t, "loguser", l["userId"])
	require.NotContains(t, l, "err")

	l = lines[2]
	require.EqualValues(t, 401, l["status"])
	require.Equal(t, "unauthenticated", l["code"])
	require.NotContains(t, l, "userId")
	require.Equal(t, w3.Header().Get("X-Request-Id"), l["requestId"])

	l = lines[3]
	require.EqualValues(t, 404, l["status"])
	require.Equal(t, "", l["route"])
	require.Equal(t, "route_not_found", l["code"])
}

func TestLogLevel(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	a := httpapi.New(nil, nil, httpapi.NewLogger(&buf, "warn"))
	a.Handle("GET /x", httpapi.Route{Public: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		return errors.New("boom")
	})
	a.Handle("GET /y", httpapi.Route{Public: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		httpapi.WriteJSON(w, 200, map[string]any{})
		return nil
	})
	a.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/y", nil))
	require.Empty(t, buf.String(), "info lines are below warn")
	a.ServeHTTP(httptest.NewRecorder(), httptest.NewRequest("GET", "/x", nil))
	require.Len(t, buf.lines(t), 1)
}

// TestAClientThatLeftIsNoServerError: a server error while the request's client is gone
// (the cancel ended a read) is answered 499 client_closed_request and logged at info with
// its cause; an ordinary refusal stays what it is, and the same failure with the client
// still there stays a 500 at error level.
func TestAClientThatLeftIsNoServerError(t *testing.T) {
	t.Parallel()
	var buf syncBuffer
	a := httpapi.New(nil, nil, httpapi.NewLogger(&buf, "info"))
	a.Handle("GET /fail", httpapi.Route{Public: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		return fmt.Errorf("reading the run: %w", r.Context().Err())
	})
	a.Handle("GET /missing", httpapi.Route{Public: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		return httpapi.NotFound("run")
	})
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	serve := func(ctx context.Context, path string) int {
		w := httptest.NewRecorder()
		a.ServeHTTP(w, httptest.NewRequestWithContext(ctx, "GET", path, nil))
		return w.Code
	}
	require.Equal(t, 499, serve(gone, "/fail"))
	require.Equal(t, 404, serve(gone, "/missing"))
	require.Equal(t, 500, serve(context.Background(), "/fail"))
	lines := buf.lines(t)
	require.Len(t, lines, 3)
	require.Equal(t, "INFO", lines[0]["level"])
	require.Equal(t, "client_closed_request", lines[0]["code"])
	require.Equal(t, "reading the run: context canceled", lines[0]["err"])
	require.Equal(t, "not_found", lines[1]["code"])
	require.NotContains(t, lines[1], "err")
	require.Equal(t, "ERROR", lines[2]["level"])
	require.Equal(t, "internal", lines[2]["code"])
}
