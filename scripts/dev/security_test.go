package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"
)

// TestDevStackIsClosed: the dev stack's own surfaces (issue 13): the emulator's CORS does
// not answer any origin with credentials, /_dev/* wants a key, static folders are not
// listed; and its two logins work, the demo one as a member (a chat run completes through
// the keyed model) and the admin one as an admin.
func TestDevStackIsClosed(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	s, err := Start(context.Background(), Config{Root: root, DataDir: t.TempDir(), TokenDelay: time.Millisecond})
	require.NoError(t, err)
	defer s.Close()

	get := func(path string, hdr ...string) (*http.Response, string) {
		req, err := http.NewRequest("GET", s.URL+path, nil)
		require.NoError(t, err)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	for _, dir := range []string{"/js/", "/vendor/", "/js"} {
		resp, body := get(dir)
		require.NotEqual(t, 200, resp.StatusCode, "%s lists its contents: %s", dir, body)
		require.NotContains(t, body, "<a href=")
	}
	resp, _ := get("/")
	require.Equal(t, 200, resp.StatusCode, "the index page is still served")
	resp, _ = get("/_dev/model/v1/models")
	require.Equal(t, 401, resp.StatusCode, "the dev model answers nobody without its key")
	resp, _ = get("/_dev/hermes/v1/capabilities")
	require.Equal(t, 401, resp.StatusCode, "the Hermes double answers nobody without its key")
	resp, _ = get("/v1/health/version", "Origin", "https://evil.example")
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Origin"))
	require.Empty(t, resp.Header.Get("Access-Control-Allow-Credentials"))

	jwt := func(email, pass string) string {
		acc := appwrite.NewAccount(appwrite.NewClient(appwrite.WithEndpoint(s.URL+"/v1"), appwrite.WithProject("privateassistant")))
		_, err := acc.CreateEmailPasswordSession(email, pass)
		require.NoError(t, err, email)
		j, err := acc.CreateJWT()
		require.NoError(t, err)
		return j.Jwt
	}
	call := func(method, path, tok string, body any) (int, map[string]any) {
		var rd io.Reader
		if body != nil {
			b, _ := json.Marshal(body)
			rd = bytes.NewReader(b)
		}
		req, err := http.NewRequest(method, s.URL+path, rd)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		if body != nil {
			req.Header.Set("Content-Type", "application/json")
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&out)
		return resp.StatusCode, out
	}
	admin := jwt(s.AdminEmail, s.AdminPass)
	code, me := call("GET", "/api/me", admin, nil)
	require.Equal(t, 200, code)
	require.Equal(t, true, me["admin"])

	demo := jwt(s.DemoEmail, s.DemoPass)
	code, me = call("GET", "/api/me", demo, nil)
	require.Equal(t, 200, code)
	require.Equal(t, true, me["member"])
	require.Equal(t, false, me["admin"])
	code, conv := call("POST", "/api/conversations", demo, map[string]any{"title": "dev"})
	require.Equal(t, 201, code, conv)
	code, adm := call("POST", "/api/conversations/"+conv["id"].(string)+"/messages", demo, map[string]any{"requestId": "dev-1", "text": "hello"})
	require.Equal(t, 202, code, adm)
	runID := adm["runId"].(string)
	require.Eventually(t, func() bool {
		_, run := call("GET", "/api/runs/"+runID, demo, nil)
		return run["terminal"] == true
	}, 60*time.Second, 200*time.Millisecond)
	_, run := call("GET", "/api/runs/"+runID, demo, nil)
	require.Equal(t, "completed", run["status"], "%v", run)

	// The stream service on the same origin: the run's events over SSE end with its
	// status; the admin's JWT reads the demo's run as missing.
	sse := func(path, tok string) (int, string) {
		req, err := http.NewRequest("GET", s.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, body := sse("/stream/runs/"+runID+"/events", demo)
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "id: 1\ndata: {")
	require.True(t, strings.HasSuffix(body, "event: end\ndata: {\"status\":\"completed\"}\n\n"), body)
	code, _ = sse("/stream/runs/"+runID+"/events", admin)
	require.Equal(t, 404, code)
}
