package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/functions"
	"github.com/stretchr/testify/require"

	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// paIn runs the CLI against the Appwrite emulator of env, with the environment the
// runbook sets (APPWRITE_ENDPOINT, APPWRITE_PROJECT_ID and the keys the -key-ref
// defaults name).
func paIn(t *testing.T, env *schematest.Env, args ...string) (int, string, string) {
	t.Helper()
	t.Setenv("APPWRITE_ENDPOINT", env.TS.URL)
	t.Setenv("APPWRITE_PROJECT_ID", env.TS.Project)
	t.Setenv("APPWRITE_API_KEY", env.RuntimeKey)
	t.Setenv("APPWRITE_DEPLOY_KEY", deployKey)
	var out, errw bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &out, &errw)
	return code, out.String(), errw.String()
}

const deployKey = "deploy-key-0123456789abcdef"

// TestRunbookBackupAndRestore runs deploy/RUNBOOK.md's backup and restore commands.
func TestRunbookBackupAndRestore(t *testing.T) {
	src := schematest.New(t)
	ctx := context.Background()
	_, err := schema.For[schema.Conversation](src.Store, schema.CollConversations).Create(ctx, "conv1", "u1",
		&schema.Conversation{OwnerID: "u1", Title: "hello", LastActivityAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	archive := filepath.Join(t.TempDir(), "pa-backup.tar")

	code, out, stderr := paIn(t, src, "admin", "backup", "-key-ref", "env:APPWRITE_API_KEY", archive)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "1 documents")
	require.Contains(t, stderr, "backup: conversations: 1 documents", "progress on stderr")
	fi, err := os.Stat(archive)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm())

	dst := schematest.New(t)
	code, _, stderr = paIn(t, dst, "admin", "restore", archive)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, stderr, "plan (commit with -yes): restore")
	_, err = schema.For[schema.Conversation](dst.Store, schema.CollConversations).Get(ctx, "conv1")
	require.ErrorIs(t, err, schema.ErrNotFound, "the plan restores nothing")

	code, out, stderr = paIn(t, dst, "admin", "restore", "-yes", archive)
	require.Equal(t, 0, code, stderr)
	require.Contains(t, out, "restored and verified")
	got, err := schema.For[schema.Conversation](dst.Store, schema.CollConversations).Get(ctx, "conv1")
	require.NoError(t, err)
	require.Equal(t, "hello", got.Title)

	// Into a project that holds other data: a conflict, nothing overwritten.
	other := schematest.New(t)
	_, err = schema.For[schema.Conversation](other.Store, schema.CollConversations).Create(ctx, "conv1", "u2",
		&schema.Conversation{OwnerID: "u2", Title: "not yours", LastActivityAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	code, _, stderr = paIn(t, other, "admin", "restore", "-yes", archive)
	require.Equal(t, exitConflict, code, stderr)

	t.Setenv("APPWRITE_API_KEY", "")
	code, _, stderr = run3(t, "admin", "backup", "-key-ref", "env:PA_NO_SUCH_KEY_VAR", archive+"2")
	require.Equal(t, exitUsage, code)
	require.Contains(t, stderr, "PA_NO_SUCH_KEY_VAR")
}

func run3(t *testing.T, args ...string) (int, string, string) {
	t.Helper()
	var out, errw bytes.Buffer
	code := run(context.Background(), args, strings.NewReader(""), &out, &errw)
	return code, out.String(), errw.String()
}

// TestRunbookReleaseAndRollback runs the runbook's release and rollback commands.
func TestRunbookReleaseAndRollback(t *testing.T) {
	env := schematest.New(t, map[string][]string{deployKey: {"functions.read", "functions.write"}})
	fn := functions.New(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(deployKey)))
	code := filepath.Join(t.TempDir(), "code.tar.gz")
	require.NoError(t, os.WriteFile(code, []byte("bundle"), 0o600))
	deployAll := func() map[string]string {
		ids := map[string]string{}
		for _, id := range functionIDs() {
			d, err := fn.CreateDeployment(id, file.NewInputFile(code, "code.tar.gz"), true)
			require.NoError(t, err)
			ids[id] = d.Id
		}
		require.Eventually(t, func() bool {
			for id, dep := range ids {
				if f, err := fn.Get(id); err != nil || f.DeploymentId != dep {
					return false
				}
			}
			return true
		}, 10*time.Second, 5*time.Millisecond)
		return ids
	}
	for _, id := range functionIDs() {
		_, err := fn.Create(id, id, "go-1.26", fn.WithCreateEntrypoint("main.go"))
		require.NoError(t, err)
	}
	dir := t.TempDir()
	t.Setenv("PA_RELEASE_DIR", dir)
	first := deployAll()
	rc, out, stderr := paIn(t, env, "admin", "release", "-agent-version", "v1")
	require.Equal(t, 0, rc, stderr)
	require.Contains(t, out, "release v1")
	deployAll()
	rc, _, stderr = paIn(t, env, "admin", "release", "-agent-version", "v2")
	require.Equal(t, 0, rc, stderr)

	rc, out, stderr = paIn(t, env, "admin", "rollback")
	require.Equal(t, 0, rc, stderr)
	require.Contains(t, stderr, "plan (commit with -yes)")
	require.Contains(t, out, "would activate")
	rc, out, stderr = paIn(t, env, "admin", "rollback", "-yes")
	require.Equal(t, 0, rc, stderr)
	require.Contains(t, out, "sudo ln -sfn /opt/privateassistant/releases/v1 /opt/privateassistant/current")
	for id, dep := range first {
		f, err := fn.Get(id)
		require.NoError(t, err)
		require.Equal(t, dep, f.DeploymentId, id)
	}
}
