package executor

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A run's folders are reached from the member's home: a work folder, runs folder or run
// folder the run's tools swapped for a link leading out of the home is never entered
// (nothing made, placed or read through it); a link inside the home is followed.
func TestRunFoldersAreNeverReachedThroughALinkOutOfTheHome(t *testing.T) {
	t.Parallel()
	home, outside := t.TempDir(), t.TempDir()
	a := &attempt{e: &Executor{}, workDir: filepath.Join(home, "work"), runID: "r1"}
	host, shown := a.runFolder()
	require.Equal(t, filepath.Join(home, "work", RunsDir, "r1"), host)
	require.Equal(t, host, shown)
	require.NoError(t, a.prepareRunFolder("pa-r1"))
	require.DirExists(t, host)
	b, err := os.ReadFile(filepath.Join(home, "work", RunsDir, sessionsDir, "pa-r1"))
	require.NoError(t, err)
	require.Equal(t, "r1\n", string(b))

	// The run folder swapped for a link out of the home.
	require.NoError(t, os.Rename(host, host+".old"))
	require.NoError(t, os.Symlink(outside, host))
	_, err = a.openDir(host)
	require.Error(t, err)
	require.Error(t, a.prepareRunFolder("pa-r1"))
	// The sessions folder too: the run goes on, nothing is written there.
	a.runID = "r2"
	sessions := filepath.Join(home, "work", RunsDir, sessionsDir)
	require.NoError(t, os.RemoveAll(sessions))
	require.NoError(t, os.Symlink(outside, sessions))
	require.NoError(t, a.prepareRunFolder("pa-r2"))
	// The work folder itself.
	work := filepath.Join(home, "work")
	require.NoError(t, os.Rename(work, work+".old"))
	require.NoError(t, os.Symlink(outside, work))
	a.runID = "r3"
	_, err = a.openDir(filepath.Join(work, RunsDir, "r3"))
	require.Error(t, err)
	require.Error(t, a.prepareRunFolder("pa-r3"))
	ents, err := os.ReadDir(outside)
	require.NoError(t, err)
	require.Empty(t, ents, "nothing was made or written outside the home")

	// A link that stays inside the home is followed.
	require.NoError(t, os.Remove(work))
	require.NoError(t, os.Symlink("work.old", work))
	a.runID = "r4"
	r, err := a.openDir(filepath.Join(work, RunsDir, "r4"))
	require.NoError(t, err)
	r.Close()
	require.DirExists(t, filepath.Join(home, "work.old", RunsDir, "r4"))
}

// A pause's checkpoint of a member's run folder is taken and restored from the member's
// home: a folder swapped for a link out of it is neither saved (no host file reaches the
// checkpoint, to be restored into the run's folder later) nor restored into.
func TestCheckpointsNeverFollowTheRunFolderOutOfTheHome(t *testing.T) {
	t.Parallel()
	home, outside := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("host secret"), 0o600))
	a := &attempt{e: &Executor{CheckpointRoot: t.TempDir()}, workDir: filepath.Join(home, "work"), runID: "r1", ownFolder: true, pauses: 1}
	host, _ := a.runFolder()
	require.NoError(t, os.MkdirAll(host, 0o750))
	require.NoError(t, os.WriteFile(filepath.Join(host, "secret"), []byte("the run's own"), 0o600))

	// Swapped before the pause: nothing is saved.
	require.NoError(t, os.Rename(host, host+".old"))
	require.NoError(t, os.Symlink(outside, host))
	require.Empty(t, a.checkpoint(context.Background()))
	_, err := os.Stat(a.e.checkpointPath("r1", 1))
	require.ErrorIs(t, err, os.ErrNotExist)

	// Saved as it is, then swapped during the pause: nothing is restored through the link.
	require.NoError(t, os.Remove(host))
	require.NoError(t, os.Rename(host+".old", host))
	require.NotEmpty(t, a.checkpoint(context.Background()))
	require.NoError(t, os.Rename(host, host+".old"))
	require.NoError(t, os.Symlink(outside, host))
	require.Error(t, a.checkResumed())
	b, err := os.ReadFile(filepath.Join(outside, "secret"))
	require.NoError(t, err)
	require.Equal(t, "host secret", string(b), "the host's file is untouched")
}
