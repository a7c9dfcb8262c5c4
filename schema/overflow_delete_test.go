package schema_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/stretchr/testify/require"

	"privateassistant/schema"
	"privateassistant/schema/appwritetest"
	"privateassistant/schema/schematest"
)

// Deleting a record deletes the overflow file it names (issue 12 item 6: a deleted
// conversation's long messages stayed in the bucket): a file that is already gone is
// fine, and a file delete that fails leaves the record, so a retry finishes the job.
func TestDeleteRemovesTheOverflowFile(t *testing.T) {
	t.Parallel()
	for _, e := range []appwritetest.Engine{appwritetest.EngineMongoDB, appwritetest.EngineMariaDB} {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			const noFilesKey = "no-files-write-key-0123456789"
			env := schematest.NewOn(t, e, map[string][]string{noFilesKey: {"documents.read", "documents.write", "files.read"}})
			admin := appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey))
			files := appwrite.NewStorage(admin)
			msgs := schema.For[schema.Message](env.Store, schema.CollMessages)
			weak := schema.For[schema.Message](schema.NewStore(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL),
				appwrite.WithProject(env.TS.Project), appwrite.WithKey(noFilesKey)), env.Model), schema.CollMessages)

			long, short := big(schema.SizeMessageText+1), "short"
			create := func(id string, seq int64, text *string) string {
				m, err := msgs.Create(ctx, id, "u1", &schema.Message{OwnerID: "u1", ConversationID: "c1", Sequence: seq, Role: "assistant", Text: text})
				require.NoError(t, err)
				if m.TextFileID == nil {
					return ""
				}
				return *m.TextFileID
			}
			fileExists := func(fid string) bool {
				_, err := files.GetFile(schema.BucketArtifacts, fid)
				if err == nil {
					return true
				}
				require.Contains(t, err.Error(), "could not be found")
				return false
			}

			fid := create("mbig", 1, &long)
			require.NotEmpty(t, fid)
			require.True(t, fileExists(fid))

			// The file cannot be deleted (no files.write): the record stays and names it.
			require.Error(t, weak.Delete(ctx, "mbig"))
			m, err := msgs.Get(ctx, "mbig")
			require.NoError(t, err)
			require.Equal(t, long, *m.Text)
			require.True(t, fileExists(fid))

			// The retry deletes the file, then the record.
			require.NoError(t, msgs.Delete(ctx, "mbig"))
			require.False(t, fileExists(fid), "the overflow file is deleted with its record")
			_, err = msgs.Get(ctx, "mbig")
			require.ErrorIs(t, err, schema.ErrNotFound)
			require.ErrorIs(t, msgs.Delete(ctx, "mbig"), schema.ErrNotFound)

			// A file already gone is fine; a record without a file deletes as before.
			fid2 := create("mbig2", 2, &long)
			_, err = files.DeleteFile(schema.BucketArtifacts, fid2)
			require.NoError(t, err)
			require.NoError(t, msgs.Delete(ctx, "mbig2"))
			require.Empty(t, create("mfit", 3, &short))
			require.NoError(t, msgs.Delete(ctx, "mfit"))
			list, err := files.ListFiles(schema.BucketArtifacts)
			require.NoError(t, err)
			require.Zero(t, list.Total, "no file is left in the bucket")
		})
	}
}

// Deleting an artifact's record deletes its file (issue 30: a deleted conversation's
// artifacts stayed downloadable); a file already gone is fine, and a file delete that
// fails leaves the record, so a retry finishes the job.
func TestDeleteRemovesTheArtifactFile(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const noFilesKey = "no-files-write-key-0123456789"
	env := schematest.New(t, map[string][]string{noFilesKey: {"documents.read", "documents.write", "files.read"}})
	admin := appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey))
	files := appwrite.NewStorage(admin)
	arts := schema.For[schema.Artifact](env.Store, schema.CollArtifacts)
	weak := schema.For[schema.Artifact](schema.NewStore(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL),
		appwrite.WithProject(env.TS.Project), appwrite.WithKey(noFilesKey)), env.Model), schema.CollArtifacts)
	dir := t.TempDir()
	create := func(id string) {
		t.Helper()
		p := filepath.Join(dir, id+".txt")
		require.NoError(t, os.WriteFile(p, []byte("the run's notes"), 0o600))
		_, err := files.CreateFile(schema.BucketArtifacts, "f"+id, file.NewInputFile(p, id+".txt"))
		require.NoError(t, err)
		_, err = arts.Create(ctx, id, "u1", &schema.Artifact{OwnerID: "u1", ConversationID: "c1", RunID: "r1", Filename: id + ".txt",
			MimeType: "text/plain", Size: 15, Checksum: "x", BucketID: schema.BucketArtifacts, FileID: "f" + id})
		require.NoError(t, err)
	}
	fileExists := func(fid string) bool {
		_, err := files.GetFile(schema.BucketArtifacts, fid)
		if err == nil {
			return true
		}
		require.Contains(t, err.Error(), "could not be found")
		return false
	}
	create("art1")
	require.Error(t, weak.Delete(ctx, "art1"), "without files.write the file stays, and so does the record")
	require.True(t, fileExists("fart1"))
	_, err := arts.Get(ctx, "art1")
	require.NoError(t, err)

	require.NoError(t, arts.Delete(ctx, "art1"))
	require.False(t, fileExists("fart1"), "the artifact's file is deleted with its record")
	_, err = arts.Get(ctx, "art1")
	require.ErrorIs(t, err, schema.ErrNotFound)

	create("art2")
	_, err = files.DeleteFile(schema.BucketArtifacts, "fart2")
	require.NoError(t, err)
	require.NoError(t, arts.Delete(ctx, "art2"), "a file already gone is fine")
}
