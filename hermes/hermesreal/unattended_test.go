package hermesreal

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/hermes"
	"privateassistant/modeltest"
)

// What approvals.unattended_mode does to a run on /v1/runs of real Hermes 0.22.2.post1
// (harness validation follows it: agent/validator approvalReasons). Hermes classifies the
// whole api_server platform as unattended. With unattended_mode deny (as here; also
// Hermes's default when unset), a dangerous terminal command still asks (approval.request:
// /v1/runs registers an approval notifier), but execute_code is denied at once: no
// approval.request, the tool fails "BLOCKED: execute_code ..." (upstream bug #98728;
// tools/approval.py check_execute_code_guard resolves unattended contexts first). Both
// calls target only the test's work folder, and neither runs.
func TestUnattendedModeOnRealHermes(t *testing.T) {
	model := modeltest.New("scripted")
	srv := Start(t, Options{Model: model, Config: map[string]any{
		"approvals":         map[string]any{"mode": "manual", "timeout": 60, "unattended_mode": "deny"},
		"platform_toolsets": map[string]any{"api_server": []string{"terminal", "file", "code_execution"}},
	}})
	dir := filepath.Join(srv.WorkDir, "victim")
	require.True(t, srv.InWorkDir(dir))
	require.NoError(t, os.MkdirAll(dir, 0o700))
	rm, _ := json.Marshal(map[string]string{"command": "rm -rf '" + dir + "'"})
	code, _ := json.Marshal(map[string]string{"code": "import shutil\nshutil.rmtree('" + dir + "')\n"})
	model.SetScript("#unattended", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: []string{"Deleting."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: string(rm)}}},
		{Tokens: []string{"With code then."}, ToolCalls: []modeltest.ToolCall{{Name: "execute_code", Arguments: string(code)}}},
		{Tokens: []string{"Gave", " up."}},
	}})
	c := srv.Client()
	ctx := testCtx(t)
	acc, err := c.SubmitRun(ctx, uniq("unattended"), hermes.RunRequest{Input: "clean up #unattended"})
	require.NoError(t, err)
	st, err := c.Events(ctx, acc.RunID)
	require.NoError(t, err)
	defer st.Close()
	var asked []string
	var codeResult string
	evs, err := next(t, st, func(ev hermes.Event) bool {
		switch {
		case ev.Type == "approval.request":
			asked = append(asked, ev.String("command"))
			_, aerr := c.Approve(ctx, acc.RunID, ev.String("request_id"), "deny")
			require.NoError(t, aerr)
		case ev.Type == "tool.completed" && ev.String("tool") == "execute_code":
			codeResult = ev.String("preview")
		}
		return ev.Type == "run.completed" || ev.Type == "run.failed"
	})
	require.NoError(t, err, "events: %v", types(evs))
	require.Equal(t, "run.completed", evs[len(evs)-1].Type)
	require.Len(t, asked, 1, "only the terminal command asked: %v", types(evs))
	require.True(t, strings.HasPrefix(asked[0], "rm -rf "), asked[0])
	require.Contains(t, codeResult, "BLOCKED: execute_code runs arbitrary local Python", "execute_code denied without asking")
	require.DirExists(t, dir, "neither call ran")
}
