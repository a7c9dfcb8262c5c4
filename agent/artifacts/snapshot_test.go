package artifacts

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// A path swapped after the folder was listed (a file replaced by a symbolic link, a
// folder by a link to another place) is refused when it is opened: nothing outside the
// run's folder is read.
func TestSnapshotNeverLeavesTheFolder(t *testing.T) {
	outside := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(outside, "secret"), []byte("s3cret"), 0o600))
	dir := t.TempDir()
	root, err := os.OpenRoot(dir)
	require.NoError(t, err)
	defer root.Close()

	require.NoError(t, os.WriteFile(filepath.Join(dir, "a.txt"), []byte("mine"), 0o600))
	l, skip, err := snapshot(root, "a.txt", 1<<20)
	require.NoError(t, err)
	require.Empty(t, skip)
	defer os.Remove(l.path)
	b, err := os.ReadFile(l.path)
	require.NoError(t, err)
	require.Equal(t, "mine", string(b))
	fi, err := os.Stat(l.path)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "the copy is private")

	// Listed as a file, then swapped for a link to the secret.
	require.NoError(t, os.Remove(filepath.Join(dir, "a.txt")))
	require.NoError(t, os.Symlink(filepath.Join(outside, "secret"), filepath.Join(dir, "a.txt")))
	_, skip, err = snapshot(root, "a.txt", 1<<20)
	require.NoError(t, err)
	require.Equal(t, reasonSymlink, skip)

	// A folder swapped for a link to another place.
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "sub")))
	_, skip, err = snapshot(root, "sub/secret", 1<<20)
	require.NoError(t, err)
	require.Equal(t, reasonSymlink, skip)

	require.NoError(t, os.WriteFile(filepath.Join(dir, "big"), make([]byte, 2048), 0o600))
	_, skip, err = snapshot(root, "big", 1024)
	require.NoError(t, err)
	require.Equal(t, "larger than 1024 bytes", skip)
}
