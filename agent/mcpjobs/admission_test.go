package mcpjobs

import (
	"context"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/admit"
	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// A label-restricted role through enqueue_job, on the real admission (functions/admit on
// the agent's store, as the daemon wires it): the role check is admission's, with the
// labels the agent knows of the owner. The agent's key cannot read users, so it knows
// none (Labels nil, as in agent/daemon): a user without the label is refused, the model
// reads the refusal as a tool error, and nothing is admitted; an open role is admitted.
func TestARestrictedRoleIsRefusedAtAdmission(t *testing.T) {
	boot := `{
  "harnesses": [{"profileId": "direct", "kind": "direct", "baseUrl": "http://127.0.0.1:1/v1", "profileName": "", "keyRef": "GATEWAY_API_KEY"}],
  "routes": [{"routeId": "work", "alias": "work", "device": "xtx", "backendModel": "demo-work", "contextBudget": 131072, "maxOutput": 4096}],
  "toolCeiling": ["terminal", "file", "web"],
  "roles": {
    "chat": {"harness": "direct", "route": "work", "tools": []},
    "research": {"harness": "direct", "route": "work", "tools": ["web"]},
    "coding": {"harness": "direct", "route": "work", "tools": ["terminal", "file"], "labels": ["coder"]}
  }
}`
	env := functionstest.New(t, functionstest.Options{Bootstrap: boot})
	alice, jwt := env.SignUp(t, "alice@example.com", "password-alice")
	conv := env.Conversation(t, jwt)

	rdb := env.Redis.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	aq := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { _ = aq.Close() })
	adm := &admit.Admitter{RDB: rdb, Enq: queue.NewEnqueuer(aq), Plans: &runconfig.Cache{RDB: rdb}}
	reg := &Registry{RDB: rdb, Server: "pa"}
	srv := &Server{Registry: reg, Key: testKey, MatchWait: 200 * time.Millisecond,
		Runs: func(_ context.Context, run string) (Caller, error) {
			return Caller{Owner: alice, Conversation: conv}, nil
		},
		Admit: func(ctx context.Context, req admit.Request) (admit.Result, error) {
			return adm.Admit(ctx, env.Store, req)
		},
		State: func(context.Context, string) (RunState, error) { return RunState{Status: "queued"}, nil }}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	s := &setup{reg: reg, url: hs.URL}
	cs := s.session(t)

	args := map[string]any{"role": "coding", "instructions": "fix the tests"}
	s.model(t, "run-a", "call_1", "enqueue_job", args)
	_, msg := call(t, cs, "enqueue_job", args)
	require.Contains(t, msg, `you may not use the "coding" role`, "the refusal reaches the model as a tool error")
	runID, _ := admit.IDs(alice, RequestID("run-a", "call_1"))
	_, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(context.Background(), runID)
	require.ErrorIs(t, err, schema.ErrNotFound, "nothing is admitted")

	open := map[string]any{"role": "research", "instructions": "compare GPUs"}
	s.model(t, "run-a", "call_2", "enqueue_job", open)
	out, msg := call(t, cs, "enqueue_job", open)
	require.Empty(t, msg)
	want, _ := admit.IDs(alice, RequestID("run-a", "call_2"))
	require.Equal(t, want, out["job"])
	run, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(context.Background(), want)
	require.NoError(t, err)
	require.Equal(t, "research", run.Role)
	require.Equal(t, conv, run.ConversationID)
}
