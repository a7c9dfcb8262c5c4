package backup

import (
	"archive/tar"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/storage"
	"github.com/stretchr/testify/require"

	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// TestBackupRestoresAttachedUploads: a message's attached file lives in the uploads
// bucket, readable and deletable by its uploader only. Backup and restore cover every
// bucket of the model, so after a restore into an empty project the message still finds
// its file: same id, same bytes, same permissions (and a file of another bucket with the
// same id stays apart).
func TestBackupRestoresAttachedUploads(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	src := schematest.New(t)
	const owner, upID = "user-ada", "upl-notes"
	content := []byte("the attached notes: buy milk\n")
	require.NoError(t, src.Store.CreateUpload(ctx, upID, owner, "notes.txt", content))
	// An artifact with the same file id, other bytes: buckets are archived apart.
	art := filepath.Join(t.TempDir(), "other.bin")
	require.NoError(t, os.WriteFile(art, []byte("an artifact"), 0o600))
	st := storage.New(src.Client)
	_, err := st.CreateFile(schema.BucketArtifacts, upID, file.NewInputFile(art, "other.bin"),
		st.WithCreateFilePermissions([]string{`read("user:user-bob")`}))
	require.NoError(t, err)
	text := "see the attached notes"
	_, err = schema.For[schema.Conversation](src.Store, schema.CollConversations).Create(ctx, "conv-att", owner,
		&schema.Conversation{OwnerID: owner, Title: "with a file", LastActivityAt: "2026-12-01T10:00:00.000+00:00"})
	require.NoError(t, err)
	_, err = schema.For[schema.Message](src.Store, schema.CollMessages).Create(ctx, "msg-att", owner, &schema.Message{OwnerID: owner,
		ConversationID: "conv-att", Sequence: 1, Role: "user", Text: &text, Attachments: []string{upID}})
	require.NoError(t, err)

	archive := filepath.Join(t.TempDir(), "b.tar")
	res, err := Backup(ctx, opts(src, nil), archive)
	require.NoError(t, err)
	m := res.Manifest
	require.Equal(t, 2, m.Format)
	require.Equal(t, []BucketCounts{{ID: schema.BucketArtifacts, Files: 1, FileBytes: 11}, {ID: schema.BucketUploads, Files: 1,
		FileBytes: int64(len(content))}}, m.Buckets, "every bucket of the model, in its order")
	require.Equal(t, 2, m.Counts.Files)
	require.Equal(t, []string{schema.BucketArtifacts, schema.BucketUploads}, m.Schema.Buckets)
	paths := []string{}
	for _, e := range m.Entries {
		paths = append(paths, e.Path)
	}
	require.Contains(t, paths, "buckets/uploads/files/"+upID)
	require.Contains(t, paths, "buckets/artifacts/files/"+upID)

	dst := schematest.New(t)
	rep, err := Restore(ctx, opts(dst, nil), archive)
	require.NoError(t, err)
	require.Equal(t, 1, rep.Created["files/"+schema.BucketUploads])
	require.Equal(t, 1, rep.Created["files/"+schema.BucketArtifacts])

	// The restored message names its file, and the file is there as its owner left it.
	msg, err := schema.For[schema.Message](dst.Store, schema.CollMessages).Get(ctx, "msg-att")
	require.NoError(t, err)
	require.Equal(t, []string{upID}, msg.Attachments)
	f, err := storage.New(dst.Client).GetFile(schema.BucketUploads, upID)
	require.NoError(t, err)
	require.ElementsMatch(t, schema.UploadPermissions(owner), f.Permissions, "read/delete for the uploader only")
	require.Equal(t, "notes.txt", f.Name)
	got, err := storage.New(dst.Client).GetFileDownload(schema.BucketUploads, upID)
	require.NoError(t, err)
	require.Equal(t, content, *got)
	up, err := dst.Store.Upload(ctx, owner, upID)
	require.NoError(t, err, "admission finds the restored file the uploader's")
	require.True(t, up.Complete)
	require.True(t, up.Private)
	_, err = dst.Store.Upload(ctx, "user-bob", upID)
	require.ErrorIs(t, err, schema.ErrNotFound, "nobody else's")
	a, err := storage.New(dst.Client).GetFileDownload(schema.BucketArtifacts, upID)
	require.NoError(t, err)
	require.Equal(t, "an artifact", string(*a))

	// Restoring again changes nothing.
	rep, err = Restore(ctx, opts(dst, nil), archive)
	require.NoError(t, err)
	require.Empty(t, rep.Created)
	require.Equal(t, 1, rep.Present["files/"+schema.BucketUploads])
}

// TestRestoreReadsAFormat1Archive: an archive written before the uploads bucket (format
// 1: one bucket, files.jsonl and files/<id> at the root) still restores into the current
// model, its artifacts in the artifacts bucket and the uploads bucket left empty.
func TestRestoreReadsAFormat1Archive(t *testing.T) {
	t.Parallel()
	_, archive := small(t)
	v1 := toFormat1(t, archive)
	mv1, err := ReadManifest(v1)
	require.NoError(t, err)
	require.Equal(t, 1, mv1.Format)
	dst := schematest.New(t)
	rep, err := Restore(context.Background(), opts(dst, nil), v1)
	require.NoError(t, err)
	require.Equal(t, 2, rep.Created["files/"+schema.BucketArtifacts])
	b, err := storage.New(dst.Client).GetFileDownload(schema.BucketArtifacts, "art-small")
	require.NoError(t, err)
	require.Equal(t, "# notes\n", string(*b))
	f, err := storage.New(dst.Client).GetFile(schema.BucketArtifacts, "art-small")
	require.NoError(t, err)
	require.Equal(t, []string{`read("user:user-bob")`}, f.Permissions)
}

// toFormat1 rewrites a format 2 archive the way a format 1 build wrote it: the artifacts
// bucket's members at the root, no other bucket, the manifest naming its one bucket.
func toFormat1(t *testing.T, from string) string {
	t.Helper()
	in, err := os.Open(from)
	require.NoError(t, err)
	defer in.Close()
	tr := tar.NewReader(in)
	type member struct {
		hdr  *tar.Header
		body []byte
	}
	var members []member
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		b, err := io.ReadAll(tr)
		require.NoError(t, err)
		members = append(members, member{h, b})
	}
	require.Equal(t, manifestName, members[0].hdr.Name)
	var m map[string]any
	require.NoError(t, json.Unmarshal(members[0].body, &m))
	art := bucketDir(schema.BucketArtifacts)
	rename := func(p string) (string, bool) {
		switch {
		case strings.HasPrefix(p, art):
			return strings.TrimPrefix(p, art), true
		case strings.HasPrefix(p, bucketsDir):
			return "", false
		}
		return p, true
	}
	entries := []any{}
	for _, e := range m["entries"].([]any) {
		e := e.(map[string]any)
		if p, ok := rename(e["path"].(string)); ok {
			e["path"] = p
			entries = append(entries, e)
		}
	}
	m["entries"] = entries
	m["format"] = 1
	m["bucket"] = schema.BucketArtifacts
	delete(m, "buckets")
	delete(m["schema"].(map[string]any), "buckets")
	mb, err := json.Marshal(m)
	require.NoError(t, err)
	to := filepath.Join(t.TempDir(), "v1.tar")
	out, err := os.Create(to)
	require.NoError(t, err)
	defer out.Close()
	tw := tar.NewWriter(out)
	members[0].body = mb
	for _, mb := range members {
		name, ok := rename(mb.hdr.Name)
		if !ok {
			continue
		}
		h := *mb.hdr
		h.Name, h.Size = name, int64(len(mb.body))
		require.NoError(t, tw.WriteHeader(&h))
		_, err := tw.Write(mb.body)
		require.NoError(t, err)
	}
	require.NoError(t, tw.Close())
	return to
}

// TestResumeAFormat1Journal: a backup a format 1 build cut short (its state.json has one
// "bucket" and "files", no "buckets") resumes its documents under this build and lists
// every bucket, so the archive is complete.
func TestResumeAFormat1Journal(t *testing.T) {
	t.Parallel()
	src := schematest.New(t)
	populate(t, src, 1024)
	require.NoError(t, src.Store.CreateUpload(context.Background(), "upl-1", "user-ada", "a.txt", []byte("attached")))
	archive := filepath.Join(t.TempDir(), "b.tar")
	ctx, cancel := context.WithCancel(context.Background())
	_, err := Backup(ctx, opts(src, &cancelOn{what: "backup: " + schema.CollConversations + ":", cancel: cancel}), archive)
	require.ErrorIs(t, err, context.Canceled)
	state := filepath.Join(archive+".partial", "state.json")
	b, err := os.ReadFile(state)
	require.NoError(t, err)
	var st map[string]any
	require.NoError(t, json.Unmarshal(b, &st))
	delete(st, "buckets")
	st["bucket"] = schema.BucketArtifacts
	st["files"] = map[string]any{"cursor": "", "offset": 0, "count": 0, "bytes": 0, "done": false}
	b, err = json.Marshal(st)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(state, b, 0o600))

	res, err := Backup(context.Background(), opts(src, nil), archive)
	require.NoError(t, err)
	require.True(t, res.Resumed)
	require.Equal(t, 4, res.Manifest.Counts.Documents[schema.CollConversations])
	require.Equal(t, []BucketCounts{{ID: schema.BucketArtifacts, Files: 2, FileBytes: 1024 + 8}, {ID: schema.BucketUploads, Files: 1, FileBytes: 8}},
		res.Manifest.Buckets)
	_, err = Restore(context.Background(), opts(schematest.New(t), nil), archive)
	require.NoError(t, err)
}
