package mcpjobs

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// post sends one JSON-RPC message to url as Hermes would (its key, the Streamable HTTP
// Accept header), with extra headers as name, value pairs.
func post(t *testing.T, url, body string, hdr ...string) (*http.Response, string) {
	t.Helper()
	req, err := http.NewRequest("POST", url, strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	req.Header.Set("Authorization", "Bearer "+testKey)
	for i := 0; i+1 < len(hdr); i += 2 {
		if hdr[i+1] == "" {
			req.Header.Del(hdr[i])
			continue
		}
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

const pingCall = `{"jsonrpc":"2.0","id":7,"method":"ping"}`

// MCP Streamable HTTP (2025-11-25, Security Warning): servers MUST validate the Origin
// header and answer 403 to an invalid one. Hermes (a server-side client) sends none.
func TestOriginIsValidated(t *testing.T) {
	s := newSetup(t)
	resp, body := post(t, s.url, pingCall)
	require.Equal(t, 200, resp.StatusCode, "no Origin: a server-side client: %s", body)
	resp, body = post(t, s.url, pingCall, "Origin", "http://evil.example")
	require.Equal(t, 403, resp.StatusCode, body)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
	resp, body = post(t, s.url, pingCall, "Origin", "null")
	require.Equal(t, 403, resp.StatusCode, "an opaque origin is not allowed: %s", body)
	resp, body = post(t, s.url, pingCall, "Origin", "http://allowed.example")
	require.Equal(t, 200, resp.StatusCode, "an origin on the allow-list: %s", body)
	for _, o := range []string{"http://localhost:8080", "http://127.0.0.1:5000", "http://[::1]:80"} {
		resp, body = post(t, s.url, pingCall, "Origin", o)
		require.Equal(t, 200, resp.StatusCode, "a loopback page %s: %s", o, body)
	}
	for _, o := range []string{"http://localhost.evil.example", "http://127.0.0.1.evil.example", "file://localhost", "http://allowed.example.evil"} {
		resp, body = post(t, s.url, pingCall, "Origin", o)
		require.Equal(t, 403, resp.StatusCode, "%s: %s", o, body)
	}
}

// An unknown method is a JSON-RPC error -32601 (Method not found), not a plain-text 400.
func TestAnUnknownMethodIsMethodNotFound(t *testing.T) {
	s := newSetup(t)
	resp, body := post(t, s.url, `{"jsonrpc":"2.0","id":"x1","method":"no/such/method","params":{}}`)
	require.Equal(t, "application/json", resp.Header.Get("Content-Type"), body)
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Error   *struct {
			Code    int    `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
	}
	require.NoError(t, json.Unmarshal([]byte(body), &m), body)
	require.Equal(t, "2.0", m.JSONRPC)
	require.JSONEq(t, `"x1"`, string(m.ID))
	require.NotNil(t, m.Error, body)
	require.Equal(t, -32601, m.Error.Code)
	// A known method still reaches the server.
	resp, body = post(t, s.url, pingCall)
	require.Equal(t, 200, resp.StatusCode, body)
	require.JSONEq(t, `{"jsonrpc":"2.0","id":7,"result":{}}`, body)
}

// A missing or wrong key is a 401 in JSON with the WWW-Authenticate challenge.
func TestUnauthorizedIsJSONWithAChallenge(t *testing.T) {
	s := newSetup(t)
	for _, key := range []string{"", "Bearer wrong-key"} {
		resp, body := post(t, s.url, pingCall, "Authorization", key)
		require.Equal(t, 401, resp.StatusCode, body)
		require.Equal(t, "application/json", resp.Header.Get("Content-Type"))
		require.True(t, json.Valid([]byte(body)), body)
		require.Contains(t, body, "invalid_api_key")
		require.True(t, strings.HasPrefix(resp.Header.Get("WWW-Authenticate"), "Bearer "), resp.Header.Get("WWW-Authenticate"))
	}
}

// Only the configured path is the MCP endpoint; any other is 404 (with or without a key).
func TestOnlyTheEndpointPathIsServed(t *testing.T) {
	s := newSetup(t)
	base := strings.TrimSuffix(s.url, "/mcp")
	for _, p := range []string{"/", "/mcpx", "/mcp/", "/other", "/mcp/x"} {
		resp, body := post(t, base+p, pingCall)
		require.Equal(t, 404, resp.StatusCode, "%s: %s", p, body)
		resp, body = post(t, base+p, pingCall, "Authorization", "")
		require.Equal(t, 404, resp.StatusCode, "%s without a key: %s", p, body)
	}
	resp, body := post(t, s.url, pingCall)
	require.Equal(t, 200, resp.StatusCode, body)
}
