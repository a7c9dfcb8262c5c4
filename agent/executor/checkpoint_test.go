package executor_test

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/hermes/hermestest"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// TestPauseCheckpointsTheWorkFolder (issue 36, item 4): before a paused run gives its
// device up, its work folder is saved (a tar under CheckpointRoot) and its digest recorded
// on the run; when the run has the device again it checks the folder: files lost or
// changed during the pause are restored from the checkpoint (files added meanwhile stay),
// and the run goes on to complete in the same session.
func TestPauseCheckpointsTheWorkFolder(t *testing.T) {
	s := setupHermes(t, hermestest.Options{})
	s.model.SetScript("#pausable", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: strings.Fields(strings.Repeat("part-one ", 100)), TokenDelay: 20 * time.Millisecond}}})
	s.model.SetScript("You were paused", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{" and", " part", " two."}}}})
	work := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(work, "notes"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(work, "notes", "draft.md"), []byte("the draft so far\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(work, "data.csv"), []byte("a,b\n1,2\n"), 0o640))
	s.exec.HermesWorkDir, s.exec.CheckpointRoot = work, t.TempDir()
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return &harness.Hermes{Client: s.client}, nil }
	acq := &yieldAcquirer{yield: make(chan struct{}), regrant: make(chan struct{})}
	s.exec.GPU = acq

	id := s.newRunSaying(t, "write at length #pausable")
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(ctx, id) }()
	require.Eventually(t, func() bool {
		evs, _, _ := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
		for _, e := range evs {
			if e.Type == queue.EventMessageDelta {
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "the answer starts streaming")
	close(acq.yield)

	var cp string
	require.Eventually(t, func() bool {
		r := s.record(t, id)
		if r.Status != schema.RunWaitingForResource || r.Checkpoint == nil {
			return false
		}
		cp = *r.Checkpoint
		return true
	}, 20*time.Second, 10*time.Millisecond, "the paused run records its checkpoint")
	require.Regexp(t, `^p1 sha256:[0-9a-f]{64}$`, cp)
	require.FileExists(t, filepath.Join(s.exec.CheckpointRoot, id, "p1.tar"))

	// While the other job holds the device, the folder loses a file, another changes and
	// one is added.
	require.NoError(t, os.Remove(filepath.Join(work, "notes", "draft.md")))
	require.NoError(t, os.WriteFile(filepath.Join(work, "data.csv"), []byte("clobbered"), 0o640))
	require.NoError(t, os.WriteFile(filepath.Join(work, "other-job.txt"), []byte("theirs"), 0o600))

	close(acq.regrant)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the paused run did not finish")
	}
	r := s.record(t, id)
	require.Equal(t, schema.RunCompleted, r.Status)
	require.Equal(t, cp, *r.Checkpoint, "the record keeps the checkpoint it resumed from")
	b, err := os.ReadFile(filepath.Join(work, "notes", "draft.md"))
	require.NoError(t, err)
	require.Equal(t, "the draft so far\n", string(b), "the lost file is back")
	b, err = os.ReadFile(filepath.Join(work, "data.csv"))
	require.NoError(t, err)
	require.Equal(t, "a,b\n1,2\n", string(b), "the changed file is as it was at the pause")
	fi, err := os.Stat(filepath.Join(work, "data.csv"))
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o640), fi.Mode().Perm())
	b, err = os.ReadFile(filepath.Join(work, "other-job.txt"))
	require.NoError(t, err)
	require.Equal(t, "theirs", string(b), "a file added during the pause stays")
	require.NoDirExists(t, filepath.Join(s.exec.CheckpointRoot, id), "the checkpoint is removed once the folder matches")
}

// TestPauseCheckpointsTheRunsOwnFolder: on a harness whose runs work in their own folders
// (a member's Hermes, executor.MemberHome), a pause checkpoints the run's folder only: its
// own lost file comes back, and another run's file changed during the pause (the member's
// other job, in its own folder) keeps that run's change.
func TestPauseCheckpointsTheRunsOwnFolder(t *testing.T) {
	s := setupHermes(t, hermestest.Options{})
	s.model.SetScript("#pausable", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: strings.Fields(strings.Repeat("part-one ", 100)), TokenDelay: 20 * time.Millisecond}}})
	s.model.SetScript("You were paused", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{" and", " part", " two."}}}})
	work := t.TempDir()
	s.exec.CheckpointRoot = t.TempDir()
	h := &harness.Hermes{Client: s.client}
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return h, nil }
	s.exec.MemberHome = func(context.Context, *schema.HarnessProfile, string) (executor.MemberHome, error) {
		return executor.MemberHome{Harness: h, WorkDir: work, Cwd: work, Release: func() {}}, nil
	}
	acq := &yieldAcquirer{yield: make(chan struct{}), regrant: make(chan struct{})}
	s.exec.GPU = acq

	id := s.newRunSaying(t, "write at length #pausable")
	mine, theirs := filepath.Join(work, executor.RunsDir, id), filepath.Join(work, executor.RunsDir, "r-other-job")
	for _, d := range []string{mine, theirs} {
		require.NoError(t, os.MkdirAll(d, 0o750))
		require.NoError(t, os.WriteFile(filepath.Join(d, "draft.md"), []byte("as at the pause\n"), 0o600))
	}
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(ctx, id) }()
	require.Eventually(t, func() bool {
		evs, _, _ := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
		for _, e := range evs {
			if e.Type == queue.EventMessageDelta {
				return true
			}
		}
		return false
	}, 20*time.Second, 5*time.Millisecond, "the answer starts streaming")
	close(acq.yield)
	require.Eventually(t, func() bool {
		r := s.record(t, id)
		return r.Status == schema.RunWaitingForResource && r.Checkpoint != nil
	}, 20*time.Second, 10*time.Millisecond, "the paused run records its checkpoint")

	// During the pause the run's own file is lost, and the member's other job rewrites its own.
	require.NoError(t, os.Remove(filepath.Join(mine, "draft.md")))
	require.NoError(t, os.WriteFile(filepath.Join(theirs, "draft.md"), []byte("the other job's new version\n"), 0o600))
	close(acq.regrant)
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("the paused run did not finish")
	}
	require.Equal(t, schema.RunCompleted, s.record(t, id).Status)
	b, err := os.ReadFile(filepath.Join(mine, "draft.md"))
	require.NoError(t, err)
	require.Equal(t, "as at the pause\n", string(b), "the run's own lost file is back")
	b, err = os.ReadFile(filepath.Join(theirs, "draft.md"))
	require.NoError(t, err)
	require.Equal(t, "the other job's new version\n", string(b), "another run's work is never undone")
}
