package backup

import (
	"archive/tar"
	"context"
	"io"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// small backs up a small populated project and returns the env and the archive.
func small(t *testing.T) (*schematest.Env, string) {
	t.Helper()
	src := schematest.New(t)
	populate(t, src, 1024)
	archive := filepath.Join(t.TempDir(), "b.tar")
	_, err := Backup(context.Background(), opts(src, nil), archive)
	require.NoError(t, err)
	return src, archive
}

// rewrite copies an archive, changing the member named name with edit.
func rewrite(t *testing.T, from, name string, edit func([]byte) []byte) string {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	to := filepath.Join(t.TempDir(), "edited.tar")
	out, err := os.Create(to)
	require.NoError(t, err)
	defer out.Close()
	tr, tw := tar.NewReader(in), tar.NewWriter(out)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		if h.Name == name {
			b = edit(b)
			h.Size = int64(len(b))
		}
		require.NoError(t, tw.WriteHeader(h))
		_, err = tw.Write(b)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return to
}

func TestRestoreRefusesATamperedArchive(t *testing.T) {
	t.Parallel()
	_, archive := small(t)
	bad := rewrite(t, archive, "buckets/artifacts/files/art-small", func(b []byte) []byte { return append(b, '!') })
	_, err := Restore(context.Background(), opts(schematest.New(t), nil), bad)
	require.ErrorIs(t, err, ErrChecksum)
}

func TestRestoreRefusesANewerSchemaOrFormat(t *testing.T) {
	t.Parallel()
	src, archive := small(t)
	dst := schematest.New(t)
	o := opts(dst, nil)
	older := o.Model
	older.Collections = nil
	for _, c := range o.Model.Collections {
		if c.ID != schema.CollInvitations {
			older.Collections = append(older.Collections, c)
		}
	}
	o.Model = older // this build's model lacks a collection the archive has
	_, err := Restore(context.Background(), o, archive)
	require.ErrorIs(t, err, ErrSchema)
	require.ErrorContains(t, err, schema.CollInvitations)

	o.Model = dst.Model
	o.Model.Buckets = o.Model.Buckets[:1] // nor a bucket the archive has
	_, err = Restore(context.Background(), o, archive)
	require.ErrorIs(t, err, ErrSchema)
	require.ErrorContains(t, err, "bucket:"+schema.BucketUploads)

	newer := rewrite(t, archive, manifestName, func(b []byte) []byte {
		return []byte(`{"format": 99}`)
	})
	_, err = Restore(context.Background(), opts(dst, nil), newer)
	require.ErrorIs(t, err, ErrNewerFormat)
	_ = src
}

func TestRestoreRefusesAProjectThatIsNotEmpty(t *testing.T) {
	t.Parallel()
	_, archive := small(t)
	dst := schematest.New(t)
	_, err := schema.For[schema.Conversation](dst.Store, schema.CollConversations).Create(context.Background(), "conv-0-0", "user-ada",
		&schema.Conversation{OwnerID: "user-ada", Title: "someone else's", LastActivityAt: "2026-01-01T00:00:00.000+00:00"})
	require.NoError(t, err)
	_, err = Restore(context.Background(), opts(dst, nil), archive)
	require.ErrorIs(t, err, ErrNotEmpty)
}

// TestResumeAfterTheCursorRecordWasDeleted: a backup cut short right after a page whose
// last record is then deleted lists that collection again when resumed (the journal's
// cursor is gone), and the archive holds exactly what is left.
func TestResumeAfterTheCursorRecordWasDeleted(t *testing.T) {
	t.Parallel()
	src := schematest.New(t)
	populate(t, src, 1024)
	archive := filepath.Join(t.TempDir(), "b.tar")
	ctx, cancel := context.WithCancel(context.Background())
	o := opts(src, &cancelOn{what: "backup: " + schema.CollConversations + ": 1 documents", cancel: cancel})
	o.PageSize = 1
	_, err := Backup(ctx, o, archive)
	require.ErrorIs(t, err, context.Canceled)
	// The first conversation (the journal's cursor) goes away.
	convs, err := listAll(context.Background(), opts(src, nil), databasesOf(src), schema.CollConversations)
	require.NoError(t, err)
	require.Len(t, convs, 4)
	b, err := os.ReadFile(filepath.Join(archive+".partial", docsDir+schema.CollConversations+".jsonl"))
	require.NoError(t, err)
	first, _, err := canonical(b)
	require.NoError(t, err)
	require.NoError(t, schema.For[schema.Conversation](src.Store, schema.CollConversations).Delete(context.Background(), first["$id"].(string)))

	var out cancelOn
	o = opts(src, &out)
	o.PageSize = 1
	res, err := Backup(context.Background(), o, archive)
	require.NoError(t, err)
	require.Contains(t, out.buf.String(), "is gone; listing conversations again")
	require.Equal(t, 3, res.Manifest.Counts.Documents[schema.CollConversations])
}

func TestManifestEndpointHoldsNoCredentials(t *testing.T) {
	require.Equal(t, "https://appwrite.example.lan/v1", redactURL("https://backup:s3cret@appwrite.example.lan/v1"))
	require.Equal(t, "http://127.0.0.1:9/v1", redactURL("http://127.0.0.1:9/v1"))
}
