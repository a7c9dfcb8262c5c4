package artifacts_test

import (
	"context"
	"os"
	"path/filepath"
	"testing"

	"github.com/appwrite/sdk-for-go/storage"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/artifacts"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// A path a run's file tool named resolves inside the work folder, or is refused.
func TestResolveRefusesPathsOutsideTheWorkFolder(t *testing.T) {
	t.Parallel()
	const cwd = "/srv/hermes/work"
	for name, want := range map[string]string{
		"report.md":                     "report.md",
		"./sub/../sub/b.md":             "sub/b.md",
		"/srv/hermes/work/sub/c.md":     "sub/c.md",
		"/srv/hermes/work/./d.md":       "d.md",
		" e.md ":                        "e.md",
		"/srv/hermes/work/x/../../w.md": "",
		"/srv/hermes/workshop/f.md":     "",
		"/srv/hermes/work":              "",
		".":                             "",
		"../secret.env":                 "",
		"sub/../../secret.env":          "",
		"/etc/passwd":                   "",
		"~/.ssh/id_ed25519":             "",
		"~":                             "",
		"":                              "",
	} {
		rel, why := artifacts.Resolve(cwd, name)
		require.Equal(t, want, rel, "%q", name)
		if want == "" {
			require.NotEmpty(t, why, "%q is refused with a reason", name)
		} else {
			require.Empty(t, why, "%q", name)
		}
	}
	rel, why := artifacts.Resolve("relative/work", "a.md")
	require.Empty(t, rel, "a work folder that is not absolute resolves nothing")
	require.NotEmpty(t, why)
}

// UploadFiles uploads exactly the named files of a shared work folder: another file in
// the folder is never read, a name outside the folder (absolute or through ..) and links
// leaving it are refused, and a folder seen under another path by the harness (cwd) maps
// onto this host's (dir).
func TestUploadFilesOnlyTheNamedFilesInsideTheFolder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := schematest.New(t)
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret.env")
	require.NoError(t, os.WriteFile(secret, []byte("API_KEY=never-leaves-the-host"), 0o600))

	dir := t.TempDir()
	require.NoError(t, os.MkdirAll(filepath.Join(dir, "sub"), 0o700))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "sub", "mine.md"), []byte("# mine"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "other-run.md"), []byte("# another run's"), 0o600))
	require.NoError(t, os.Link(secret, filepath.Join(dir, "hard.env")))
	require.NoError(t, os.Symlink(secret, filepath.Join(dir, "sym.env")))
	require.NoError(t, os.Symlink(outside, filepath.Join(dir, "elsewhere")))

	const cwd = "/home/hermes/work" // the folder as Hermes names it
	run := &schema.Run{Meta: schema.Meta{ID: "r0123456789files"}, OwnerID: "u1", ConversationID: "c1"}
	u := &artifacts.Uploader{Store: env.Store, Attempts: 1}
	arts, skipped, err := u.UploadFiles(ctx, dir, cwd, []string{
		"/home/hermes/work/sub/mine.md", "sub/mine.md", secret, "../" + filepath.Base(outside) + "/secret.env",
		"hard.env", "sym.env", "elsewhere/secret.env", "gone.md",
	}, run)
	require.NoError(t, err)
	require.Len(t, arts, 1, "the named file, once")
	require.Equal(t, "sub/mine.md", arts[0].Filename)
	require.Equal(t, artifacts.FileID(run.ID, "sub/mine.md"), arts[0].FileID)
	reasons := map[string]string{}
	for _, s := range skipped {
		reasons[s.Name] = s.Reason
	}
	require.Equal(t, map[string]string{
		secret: "outside the work folder",
		"../" + filepath.Base(outside) + "/secret.env": "outside the work folder",
		"hard.env":             "a hard link (it may name a file outside the run's folder)",
		"sym.env":              "a symbolic link (never followed)",
		"elsewhere/secret.env": "a symbolic link (never followed)",
		"gone.md":              "no longer there",
	}, reasons)

	files, err := storage.New(env.Client).ListFiles(schema.BucketArtifacts)
	require.NoError(t, err)
	require.Len(t, files.Files, 1, "only the named file is stored")
	got, err := storage.New(env.Client).GetFileDownload(schema.BucketArtifacts, files.Files[0].Id)
	require.NoError(t, err)
	require.Equal(t, "# mine", string(*got))
}

// On one host, a file named by the folder's real path (Hermes resolves symbolic links in
// the folder's own path) is the folder's file.
func TestUploadFilesAcceptsTheFoldersRealPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := schematest.New(t)
	realDir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(realDir, "mine.md"), []byte("# mine"), 0o600))
	link := filepath.Join(t.TempDir(), "work")
	require.NoError(t, os.Symlink(realDir, link))
	realDir, err := filepath.EvalSymlinks(realDir)
	require.NoError(t, err)

	run := &schema.Run{Meta: schema.Meta{ID: "r0123456789realpath"}, OwnerID: "u1", ConversationID: "c1"}
	u := &artifacts.Uploader{Store: env.Store, Attempts: 1}
	arts, skipped, err := u.UploadFiles(ctx, link, link, []string{filepath.Join(realDir, "mine.md"), filepath.Join(filepath.Dir(realDir), "x.md")}, run)
	require.NoError(t, err)
	require.Len(t, arts, 1)
	require.Equal(t, "mine.md", arts[0].Filename)
	require.Equal(t, []artifacts.Skipped{{Name: filepath.Join(filepath.Dir(realDir), "x.md"), Reason: "outside the work folder"}}, skipped)
}
