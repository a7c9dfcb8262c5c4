package artifacts_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"os"
	"path/filepath"
	"testing"

	"github.com/appwrite/sdk-for-go/storage"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/artifacts"
	"privateassistant/schema"
	"privateassistant/schema/appwritetest"
	"privateassistant/schema/schematest"
)

// Uploads are verified by a digest we compute (sha256 of the bytes read back), so a
// chunked upload to an S3-type storage device — whose signature is the multipart ETag,
// not an MD5 — is kept, on both real engines and both devices; a retry finds it stored.
func TestUploadsAreVerifiedByOurOwnDigest(t *testing.T) {
	t.Parallel()
	for _, e := range []appwritetest.Engine{appwritetest.EngineMongoDB, appwritetest.EngineMariaDB} {
		for _, dev := range []appwritetest.StorageDevice{appwritetest.DeviceLocal, appwritetest.DeviceS3} {
			t.Run(string(e)+"/"+string(dev), func(t *testing.T) {
				t.Parallel()
				ctx := context.Background()
				env := schematest.NewWith(t, appwritetest.Options{Engine: e, StorageDevice: dev})
				dir := t.TempDir()
				big := bytes.Repeat([]byte("0123456789abcdef"), (appwritetest.ChunkSize+ChunkExtra)/16) // two chunks
				require.NoError(t, os.WriteFile(filepath.Join(dir, "big.bin"), big, 0o600))
				require.NoError(t, os.WriteFile(filepath.Join(dir, "small.txt"), []byte("hello"), 0o600))
				run := &schema.Run{Meta: schema.Meta{ID: "r0123456789"}, OwnerID: "u1", ConversationID: "c1"}
				u := &artifacts.Uploader{Store: env.Store, Attempts: 1}

				arts, skipped, err := u.UploadDir(ctx, dir, run)
				require.NoError(t, err)
				require.Empty(t, skipped)
				require.Len(t, arts, 2)
				sum := sha256.Sum256(big)
				require.Equal(t, "big.bin", arts[0].Filename)
				require.Equal(t, hex.EncodeToString(sum[:]), arts[0].Checksum)
				got, err := storage.New(env.Client).GetFileDownload(schema.BucketArtifacts, arts[0].FileID)
				require.NoError(t, err)
				require.Equal(t, big, *got)

				again, _, err := u.UploadDir(ctx, dir, run)
				require.NoError(t, err, "a retry finds what the first upload stored")
				require.Equal(t, arts[0].FileID, again[0].FileID)
			})
		}
	}
}

// ChunkExtra makes the big file one full chunk and a part of another.
const ChunkExtra = 1 << 20

// TestUploadReportsFilesNotBytes (issue 32 item 6): an upload through a context carrying
// WithProgress reports files handled, n of m (the refused ones counted as handled), before
// each file and once at the end; never a byte or token percentage.
func TestUploadReportsFilesNotBytes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := schematest.New(t)
	dir := t.TempDir()
	for _, n := range []string{"a.txt", "b.txt", "c.txt"} {
		require.NoError(t, os.WriteFile(filepath.Join(dir, n), []byte(n), 0o600))
	}
	run := &schema.Run{Meta: schema.Meta{ID: "r0123456789"}, OwnerID: "u1", ConversationID: "c1"}
	u := &artifacts.Uploader{Store: env.Store, Attempts: 1, MaxFiles: 2}
	var seen [][2]int
	arts, skipped, err := u.UploadDir(artifacts.WithProgress(ctx, func(done, total int) { seen = append(seen, [2]int{done, total}) }), dir, run)
	require.NoError(t, err)
	require.Len(t, arts, 2)
	require.Len(t, skipped, 1, "past MaxFiles")
	require.Equal(t, [][2]int{{0, 2}, {1, 2}, {2, 2}}, seen)
	_, _, err = u.UploadDir(ctx, dir, run)
	require.NoError(t, err, "without a reporter nothing is reported")
}
