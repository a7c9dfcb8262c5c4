package artifacts_test

import (
	"context"
	"os"
	"path/filepath"
	"syscall"
	"testing"

	"github.com/appwrite/sdk-for-go/storage"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/artifacts"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// Only the run's own files are uploaded: a hard link to a file outside the run's folder
// (a secret), a symbolic link to it, a symbolic link to a folder outside, and a FIFO are
// skipped with the reason, and the secret's bytes never reach the bucket.
func TestLinksAndSpecialFilesAreNeverUploaded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := schematest.New(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.env")
	const secretText = "API_KEY=never-leaves-the-host"
	require.NoError(t, os.WriteFile(secret, []byte(secretText), 0o600))

	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "report.md"), []byte("# the run's own work"), 0o600))
	require.NoError(t, os.Link(secret, filepath.Join(dir, "notes.txt")))
	require.NoError(t, os.Symlink(secret, filepath.Join(dir, "sym.txt")))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "elsewhere")))
	require.NoError(t, syscall.Mkfifo(filepath.Join(dir, "pipe"), 0o600))

	run := &schema.Run{Meta: schema.Meta{ID: "r0123456789links"}, OwnerID: "u1", ConversationID: "c1"}
	u := &artifacts.Uploader{Store: env.Store, Attempts: 1}
	arts, skipped, err := u.UploadDir(ctx, dir, run)
	require.NoError(t, err)
	require.Len(t, arts, 1)
	require.Equal(t, "sub/report.md", arts[0].Filename)
	reasons := map[string]string{}
	for _, s := range skipped {
		reasons[s.Name] = s.Reason
	}
	require.Equal(t, map[string]string{
		"notes.txt": "a hard link (it may name a file outside the run's folder)",
		"sym.txt":   "a symbolic link (never followed)",
		"elsewhere": "a symbolic link (never followed)",
		"pipe":      "not a regular file",
	}, reasons)

	files, err := storage.New(env.Client).ListFiles(schema.BucketArtifacts)
	require.NoError(t, err)
	require.Len(t, files.Files, 1, "only the run's own file is stored")
	got, err := storage.New(env.Client).GetFileDownload(schema.BucketArtifacts, files.Files[0].Id)
	require.NoError(t, err)
	require.Equal(t, "# the run's own work", string(*got))
}
