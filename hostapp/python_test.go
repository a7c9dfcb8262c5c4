package hostapp_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/hermes/hermesreal"
	"privateassistant/stacktest"
)

// TestOpenAIPythonClient runs the runtime API against a second, independent client:
// OpenAI's Python library from PyPI (openai 2.24.0, hash-locked through the Hermes
// virtualenv's scripts/hermes/requirements.lock). Without that virtualenv it skips,
// except under CI=true where it fails.
func TestOpenAIPythonClient(t *testing.T) {
	venv := hermesreal.Require(t)
	env := stacktest.New(t)
	env.StartAgent(t)
	adminID, adminJWT := env.SignUp(t, "py-admin@example.com", "password-py-admin")
	env.Label(t, adminID, "admin")
	k := issue(t, env, adminJWT, "apppy", []string{"chat"}, 1000)

	cmd := exec.Command(filepath.Join(venv, "bin", "python"), filepath.Join("testdata", "openai_python.py"))
	cmd.Env = []string{"PA_BASE_URL=" + env.URL + "/api/v1/", "PA_KEY=" + k.Secret, "PA_USER=penny",
		"PATH=/usr/bin:/bin", "NO_PROXY=127.0.0.1,localhost", "PYTHONDONTWRITEBYTECODE=1"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, "ok", strings.TrimSpace(string(out)))
}
