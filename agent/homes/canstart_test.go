package homes

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestCanStartSaysWhatAStartLacks (issue 36 item 1): with nothing started, CanStart
// reads ready, then names each thing a member's Hermes start needs when it is broken in
// turn (and ready again once it is back): the venv's hermes not executable, the venv's
// Python gone, bubblewrap gone, the template unparsable, the template holding the agent's
// gateway key, the .env beside it unusable, the homes folder unwritable.
func TestCanStartSaysWhatAStartLacks(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	venv, py := filepath.Join(dir, "venv"), filepath.Join(dir, "python")
	require.NoError(t, os.MkdirAll(filepath.Join(venv, "bin"), 0o755))
	require.NoError(t, os.MkdirAll(py, 0o755))
	cfg := filepath.Join(venv, "pyvenv.cfg")
	require.NoError(t, os.WriteFile(cfg, []byte("home = "+py+"\n"), 0o644))
	bin, bw := filepath.Join(venv, "bin", "hermes"), filepath.Join(dir, "bwrap")
	for _, f := range []string{bin, bw} {
		require.NoError(t, os.WriteFile(f, []byte("#!/bin/sh\n"), 0o755))
	}
	tdir := filepath.Join(dir, "profile")
	require.NoError(t, os.MkdirAll(tdir, 0o755))
	tmpl, env := filepath.Join(tdir, "config.yaml"), filepath.Join(tdir, ".env")
	const good = "model:\n  default: demo\n  base_url: http://127.0.0.1:1/v1\n  api_key: ${GATEWAY_API_KEY}\n"
	require.NoError(t, os.WriteFile(tmpl, []byte(good), 0o600))
	require.NoError(t, os.WriteFile(env, []byte("GATEWAY_API_KEY=agent-key-0123456789abcdef\n"), 0o600))
	root := filepath.Join(dir, "homes")
	s, err := New(Options{Root: root, Venv: venv, Template: tmpl, Bwrap: bw, GatewayKey: "agent-key-0123456789abcdef"})
	require.NoError(t, err)
	require.NoError(t, s.CanStart())
	require.Empty(t, s.Status(t.Context()), "nothing was started")

	for _, c := range []struct {
		name, want    string
		breakIt, mend func()
	}{
		{"hermes not executable", "bin/hermes is not an executable file",
			func() { require.NoError(t, os.Chmod(bin, 0o644)) }, func() { require.NoError(t, os.Chmod(bin, 0o755)) }},
		{"the venv's python gone", "hermes venv's python",
			func() { require.NoError(t, os.Rename(py, py+".gone")) }, func() { require.NoError(t, os.Rename(py+".gone", py)) }},
		{"bubblewrap gone", "bubblewrap: ",
			func() { require.NoError(t, os.Rename(bw, bw+".gone")) }, func() { require.NoError(t, os.Rename(bw+".gone", bw)) }},
		{"template unparsable", "hermes profile template: yaml",
			func() { require.NoError(t, os.WriteFile(tmpl, []byte("model: [\n"), 0o600)) },
			func() { require.NoError(t, os.WriteFile(tmpl, []byte(good), 0o600)) }},
		{"template gone", "hermes profile template: open",
			func() { require.NoError(t, os.Rename(tmpl, tmpl+".gone")) }, func() { require.NoError(t, os.Rename(tmpl+".gone", tmpl)) }},
		{"template holding the gateway key", "holds the gateway key itself",
			func() { require.NoError(t, os.WriteFile(tmpl, []byte(good+"x: agent-key-0123456789abcdef\n"), 0o600)) },
			func() { require.NoError(t, os.WriteFile(tmpl, []byte(good), 0o600)) }},
		{".env unusable", "hermes profile .env",
			func() { require.NoError(t, os.WriteFile(env, []byte("A=\"x\\\"y\"\n"), 0o600)) },
			func() {
				require.NoError(t, os.WriteFile(env, []byte("GATEWAY_API_KEY=agent-key-0123456789abcdef\n"), 0o600))
			}},
		{"homes folder unwritable", "hermes homes folder: ",
			func() { require.NoError(t, os.RemoveAll(root)); require.NoError(t, os.WriteFile(root, nil, 0o600)) },
			func() { require.NoError(t, os.Remove(root)); require.NoError(t, os.Mkdir(root, 0o700)) }},
	} {
		c.breakIt()
		err := s.CanStart()
		require.ErrorContains(t, err, c.want, c.name)
		c.mend()
		require.NoError(t, s.CanStart(), "after mending: "+c.name)
	}
}
