package backup

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/hermes/hermesreal"
)

// TestHermesProfileBackupAndImport runs deploy/RUNBOOK.md's Hermes profile commands on the
// pinned real Hermes: `hermes backup -o FILE -k 14` keeps memory, skills and config, and
// `hermes import --force FILE` brings them back into an emptied profile. Skips without the
// venv (fails under CI=true).
func TestHermesProfileBackupAndImport(t *testing.T) {
	t.Parallel()
	venv := hermesreal.Require(t)
	home, hermesHome := t.TempDir(), t.TempDir()
	files := map[string]string{
		"memories/MEMORY.md":         "The user prefers metric units.\n",
		"skills/tidy-notes/SKILL.md": "---\nname: tidy-notes\ndescription: tidy notes\n---\nTidy the notes.\n",
		"config.yaml":                "model:\n  default: work\n",
	}
	for rel, text := range files {
		p := filepath.Join(hermesHome, rel)
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o700))
		require.NoError(t, os.WriteFile(p, []byte(text), 0o600))
	}
	hermes := func(args ...string) string {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, filepath.Join(venv, "bin", "hermes"), args...)
		cmd.Env = []string{"HOME=" + home, "HERMES_HOME=" + hermesHome, "PATH=" + filepath.Join(venv, "bin") + ":/usr/bin:/bin",
			"NO_COLOR=1"}
		cmd.Stdin = nil
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "hermes %v: %s", args, out)
		return string(out)
	}
	zip := filepath.Join(t.TempDir(), "hermes-backup-2026-12-01.zip")
	hermes("backup", "-o", zip, "-k", "14")
	require.FileExists(t, zip)

	// The profile is lost …
	require.NoError(t, os.RemoveAll(hermesHome))
	require.NoError(t, os.MkdirAll(hermesHome, 0o700))
	// … and comes back.
	hermes("import", "--force", zip)
	for rel, text := range files {
		got, err := os.ReadFile(filepath.Join(hermesHome, rel))
		require.NoError(t, err, rel)
		require.Equal(t, text, string(got), rel)
	}
}
