package stream_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue"
)

// beat plays a device's agent: its hot heartbeat (agent/gpu.Publisher's hash).
func beat(t *testing.T, e *env, device string, fields ...any) {
	t.Helper()
	ctx := context.Background()
	rdb := e.Redis.Client()
	defer rdb.Close()
	require.NoError(t, rdb.SAdd(ctx, queue.GPUDevicesKey(), device).Err())
	require.NoError(t, rdb.Del(ctx, queue.GPUKey(device)).Err())
	require.NoError(t, rdb.HSet(ctx, queue.GPUKey(device), append([]any{"host", "h1", "heartbeatAt", time.Now().UTC().Format(time.RFC3339Nano)}, fields...)...).Err())
}

// withoutTime is a system body without its generatedAt and its queues' ages (both move
// by themselves).
func withoutTime(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var v map[string]any
	require.NoError(t, json.Unmarshal(b, &v), "%s", b)
	require.Contains(t, v, "generatedAt")
	delete(v, "generatedAt")
	qs, _ := v["queues"].([]any)
	for _, q := range qs {
		require.Contains(t, q, "latencyMs")
		delete(q.(map[string]any), "latencyMs")
	}
	return v
}

// nextSystem reads the stream up to its next "system" message.
func nextSystem(t *testing.T, c *sseConn) msg {
	t.Helper()
	for {
		m := c.must(t)
		if m.Event == "system" {
			return m
		}
	}
}

// TestSystemPanelOnTheFeed (issue 32 item 4, issue 29 "a user who only watches causes 0
// function executions"): GET /stream/feed?system=1 carries the system panel's state as
// "system" messages without an id (the feed's cursor is untouched): at once, then within
// a second of a change; each is exactly GET /api/system's body for the same caller (a
// member's without the routes' admin figures, an admin's with them).
func TestSystemPanelOnTheFeed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, jwt := e.SignUp(t, "sys-member@example.com", "password-sysmember")
	adminID, adminJWT := e.SignUp(t, "sys-admin@example.com", "password-sysadmin")
	e.Label(t, adminID, "member", "admin")
	beat(t, e, "arc", "state", "idle", "loadedModel", "qwen")
	admit(t, e, jwt, "sys-req-1") // a pending task on the device's queue

	function := func(jwt string) map[string]any {
		res := e.Do(t, "GET", "/api/system", jwt, nil)
		require.Equal(t, 200, res.Status, string(res.Body))
		return withoutTime(t, res.Body)
	}
	for _, who := range []string{jwt, adminJWT} {
		c := e.open(t, "/stream/feed?system=1", "Authorization", "Bearer "+who)
		m := c.must(t)
		require.Equal(t, "reset", m.Event)
		feedID := m.ID
		m = nextSystem(t, c)
		require.Empty(t, m.ID, "no id: Last-Event-ID stays the feed's cursor")
		// The admin's readiness and alerts sections are /api/system's alone: they probe
		// Appwrite, the queues' consumers through asynq's inspector, the agents' reports
		// and the harness records, which the stream service's read-only Redis user and
		// key do not reach (they have their own alert rules; the admin console reads
		// /api/system; RUNBOOK "Reading readiness").
		want := function(who)
		delete(want, "readiness")
		delete(want, "alerts")
		require.Equal(t, want, withoutTime(t, []byte(m.Data)), "the function's body for this caller")
		_ = feedID
	}

	c := e.open(t, "/stream/feed?system=1", "Authorization", "Bearer "+jwt)
	require.Equal(t, "reset", c.must(t).Event)
	nextSystem(t, c)
	// The device's agent reports a change: the panel has it within a second.
	changed := time.Now()
	beat(t, e, "arc", "state", "busy", "loadedModel", "qwen", "activeModel", "qwen")
	for {
		m := nextSystem(t, c)
		var v struct {
			Devices []struct{ State string }
		}
		require.NoError(t, json.Unmarshal([]byte(m.Data), &v))
		if len(v.Devices) == 1 && v.Devices[0].State == "busy" {
			break
		}
	}
	require.Less(t, time.Since(changed), time.Second, "a device change reaches the panel within a second")
	// A feed event still comes through, numbered as before.
	e.Conversation(t, jwt)
	for {
		m := c.must(t)
		if m.Event == "" && m.Comment == "" {
			require.NotEmpty(t, m.ID)
			break
		}
	}

	bad := e.open(t, "/stream/feed?system=yes", "Authorization", "Bearer "+jwt)
	require.Equal(t, 400, bad.resp.StatusCode)
	require.Equal(t, "invalid_system", envelope(t, bad.body(t))["code"])
}

// TestRunRecordFromTheStream: GET /stream/runs/{id} is GET /api/runs/{id}'s body for the
// owner; another user's run and a missing one answer the same 404.
func TestRunRecordFromTheStream(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, jwt := e.SignUp(t, "rec-owner@example.com", "password-recowner")
	_, other := e.SignUp(t, "rec-other@example.com", "password-recother")
	run := admit(t, e, jwt, "rec-req-1")
	get := func(jwt, id string) (int, []byte) {
		c := e.open(t, "/stream/runs/"+id, "Authorization", "Bearer "+jwt)
		return c.resp.StatusCode, c.body(t)
	}
	code, body := get(jwt, run)
	require.Equal(t, 200, code, string(body))
	res := e.Do(t, "GET", "/api/runs/"+run, jwt, nil)
	require.Equal(t, 200, res.Status)
	require.JSONEq(t, string(res.Body), string(body))

	code, foreign := get(other, run)
	require.Equal(t, 404, code)
	code, missing := get(other, "run-does-not-exist-0000")
	require.Equal(t, 404, code)
	require.Equal(t, envelope(t, missing), envelope(t, foreign), "foreign looks exactly like missing")
}
