package hermes_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/hermes"
)

// TestToolsetsRetriesAServerError: Hermes 0.22.2.post1 answered GET /v1/toolsets 500
// "Failed to enumerate toolsets" once just after it started (a CI run of
// TestToolPolicyOnRealHermes); the read is retried, a 4xx is not, and three 5xx in a row
// are the error.
func TestToolsetsRetriesAServerError(t *testing.T) {
	t.Parallel()
	var calls atomic.Int32
	fail := atomic.Int32{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if fail.Add(-1) >= 0 {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(500)
			_, _ = w.Write([]byte(`{"error":{"message":"Failed to enumerate toolsets","type":"server_error"}}`))
			return
		}
		_, _ = w.Write([]byte(`{"object":"list","data":[{"name":"file","enabled":true,"tools":["read_file"]}]}`))
	}))
	defer srv.Close()
	c := &hermes.Client{BaseURL: srv.URL, APIKey: "k"}

	fail.Store(1)
	ts, err := c.Toolsets(context.Background())
	require.NoError(t, err)
	require.Len(t, ts, 1)
	require.EqualValues(t, 2, calls.Load(), "one retry")

	calls.Store(0)
	fail.Store(3)
	_, err = c.Toolsets(context.Background())
	var he *hermes.Error
	require.True(t, errors.As(err, &he), "%v", err)
	require.Equal(t, 500, he.Status)
	require.EqualValues(t, 3, calls.Load(), "three attempts, then the error")
}
