package daemon_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// TestApprovalWaitHoldsNoDevice (issue 32 item 1; it replaces issue 14 item 3's test, in
// which the waiting run held the device): one user's coding run on the exclusive xtx
// device waits for its owner's approval and gives the device back meanwhile; another
// user's coding run for the same device runs to completion, and the device's queue stays
// empty. Once the owner answers, the first run takes the device again and completes.
func TestApprovalWaitHoldsNoDevice(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t)
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
	_, status := env.Follow(t, jwtB, b.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status, "B runs while A waits for its owner")
	rb := settledRun(t, env, b.RunID)
	require.Nil(t, rb.QueueReason)
	require.Equal(t, schema.RunWaitingForApproval, runRecord(t, env, a.RunID).Status)
	rdb := env.Redis.Client()
	defer rdb.Close()
	require.Eventually(t, func() bool {
		d, _ := rdb.HGet(context.Background(), queue.GPUKey("xtx"), "queueDepth").Result()
		return d == "0"
	}, 10*time.Second, 50*time.Millisecond, "nobody waits for the device")

	res := env.Do(t, "POST", "/api/runs/"+a.RunID+"/approval", jwtA, map[string]any{"requestId": requestID, "choice": "once"})
	require.Equal(t, 202, res.Status, string(res.Body))
	_, status = env.Follow(t, jwtA, a.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	require.Nil(t, settledRun(t, env, a.RunID).QueueReason)
}
