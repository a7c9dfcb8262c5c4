package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/agenttest"
	"privateassistant/agent/gpu"
	"privateassistant/queue"
	"privateassistant/schema"
)

// TestApprovalWaitIsShownToOtherUsers (issue 14, item 3): one user's coding run holds the
// exclusive xtx device and waits for its owner's approval; another user's coding run for
// the same device waits, and its record says why: which run holds the device (short id
// only, never its content), with which model, that it waits for its owner's approval, and
// its position. Once the owner answers, both runs complete, one after the other.
func TestApprovalWaitIsShownToOtherUsers(t *testing.T) {
	t.Parallel()
	env := agenttest.New(t)
	cfg := filepath.Join(t.TempDir(), "gpu.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"devices": [{"name": "xtx", "slots": 1,
		"backend": {"kind": "upstream", "url": "`+env.ModelURL+`"},
		"models": {"demo-model": {"context": 131072}}}]}`), 0o600))
	env.Settings.GPUConfig, env.Settings.GatewayAddr, env.Settings.GatewayKey = cfg, "127.0.0.1:0", "gateway-key-0123456789"
	env.StartAgent(t)

	_, jwtA := env.SignUp(t, "holder@example.com", "password-holder")
	_, jwtB := env.SignUp(t, "waiter@example.com", "password-waiter")
	a := env.Admit(t, jwtA, env.Conversation(t, jwtA), "a1", "please run #tool", "coding")
	var requestID string
	env.Follow(t, jwtA, a.RunID, 30*time.Second, func(ev queue.Event) bool {
		if ev.Type != queue.EventApprovalRequest {
			return true
		}
		var d struct{ RequestID string }
		require.NoError(t, json.Unmarshal(ev.Data, &d))
		requestID = d.RequestID
		return false
	})
	require.NotEmpty(t, requestID)

	b := env.Admit(t, jwtB, env.Conversation(t, jwtB), "b1", "hello from another user", "coding")
	var reason string
	require.Eventually(t, func() bool {
		r := runRecord(t, env, b.RunID)
		if r.QueueReason != nil {
			reason = *r.QueueReason
		}
		return r.Status == schema.RunWaitingForResource && r.QueuePosition != nil && *r.QueuePosition == 1 &&
			strings.Contains(reason, "waiting for its owner's approval")
	}, 20*time.Second, 50*time.Millisecond, "last reason: %q", reason)
	require.Contains(t, reason, "run "+gpu.ShortID(a.RunID))
	require.NotContains(t, reason, a.RunID, "only the short id")
	require.Contains(t, reason, "demo-model")
	require.Contains(t, reason, "running for", "for how long")
	require.NotContains(t, reason, "ls -la", "never the holder's content")
	rdb := env.Redis.Client()
	defer rdb.Close()
	depth := func() string {
		d, _ := rdb.HGet(context.Background(), queue.GPUKey("xtx"), "queueDepth").Result()
		return d
	}
	require.Eventually(t, func() bool { return depth() == "1" }, 10*time.Second, 50*time.Millisecond)
	require.Never(t, func() bool { return depth() != "1" }, 1500*time.Millisecond, 50*time.Millisecond,
		"the device's queue depth counts the run waiting in the manager (its asynq task is active, not pending)")

	res := env.Do(t, "POST", "/api/runs/"+a.RunID+"/approval", jwtA, map[string]any{"requestId": requestID, "choice": "once"})
	require.Equal(t, 202, res.Status, string(res.Body))
	_, status := env.Follow(t, jwtA, a.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	_, status = env.Follow(t, jwtB, b.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	rb := settledRun(t, env, b.RunID)
	require.Nil(t, rb.QueueReason, "the reason goes once the run runs")
}
