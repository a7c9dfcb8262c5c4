package httpapi_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/control"
	"privateassistant/fault"
	"privateassistant/functions/httpapi"
)

// TestDomainErrorsMapToTheEnvelope walks every fault kind (and the shapes a domain error
// reaches the edge in) through a real route and checks status, envelope and Retry-After.
func TestDomainErrorsMapToTheEnvelope(t *testing.T) {
	t.Parallel()
	cause := errors.New("redis: connection refused")
	for _, tc := range []struct {
		name       string
		err        error
		status     int
		body       string
		retryAfter string
	}{
		{"invalid", fault.Invalidf("invalid_role", "unknown work role %q", "x"), 400,
			`{"error":{"code":"invalid_role","message":"unknown work role \"x\""}}`, ""},
		{"forbidden", fault.Errorf(fault.Forbidden, "forbidden", "administrators only"), 403,
			`{"error":{"code":"forbidden","message":"administrators only"}}`, ""},
		{"not found keeps no trace of its cause", fault.Missing("run", cause), 404,
			`{"error":{"code":"not_found","message":"run not found"}}`, ""},
		{"conflict with details", fault.Conflictf("stale_revision", "now at %d", 7).With("currentRevision", 7), 409,
			`{"error":{"code":"stale_revision","message":"now at 7","currentRevision":7}}`, ""},
		{"rate limited rounds Retry-After up to a second", fault.Errorf(fault.RateLimited, "rate_limited", "slow down").Retry(300 * time.Millisecond), 429,
			`{"error":{"code":"rate_limited","message":"slow down"}}`, "1"},
		{"unavailable", fault.E(fault.Unavailable, "queue_unavailable", "the job queue is unavailable", cause).Retry(2 * time.Second), 503,
			`{"error":{"code":"queue_unavailable","message":"the job queue is unavailable"}}`, "2"},
		{"wrapped by a caller", fmt.Errorf("cancel: %w", fault.Missing("run", nil)), 404,
			`{"error":{"code":"not_found","message":"run not found"}}`, ""},
		{"a domain sentinel", control.ErrApprovalMismatch, 409,
			`{"error":{"code":"approval_request_mismatch","message":"that approval request is not the pending one"}}`, ""},
		{"internal kind is a 500 without its message", fault.E(fault.Internal, "bug", "secret detail", cause), 500,
			`{"error":{"code":"internal","message":"internal error"}}`, ""},
		{"plain error is a 500", cause, 500,
			`{"error":{"code":"internal","message":"internal error"}}`, ""},
		{"an edge error passes as it is", httpapi.Errorf(413, "body_too_large", "too big"), 413,
			`{"error":{"code":"body_too_large","message":"too big"}}`, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			a := httpapi.New(nil, nil, nil)
			a.Handle("GET /x", httpapi.Route{Public: true}, func(http.ResponseWriter, *http.Request, *httpapi.Call) error { return tc.err })
			w := httptest.NewRecorder()
			req := httptest.NewRequest("GET", "/x", nil)
			req.Header.Set("X-Request-Id", "req-"+strconv.Itoa(tc.status))
			a.ServeHTTP(w, req)
			require.Equal(t, tc.status, w.Code)
			// Every envelope carries the request id (the one the caller sent, here).
			var got map[string]map[string]any
			require.NoError(t, json.Unmarshal(w.Body.Bytes(), &got))
			require.Equal(t, "req-"+strconv.Itoa(tc.status), got["error"]["requestId"])
			require.Equal(t, "req-"+strconv.Itoa(tc.status), w.Header().Get("X-Request-Id"))
			delete(got["error"], "requestId")
			rest, err := json.Marshal(got)
			require.NoError(t, err)
			require.JSONEq(t, tc.body, string(rest))
			require.Equal(t, tc.retryAfter, w.Header().Get("Retry-After"))
		})
	}
}

// TestEveryKindHasAStatus fails when a Kind is added without a status.
func TestEveryKindHasAStatus(t *testing.T) {
	t.Parallel()
	for _, k := range fault.Kinds()[1:] {
		e := httpapi.FromError(fault.E(k, "c", "m", nil))
		require.NotNil(t, e, "kind %s has no HTTP status", k)
		require.GreaterOrEqual(t, e.Status, 400)
	}
	require.Nil(t, httpapi.FromError(fault.E(fault.Internal, "c", "m", nil)))
}
