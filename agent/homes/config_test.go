package homes

import (
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"privateassistant/agent/memberkey"
)

// A member's config is the template with the API server on loopback at the member's port
// (no key in the file), terminal.cwd their folder and the run-folder plugin enabled;
// everything else is the template's.
func TestMemberConfigKeepsTheTemplateAndConfinesTheServer(t *testing.T) {
	tmpl := []byte("model:\n  provider: custom\n  api_key: ${GATEWAY_API_KEY}\ngateway:\n  api_server:\n    host: 10.0.0.12\n    port: 8642\n    key: shared-inbound-key\n    max_concurrent_runs: 4\nterminal:\n  cwd: /var/lib/privateassistant/hermes-work\napprovals:\n  mode: manual\n")
	b, err := memberConfig(tmpl, 40123)
	require.NoError(t, err)
	var cfg map[string]any
	require.NoError(t, yaml.Unmarshal(b, &cfg))
	api := cfg["gateway"].(map[string]any)["api_server"].(map[string]any)
	require.Equal(t, map[string]any{"enabled": true, "host": "127.0.0.1", "port": 40123, "max_concurrent_runs": 4}, api)
	require.Equal(t, map[string]any{"cwd": "/member/work", "backend": "local"}, cfg["terminal"])
	require.Equal(t, "${GATEWAY_API_KEY}", cfg["model"].(map[string]any)["api_key"])
	require.Equal(t, map[string]any{"mode": "manual"}, cfg["approvals"])
	require.Equal(t, map[string]any{"enabled": []any{RunFolderPlugin}}, cfg["plugins"], "each run in its own folder")
	// The template's own plugins stay enabled beside it; disabling it is undone.
	b, err = memberConfig([]byte("plugins:\n  enabled: [disk-cleanup]\n  disabled: [pa-runfolder, other]\n"), 1)
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &cfg))
	require.Equal(t, map[string]any{"enabled": []any{"disk-cleanup", RunFolderPlugin}, "disabled": []any{"other"}}, cfg["plugins"])
	_, err = memberConfig([]byte("model: [unclosed"), 1)
	require.Error(t, err)
}

// A member's .env drops the operator's API_SERVER_* and carries the member's own gateway
// key wherever the agent's was; without a gateway it is the template's.
func TestMemberEnvHoldsTheMembersKeyNeverTheAgents(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "config.yaml")
	const agentKey = "agent-gateway-key-0123456789abcdef"
	require.NoError(t, os.WriteFile(filepath.Join(dir, ".env"), []byte("API_SERVER_KEY=shared\nAPI_SERVER_ENABLED=true\nGATEWAY_API_KEY="+agentKey+"\nOTHER_COPY="+agentKey+"\nTZ_NAME=UTC\n"), 0o600))
	mk := memberkey.Derive(agentKey, "alice")
	b, err := memberEnv(tmpl, agentKey, mk)
	require.NoError(t, err)
	require.Equal(t, "GATEWAY_API_KEY=\""+mk+"\"\nOTHER_COPY=\""+mk+"\"\nTZ_NAME=\"UTC\"\n", string(b))
	b, err = memberEnv(tmpl, "", "")
	require.NoError(t, err)
	require.Equal(t, "GATEWAY_API_KEY=\""+agentKey+"\"\nOTHER_COPY=\""+agentKey+"\"\nTZ_NAME=\"UTC\"\n", string(b))
	b, err = memberEnv(filepath.Join(t.TempDir(), "config.yaml"), agentKey, mk)
	require.NoError(t, err)
	require.Equal(t, "GATEWAY_API_KEY=\""+mk+"\"\n", string(b), "no template .env: the member's key only")
}

// The sandbox mounts only the system's programs, a few /etc files, the read-only extras
// and the member's folder; it has its own PID namespace and proc, and drops capabilities.
func TestSandboxArgsShowOnlyWhatAMemberNeeds(t *testing.T) {
	a := sandbox{Bwrap: "/usr/bin/bwrap", MemberDir: "/srv/homes/alice", ReadOnly: []string{"/opt/hermes/venv"},
		Argv: []string{"/opt/hermes/venv/bin/hermes", "gateway", "run"}}.args()
	joined := strings.Join(a, " ")
	for _, want := range []string{"--unshare-pid", "--die-with-parent", "--new-session", "--cap-drop ALL", "--tmpfs /",
		"--proc /proc", "--bind /srv/homes/alice /member", "--ro-bind /opt/hermes/venv /opt/hermes/venv", "--ro-bind-try /usr /usr",
		"--chdir /member/work", "-- /opt/hermes/venv/bin/hermes gateway run"} {
		require.Contains(t, joined, want)
	}
	for i, arg := range a {
		if arg == "--bind" || arg == "--ro-bind" || arg == "--ro-bind-try" {
			src := a[i+1]
			require.False(t, slices.Contains([]string{"/", "/etc", "/home", "/root", "/var", "/run", "/tmp", "/proc"}, src), "mounts %s", src)
		}
	}
}

// A template whose config.yaml holds the agent's gateway key itself would hand it to every
// member's tools: no member's Hermes starts from it.
func TestATemplateHoldingTheGatewayKeyIsRefused(t *testing.T) {
	dir := t.TempDir()
	const agentKey = "agent-gateway-key-0123456789abcdef"
	tmpl := filepath.Join(dir, "config.yaml")
	require.NoError(t, os.WriteFile(tmpl, []byte("model:\n  api_key: "+agentKey+"\n"), 0o600))
	s := &Supervisor{opts: Options{Root: dir, Template: tmpl, GatewayKey: agentKey}}
	_, err := s.start(context.Background(), filepath.Join(dir, "alice"))
	require.ErrorContains(t, err, "holds the gateway key itself")
	_, err = os.Stat(filepath.Join(dir, "alice", "hermes", "config.yaml"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing written")
}

// A forget recorded at t deletes a home made before t (and its record), keeps one made
// after it (a user made again), and is a no-op without a home.
func TestForgetBeforeKeepsAHomeMadeAfterTheForget(t *testing.T) {
	root := t.TempDir()
	s := &Supervisor{opts: Options{Root: root, StopGrace: time.Second, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}, members: map[string]*member{}}
	ctx := context.Background()
	for _, id := range []string{"old", "new"} {
		require.NoError(t, os.MkdirAll(filepath.Join(root, id, "work"), 0o700))
		require.NoError(t, s.made(id))
	}
	made := s.madeAt("old")
	require.False(t, made.IsZero())
	require.NoError(t, s.made("old"), "made once: a later start keeps the first time")
	require.Equal(t, made, s.madeAt("old"))

	require.NoError(t, s.ForgetBefore(ctx, "old", made.Add(time.Millisecond)))
	require.NoDirExists(t, filepath.Join(root, "old"))
	require.True(t, s.madeAt("old").IsZero(), "its record went with it")
	require.NoError(t, s.ForgetBefore(ctx, "new", s.madeAt("new").Add(-time.Second)))
	require.DirExists(t, filepath.Join(root, "new"), "made after the forget: another user's")
	require.NoError(t, s.ForgetBefore(ctx, "ghost", time.Now()))
	require.NoError(t, s.ForgetBefore(ctx, "../new", time.Now()))
	require.DirExists(t, filepath.Join(root, "new"))
	require.Empty(t, s.members["ghost"], "no member slot for a home that does not exist")
}
