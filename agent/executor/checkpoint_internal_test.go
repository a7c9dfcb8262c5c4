package executor

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCheckpointRefusesATamperedSaveAndNeverFollowsALink: a checkpoint whose tar no longer
// matches the digest the run recorded is refused; a symlink put where a saved file was is
// replaced by the file, and the link's target is left untouched.
func TestCheckpointRefusesATamperedSaveAndNeverFollowsALink(t *testing.T) {
	t.Parallel()
	dir, outside := t.TempDir(), t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("alpha"), 0o600))
	tarPath := filepath.Join(t.TempDir(), "r1", "p1.tar")
	digest, err := saveCheckpoint(dir, tarPath)
	require.NoError(t, err)
	n, err := checkCheckpoint(dir, tarPath, digest)
	require.NoError(t, err)
	require.Zero(t, n, "an untouched folder needs nothing restored")

	target := filepath.Join(outside, "secret")
	require.NoError(t, os.WriteFile(target, []byte("not the run's"), 0o600))
	require.NoError(t, os.Remove(filepath.Join(dir, "a.txt")))
	require.NoError(t, os.Symlink(target, filepath.Join(dir, "a.txt")))
	n, err = checkCheckpoint(dir, tarPath, digest)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	fi, err := os.Lstat(filepath.Join(dir, "a.txt"))
	require.NoError(t, err)
	require.True(t, fi.Mode().IsRegular())
	b, _ := os.ReadFile(target)
	require.Equal(t, "not the run's", string(b))

	// A saved file's folder replaced by a link out of the work folder: the restore refuses
	// to write through it, and nothing outside changes.
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "notes"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "notes", "n.md"), []byte("note"), 0o600))
	d2, err := saveCheckpoint(dir, tarPath)
	require.NoError(t, err)
	require.NoError(t, os.RemoveAll(filepath.Join(dir, "notes")))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "notes")))
	_, err = checkCheckpoint(dir, tarPath, d2)
	require.Error(t, err)
	require.NoFileExists(t, filepath.Join(outside, "n.md"))
	digest = d2
	require.NoError(t, os.Remove(filepath.Join(dir, "notes")))
	_, err = checkCheckpoint(dir, tarPath, d2)
	require.NoError(t, err, "with the link gone the folder is restored")
	b, err = os.ReadFile(filepath.Join(dir, "notes", "n.md"))
	require.NoError(t, err)
	require.Equal(t, "note", string(b))

	_, err = checkCheckpoint(dir, tarPath, "sha256:00")
	require.ErrorContains(t, err, "the checkpoint's digest is")
	other := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(other, "a.txt"), []byte("forged"), 0o600))
	_, err = saveCheckpoint(other, tarPath) // the tar replaced behind the run's back
	require.NoError(t, err)
	_, err = checkCheckpoint(dir, tarPath, digest)
	require.ErrorContains(t, err, "the run recorded "+digest)
}
