package runtimehttp_test

import (
	"bytes"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/open-runtimes/types-for-go/v4/openruntimes"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/httpapi"
	"privateassistant/functions/runtimehttp"
)

func TestServeRoundTrip(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		require.Equal(t, "POST", r.Method)
		require.Equal(t, "/api/runs/r1/cancel", r.URL.Path)
		require.Equal(t, "2", r.URL.Query().Get("after"))
		require.Equal(t, "Bearer x", r.Header.Get("Authorization"))
		_, hasDeadline := r.Context().Deadline()
		require.True(t, hasDeadline)
		w.Header().Set("Content-Type", "application/json")
		w.Header().Add("Vary", "Origin")
		w.WriteHeader(202)
		_, _ = w.Write(append([]byte("got:"), b...))
	})
	c := openruntimes.NewContext(openruntimes.Logger{})
	c.Req.Method = "POST"
	c.Req.Path = "/api/runs/r1/cancel"
	c.Req.QueryString = "after=2"
	c.Req.Headers = map[string]string{"authorization": "Bearer x", "content-type": "application/json"}
	c.Req.SetBodyBinary([]byte(`{}`))
	res := runtimehttp.Serve(&c, h, 25*time.Second)
	require.Equal(t, 202, res.StatusCode)
	require.Equal(t, "got:{}", string(res.Body))
	require.Equal(t, "application/json", res.Headers["content-type"])
	require.Equal(t, "Origin", res.Headers["vary"])

	c.Req.Path = "/%zz"
	res = runtimehttp.Serve(&c, h, 0)
	require.Equal(t, 400, res.StatusCode)
}

// TestRequestIDIsAppwritesExecutionID: the execution id Appwrite sends (a lower-case
// runtime header) is the request id the shared HTTP layer echoes and logs, and a request
// refused before the handler carries it too.
func TestRequestIDIsAppwritesExecutionID(t *testing.T) {
	var logs bytes.Buffer
	a := httpapi.New(nil, nil, httpapi.NewLogger(&logs, "info"))
	a.Handle("GET /api/health", httpapi.Route{Public: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		httpapi.WriteJSON(w, 200, map[string]any{"ok": true})
		return nil
	})
	c := openruntimes.NewContext(openruntimes.Logger{})
	c.Req.Method = "GET"
	c.Req.Path = "/api/nope"
	c.Req.Headers = map[string]string{"x-appwrite-execution-id": "6650abc123"}
	res := runtimehttp.Serve(&c, a, 0)
	require.Equal(t, 404, res.StatusCode)
	require.Equal(t, "6650abc123", res.Headers["x-request-id"])
	require.Contains(t, string(res.Body), `"requestId":"6650abc123"`)
	require.Contains(t, logs.String(), `"requestId":"6650abc123"`)

	c.Req.Path = "/%zz"
	res = runtimehttp.Serve(&c, a, 0)
	require.Equal(t, 400, res.StatusCode)
	require.Equal(t, "6650abc123", res.Headers["x-request-id"])
	require.Contains(t, string(res.Body), `"requestId":"6650abc123"`)
}
