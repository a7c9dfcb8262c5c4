package schema_test

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/role"
	"github.com/appwrite/sdk-for-go/storage"
	"github.com/stretchr/testify/require"

	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// The uploads bucket as Appwrite 1.9.6 enforces it for a user's own session: a member
// (label) may create a file readable by themselves only; an account without the label may
// not create; nobody may grant another user's read; size and extension limits hold; and
// Store.Upload treats a file of someone else exactly like a missing one.
func TestUploadsBucket(t *testing.T) {
	t.Parallel()
	env := schematest.New(t)
	ctx := context.Background()
	users := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey)))
	member := func(email string, labels ...string) (string, *storage.Storage) {
		id, jwt := env.SignUp(t, email, "password-"+email)
		if labels != nil {
			_, err := users.UpdateLabels(id, labels)
			require.NoError(t, err)
		}
		c := appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithJWT(jwt))
		return id, storage.New(c)
	}
	alice, as := member("alice@example.com", "member")
	bob, bs := member("bob@example.com", "member")
	_, ss := member("stranger@example.com")

	dir := t.TempDir()
	put := func(name string, size int) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(strings.Repeat("x", size)), 0o600))
		return p
	}
	upload := func(st *storage.Storage, owner, id, p string) error {
		_, err := st.CreateFile(schema.BucketUploads, id, file.NewInputFile(p, filepath.Base(p)),
			st.WithCreateFilePermissions(schema.UploadPermissions(owner)))
		return err
	}
	require.NoError(t, upload(as, alice, "alice-notes", put("notes.txt", 100)))
	require.Error(t, upload(ss, alice, "stranger-file", put("s.txt", 10)), "no member label, no upload")
	require.Error(t, upload(bs, alice, "bob-as-alice", put("b.txt", 10)), "bob cannot grant alice's read")
	require.Error(t, upload(as, alice, "alice-exe", put("tool.exe", 10)), "extension not allowed")
	require.Error(t, upload(as, alice, "alice-big", put("big.txt", schema.MaxUploadBytes+1)), "over the size limit")

	got, err := env.Store.Upload(ctx, alice, "alice-notes")
	require.NoError(t, err)
	require.Equal(t, schema.Upload{ID: "alice-notes", Name: "notes.txt", MimeType: got.MimeType, Size: 100, Complete: true, Private: true}, got)
	_, err = env.Store.Upload(ctx, bob, "alice-notes")
	require.ErrorIs(t, err, schema.ErrNotFound, "another's file looks missing")
	_, err = env.Store.Upload(ctx, alice, "no-such-file")
	require.ErrorIs(t, err, schema.ErrNotFound)
	_, err = bs.GetFile(schema.BucketUploads, "alice-notes")
	require.Error(t, err, "bob cannot read alice's file")
	_, err = bs.DeleteFile(schema.BucketUploads, "alice-notes")
	require.Error(t, err, "nor delete it")
	require.NoError(t, upload(as, alice, "alice-removed", put("removed.txt", 3)))
	_, err = as.DeleteFile(schema.BucketUploads, "alice-removed")
	require.NoError(t, err, "alice deletes a file she removed from the composer")

	// A file its owner made readable by others is hers but not private.
	_, err = as.CreateFile(schema.BucketUploads, "alice-shared", file.NewInputFile(put("shared.md", 5), "shared.md"),
		as.WithCreateFilePermissions([]string{permission.Read(role.User(alice, "")), permission.Read(role.Users(""))}))
	require.NoError(t, err)
	got, err = env.Store.Upload(ctx, alice, "alice-shared")
	require.NoError(t, err)
	require.False(t, got.Private)

	b, err := env.Store.UploadBytes(ctx, "alice-notes")
	require.NoError(t, err)
	require.Len(t, b, 100)
	require.True(t, schema.UploadExtensionAllowed("Report.TXT"))
	require.False(t, schema.UploadExtensionAllowed("noext"))
	require.False(t, schema.UploadExtensionAllowed("a.exe"))
}

// The web chat checks the same limits before uploading (web/js/attach.js): a change here
// must be made there too.
func TestWebUploadLimitsMatch(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "web", "js", "attach.js"))
	require.NoError(t, err)
	js := string(b)
	require.Contains(t, js, fmt.Sprintf("maxFiles: %d,", schema.MaxAttachments))
	require.Contains(t, js, fmt.Sprintf("maxBytes: %d * 1024 * 1024,", schema.MaxUploadBytes>>20))
	require.Contains(t, js, fmt.Sprintf("maxTotal: %d * 1024 * 1024,", schema.MaxAttachmentBytes>>20))
	require.Contains(t, js, fmt.Sprintf("BUCKET = '%s'", schema.BucketUploads))
	start := strings.Index(js, "extensions: [")
	require.Positive(t, start)
	end := strings.Index(js[start:], "]")
	var exts []string
	for _, e := range strings.Split(js[start+len("extensions: ["):start+end], ",") {
		if e = strings.Trim(strings.TrimSpace(e), "'"); e != "" {
			exts = append(exts, e)
		}
	}
	require.Equal(t, schema.UploadExtensions, exts)
}

// Deleting a message deletes its attached files (a deleted conversation leaves none of its
// uploads behind), but never a file that does not name the message's owner, nor one
// another message of the owner still names; a file already gone is fine.
func TestDeletingAMessageDeletesItsAttachments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := schematest.New(t)
	require.NoError(t, env.Store.CreateUpload(ctx, "mine-1", "u1", "a.txt", []byte("a")))
	require.NoError(t, env.Store.CreateUpload(ctx, "mine-2", "u1", "b.txt", []byte("b")))
	require.NoError(t, env.Store.CreateUpload(ctx, "theirs", "u2", "c.txt", []byte("c")))
	msgs := schema.For[schema.Message](env.Store, schema.CollMessages)
	_, err := msgs.Create(ctx, "m1", "u1", &schema.Message{OwnerID: "u1", ConversationID: "c1", Sequence: 1, Role: "user",
		Text: schema.Ptr("see files"), Attachments: []string{"mine-1", "mine-2", "theirs", "gone"}})
	require.NoError(t, err)
	m, err := msgs.Get(ctx, "m1")
	require.NoError(t, err)
	require.Equal(t, []string{"mine-1", "mine-2", "theirs", "gone"}, m.Attachments)

	require.NoError(t, msgs.Delete(ctx, "m1"))
	for id, want := range map[string]bool{"mine-1": false, "mine-2": false, "theirs": true} {
		_, err := env.Store.Upload(ctx, map[bool]string{false: "u1", true: "u2"}[want], id)
		if want {
			require.NoError(t, err, id)
		} else {
			require.ErrorIs(t, err, schema.ErrNotFound, id)
		}
	}

	// The same file sent with two messages stays until the last of them is deleted; another
	// user's message naming it does not keep it.
	require.NoError(t, env.Store.CreateUpload(ctx, "twice", "u1", "t.txt", []byte("t")))
	for _, m := range []struct{ id, owner string }{{"m2", "u1"}, {"m3", "u1"}, {"m4", "u2"}} {
		_, err := msgs.Create(ctx, m.id, m.owner, &schema.Message{OwnerID: m.owner, ConversationID: "c-" + m.id, Sequence: 1, Role: "user",
			Text: schema.Ptr("again"), Attachments: []string{"twice"}})
		require.NoError(t, err)
	}
	require.NoError(t, msgs.Delete(ctx, "m2"))
	_, err = env.Store.Upload(ctx, "u1", "twice")
	require.NoError(t, err, "m3 still names it")
	require.NoError(t, msgs.Delete(ctx, "m3"))
	_, err = env.Store.Upload(ctx, "u1", "twice")
	require.ErrorIs(t, err, schema.ErrNotFound, "gone with the last of its owner's messages")
}
