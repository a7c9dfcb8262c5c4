package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/role"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/schema"
)

// TestSendAttachesFiles: pa send -attach uploads each file with the user's own session into
// the uploads bucket, readable by the user alone (as the web's Attach does), and the
// admitted message carries their ids; a file the bucket or admission would refuse is
// refused before anything is uploaded.
func TestSendAttachesFiles(t *testing.T) {
	env := functionstest.New(t)
	uid, _ := env.SignUp(t, "cli-attach@example.com", "password-cli-attach")
	t.Setenv("PA_URL", env.URL)
	t.Setenv("APPWRITE_ENDPOINT", env.TS.URL)
	t.Setenv("APPWRITE_PROJECT_ID", env.TS.Project)
	t.Setenv("PA_CONFIG_DIR", t.TempDir())
	t.Setenv("PA_PASSWORD", "password-cli-attach")
	pa := func(args ...string) (int, string, string) {
		var out, errw bytes.Buffer
		code := run(context.Background(), args, strings.NewReader(""), &out, &errw)
		return code, out.String(), errw.String()
	}
	code, out, _ := pa("login", "cli-attach@example.com")
	require.Equal(t, 0, code, out)
	code, out, _ = pa("new", "files", "--json")
	require.Equal(t, 0, code, out)
	var conv struct{ ID string }
	require.NoError(t, json.Unmarshal([]byte(out), &conv))

	dir := t.TempDir()
	write := func(name string, size int) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, bytes.Repeat([]byte("a"), size), 0o600))
		return p
	}
	notes := filepath.Join(dir, "notes.md")
	require.NoError(t, os.WriteFile(notes, []byte("# the tide turns at 14:07\n"), 0o600))
	big := write("big.txt", 6<<20) // over the SDK's 5 MiB chunk: sent in two parts

	server := appwrite.NewStorage(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey)))
	files := func() int {
		l, err := server.ListFiles(schema.BucketUploads)
		require.NoError(t, err)
		return l.Total
	}

	// Refused before any upload: a type the bucket refuses, an empty file, a missing one,
	// too many files, too large a file.
	for name, args := range map[string][]string{
		"type":    {"-attach", write("tool.exe", 10)},
		"empty":   {"-attach", write("empty.txt", 0)},
		"missing": {"-attach", filepath.Join(dir, "nope.txt")},
		"count":   {"-attach", notes, "-attach", notes, "-attach", notes, "-attach", notes, "-attach", notes, "-attach", notes},
		"size":    {"-attach", write("huge.txt", schema.MaxUploadBytes+1)},
	} {
		code, _, stderr := pa(append([]string{"send", conv.ID, "look"}, args...)...)
		require.Equal(t, exitUsage, code, "%s: %s", name, stderr)
		require.Equal(t, 0, files(), "%s: nothing uploaded", name)
	}

	code, out, stderr := pa("send", "-attach", notes, conv.ID, "read these", "-attach", big, "--json")
	require.Equal(t, 0, code, stderr)
	var adm struct{ MessageID string }
	require.NoError(t, json.Unmarshal([]byte(out), &adm))
	msg, err := schema.For[schema.Message](env.Store, schema.CollMessages).Get(context.Background(), adm.MessageID)
	require.NoError(t, err)
	require.Len(t, msg.Attachments, 2)
	for i, want := range []string{notes, big} {
		f, err := server.GetFile(schema.BucketUploads, msg.Attachments[i])
		require.NoError(t, err)
		require.Equal(t, filepath.Base(want), f.Name)
		require.Equal(t, []string{permission.Read(role.User(uid, ""))}, f.Permissions, "readable by the user alone")
		got, err := server.GetFileDownload(schema.BucketUploads, f.Id)
		require.NoError(t, err)
		wantBytes, _ := os.ReadFile(want)
		require.True(t, bytes.Equal(wantBytes, *got), "%s arrives whole", f.Name)
	}
	require.Equal(t, 2, files())
}
