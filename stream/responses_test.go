package stream_test

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/runtimeapi"
)

// The runtime API's response events over SSE, authenticated as the responses function
// authenticates GET /api/v1/responses/{id}/events: the runtime key and the app's user.
// Another user of the app, another app's key, no key or a JWT read as the function does.
func TestResponseEventsWithARuntimeKey(t *testing.T) {
	t.Parallel()
	e := setup(t)
	adminID, admin := e.SignUp(t, "rt-admin@example.com", "password-rtadmin")
	e.Label(t, adminID, "member", "admin")
	issue := func(app string) string {
		res := e.Do(t, "POST", "/api/runtime-keys", admin, map[string]any{"appId": app, "roles": []string{"chat"}, "rateLimit": 1000, "rateWindowSeconds": 60})
		require.Equal(t, 201, res.Status, string(res.Body))
		var k struct{ Secret string }
		res.JSON(t, &k)
		return k.Secret
	}
	ka, kb := issue("appa"), issue("appb")
	res := e.Do(t, "POST", "/api/v1/responses", "", map[string]any{"model": "chat", "input": "hello"}, "Authorization", "Bearer "+ka, "X-App-User", "alice")
	require.Equal(t, 200, res.Status, string(res.Body))
	var resp struct{ ID string }
	res.JSON(t, &resp)
	run := strings.TrimPrefix(resp.ID, "resp_")
	owner := runtimeapi.AppUserID("appa", "alice")
	emit(t, e, owner, run, 1, queue.EventRunStatus, "running")
	emit(t, e, owner, run, 2, queue.RunEndType("completed"), "completed")

	fn := e.Do(t, "GET", "/api/v1/responses/"+resp.ID+"/events?after=0&wait=0", "", nil, "Authorization", "Bearer "+ka, "X-App-User", "alice")
	require.Equal(t, 200, fn.Status, string(fn.Body))
	var want struct{ Events []json.RawMessage }
	fn.JSON(t, &want)
	require.Len(t, want.Events, 2)

	c := e.open(t, "/stream/v1/responses/"+resp.ID+"/events", "Authorization", "Bearer "+ka, "X-App-User", "alice")
	require.Equal(t, 200, c.resp.StatusCode)
	for i := range want.Events {
		m := c.must(t)
		require.Equal(t, string(want.Events[i]), m.Data)
	}
	m := c.must(t)
	require.Equal(t, "end", m.Event)
	require.JSONEq(t, `{"status":"completed"}`, m.Data)

	for _, h := range [][]string{
		{"Authorization", "Bearer " + ka, "X-App-User", "bob"},
		{"Authorization", "Bearer " + kb, "X-App-User", "alice"},
		{"X-App-User", "alice"},
		{"Authorization", "Bearer " + admin, "X-App-User", "alice"},
		{"Authorization", "Bearer " + ka[:len(ka)-4] + "AAAA", "X-App-User", "alice"},
		{"Authorization", "Bearer " + ka},
	} {
		fn := e.Do(t, "GET", "/api/v1/responses/"+resp.ID+"/events?wait=0", "", nil, h...)
		c := e.open(t, "/stream/v1/responses/"+resp.ID+"/events", h...)
		body := c.body(t)
		require.Equal(t, fn.Status, c.resp.StatusCode, "%v: %s", h[1:], body)
		require.Equal(t, envelope(t, fn.Body), envelope(t, body), "%v", h[1:])
	}
	missing := e.open(t, "/stream/v1/responses/resp_rmissing00/events", "Authorization", "Bearer "+ka, "X-App-User", "alice")
	foreign := e.open(t, "/stream/v1/responses/"+resp.ID+"/events", "Authorization", "Bearer "+kb, "X-App-User", "alice")
	require.Equal(t, 404, missing.resp.StatusCode)
	require.Equal(t, envelope(t, missing.body(t)), envelope(t, foreign.body(t)))
}
