package executor_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/hermes/hermesreal"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// TestPreemptionMidJobOnRealHermes (issue 36, item 4): a job on the real Hermes runs a
// tool (appending to a file), then streams; a swap asks it to yield mid-stream; it pauses
// at the turn boundary, checkpoints its work folder (recorded on the run), gives the
// device up and, once it has it again, checks the folder (the file lost during the pause
// comes back), then goes on in the same session with a second tool. Nothing is lost and
// nothing runs twice: the first file holds one append, the second exists once.
func TestPreemptionMidJobOnRealHermes(t *testing.T) {
	hermesreal.Require(t)
	model := modeltest.New("demo-model")
	srv := hermesreal.Start(t, hermesreal.Options{Model: model})
	s := setup(t, nil)
	h := &harness.Hermes{Client: srv.Client()}
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return h, nil }
	s.exec.HermesWorkDir, s.exec.CheckpointRoot = srv.WorkDir, t.TempDir()
	hs := &hermesSuite{suite: s, model: model}
	acq := &yieldAcquirer{yield: make(chan struct{}), regrant: make(chan struct{})}
	s.exec.GPU = acq

	first, second := filepath.Join(srv.WorkDir, "step1.txt"), filepath.Join(srv.WorkDir, "step2.txt")
	cmd := func(c string) string {
		b, _ := json.Marshal(map[string]string{"command": c})
		return string(b)
	}
	model.SetScript("#job-real", modeltest.Script{Turns: []modeltest.Turn{
		{ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: cmd("printf one >> '" + first + "'")}}},
		{Tokens: strings.Fields(strings.Repeat("writing ", 200)), TokenDelay: 20 * time.Millisecond},
	}})
	model.SetScript("You were paused", modeltest.Script{Turns: []modeltest.Turn{
		{ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: cmd("printf two >> '" + second + "'")}}},
		{Tokens: []string{" and", " done."}},
	}})

	id := hs.newRunSaying(t, "do the job #job-real")
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(ctx, id) }()
	require.Eventually(t, func() bool {
		b, _ := os.ReadFile(first)
		if string(b) != "one" {
			return false
		}
		evs, _, _ := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
		for _, e := range evs {
			if e.Type == queue.EventMessageDelta {
				return true
			}
		}
		return false
	}, 90*time.Second, 20*time.Millisecond, "the tool ran and the answer streams")
	close(acq.yield)

	var cp string
	require.Eventually(t, func() bool {
		r := hs.record(t, id)
		if r.Status != schema.RunWaitingForResource || r.Checkpoint == nil {
			return false
		}
		cp = *r.Checkpoint
		return true
	}, 60*time.Second, 20*time.Millisecond, "paused, with its checkpoint recorded")
	require.Regexp(t, `^p1 sha256:[0-9a-f]{64}$`, cp)
	require.NoError(t, os.Remove(first), "the other job's swap loses the file")

	close(acq.regrant)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-ctx.Done():
		t.Fatal("the paused run did not finish")
	}
	evs := hs.settledLog(t, id)
	require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
	b, err := os.ReadFile(first)
	require.NoError(t, err)
	require.Equal(t, "one", string(b), "restored from the checkpoint, and the first tool ran once")
	b, err = os.ReadFile(second)
	require.NoError(t, err)
	require.Equal(t, "two", string(b), "the second tool ran once, after the resume")
	r := hs.record(t, id)
	require.Equal(t, schema.RunCompleted, r.Status)
	require.Equal(t, cp, *r.Checkpoint)
}
