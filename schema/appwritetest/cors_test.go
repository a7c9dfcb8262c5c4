package appwritetest_test

import (
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/schema/appwritetest"
)

// The emulator's CORS answers with credentials only for its own origin and the listed web
// platforms; before, it echoed any Origin with Access-Control-Allow-Credentials: true.
func TestCORSDoesNotEchoAnyOrigin(t *testing.T) {
	t.Parallel()
	ts := appwritetest.NewTestServer(t, appwritetest.Options{Origins: []string{"http://chat.example"}})
	ask := func(origin string) http.Header {
		req, err := http.NewRequest("GET", ts.URL+"/health/version", nil)
		require.NoError(t, err)
		req.Header.Set("Origin", origin)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp.Header
	}
	h := ask("https://evil.example")
	require.Empty(t, h.Get("Access-Control-Allow-Origin"))
	require.Empty(t, h.Get("Access-Control-Allow-Credentials"))
	for _, o := range []string{"http://chat.example", strings.TrimSuffix(ts.URL, "/v1")} {
		h = ask(o)
		require.Equal(t, o, h.Get("Access-Control-Allow-Origin"))
		require.Equal(t, "true", h.Get("Access-Control-Allow-Credentials"))
	}
}
