package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/homes/homestest"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/settings"
)

// TestMakeDevRunsTheRealHermes (issue 30 item 4): a data directory made with the Hermes
// double (every make dev before) started again with the real Hermes follows it: a new
// harness revision the agent verifies through the admin path (a Hermes started from the
// profile template, the template's config checked against the gateway), the roles pinned
// to it; the demo member's "#tool" asks before its guarded command on the real Hermes,
// "#research", twice, leaves notes.md in each run's own folder in the member's home and
// each comes back as that run's artifact;
// pressing Validate (the admin API) keeps it verified; and PA_SKIP_HERMES's double again
// takes over on the same directory.
func TestMakeDevRunsTheRealHermes(t *testing.T) {
	t.Parallel()
	homestest.Require(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	cfg := Config{Root: root, DataDir: t.TempDir(), Addr: freeAddr()}
	s, err := Start(t.Context(), cfg) // the double
	require.NoError(t, err)
	require.Empty(t, s.HermesHomes)
	// As a data directory made before make dev ran the real Hermes: research narrowed to
	// write_file, chat without tools, the ceiling terminal and write_file.
	st := s.Agent.Store
	set, err := schema.For[schema.Settings](st, schema.CollSettings).Get(t.Context(), runconfig.SystemSettingsID)
	require.NoError(t, err)
	roles := map[string]runconfig.RoleBinding{}
	require.NoError(t, json.Unmarshal([]byte(*set.Roles), &roles))
	for name, tools := range map[string][]string{"chat": {}, "research": {"write_file"}, "coding": nil} {
		b := roles[name]
		b.Tools = tools
		roles[name] = b
	}
	_, err = (&settings.Admin{Store: st}).CommitSelection(t.Context(), "test", settings.SelectionInput{ExpectedRevision: set.Revision,
		Roles: roles, ToolCeiling: []string{"terminal", "write_file"}})
	require.NoError(t, err)
	s.Close()

	cfg.Hermes = HermesMembers
	s, err = Start(t.Context(), cfg)
	require.NoError(t, err)
	closed := false
	defer func() {
		if !closed {
			s.Close()
		}
	}()
	require.NotEmpty(t, s.HermesHomes, s.HermesInfo)
	api := devAPI{t: t, url: s.URL}
	admin := api.jwt(s.AdminEmail, s.AdminPass)
	hermesRev := func() map[string]any {
		code, out := api.call("GET", "/api/harnesses", admin, nil)
		require.Equal(t, 200, code, out)
		var latest map[string]any
		for _, h := range out["harnesses"].([]any) {
			h := h.(map[string]any)
			if h["profileId"] == "hermes" && (latest == nil || h["revision"].(float64) > latest["revision"].(float64)) {
				latest = h
			}
		}
		return latest
	}
	hp := hermesRev()
	require.Equal(t, 2.0, hp["revision"], "a new revision for the real Hermes: %v", hp)
	require.Equal(t, true, hp["verified"], "%v", hp)
	require.Contains(t, hp["capabilities"], `"toolsets"`, "validated by probing a real Hermes")
	require.Contains(t, hp["hermesVersion"], "0.22", "%v", hp)
	set, err = schema.For[schema.Settings](s.Agent.Store, schema.CollSettings).Get(t.Context(), runconfig.SystemSettingsID)
	require.NoError(t, err)
	require.JSONEq(t, `["terminal","file","mcp__pa__enqueue_job","mcp__pa__job_status"]`, *set.ToolCeiling, "the ceiling the real Hermes's toolsets need")
	require.NoError(t, json.Unmarshal([]byte(*set.Roles), &roles))
	require.Equal(t, []string{"terminal", "file"}, roles["research"].Tools)
	require.Equal(t, int64(2), roles["research"].HarnessRevision, "pinned to the verified revision")

	jwt := api.jwt(s.DemoEmail, s.DemoPass)
	code, conv := api.call("POST", "/api/conversations", jwt, map[string]any{"title": "real hermes"})
	require.Equal(t, 201, code, conv)
	send := func(id, text, role string) string {
		code, adm := api.call("POST", "/api/conversations/"+conv["id"].(string)+"/messages", jwt,
			map[string]any{"requestId": id, "text": text, "role": role})
		require.Equal(t, 202, code, adm)
		return adm["runId"].(string)
	}
	settle := func(runID string) map[string]any {
		var run map[string]any
		require.Eventually(t, func() bool {
			_, run = api.call("GET", "/api/runs/"+runID, jwt, nil)
			return run["terminal"] == true
		}, 3*time.Minute, 200*time.Millisecond)
		return run
	}

	tool := send("real-tool", "please run #tool", "coding")
	var ask queue.ApprovalRequestData
	require.Eventually(t, func() bool {
		for _, ev := range api.events(jwt, tool) {
			if ev.Type == queue.EventApprovalRequest {
				require.NoError(t, json.Unmarshal(ev.Data, &ask))
				return true
			}
		}
		return false
	}, 3*time.Minute, 200*time.Millisecond, "the real Hermes asks before the guarded command")
	require.Equal(t, demoToolCommand, ask.Command)
	code, out := api.call("POST", "/api/runs/"+tool+"/approval", jwt, map[string]any{"requestId": ask.RequestID, "choice": "once"})
	require.Equal(t, 202, code, out)
	require.Equal(t, "completed", settle(tool)["status"])

	// Two research runs of the same member both write notes.md: each in its own folder,
	// each completes with its own artifact (none refused).
	var arts []string
	for i, key := range []string{"real-research", "real-research-2"} {
		research := send(key, "#research a topic", "research")
		require.Equal(t, "completed", settle(research)["status"])
		var art queue.ArtifactData
		for _, ev := range api.events(jwt, research) {
			require.NotContains(t, string(ev.Data), "Refusing", "research run %d", i+1)
			if ev.Type == queue.EventArtifact {
				require.NoError(t, json.Unmarshal(ev.Data, &art))
			}
		}
		require.Equal(t, "notes.md", art.Filename, "Hermes's write_file file is the run's artifact (research run %d)", i+1)
		arts = append(arts, art.ArtifactID)
		b, err := os.ReadFile(filepath.Join(s.HermesHomes, "demo", "work", "runs", research, "notes.md"))
		require.NoError(t, err, "written in the run's own folder in the demo member's home")
		require.Equal(t, "# Notes\n\n- first source\n- second source\n", string(b))
	}
	require.NotEqual(t, arts[0], arts[1])

	// The admin console's Validate: the agent probes again and it stays verified.
	code, out = api.call("POST", "/api/harnesses/hermes/validate?revision=2", admin, nil)
	require.Equal(t, 202, code, out)
	require.Eventually(t, func() bool { return hermesRev()["validationRequestedAt"] == nil }, 2*time.Minute, 250*time.Millisecond)
	require.Equal(t, true, hermesRev()["verified"], "%v", hermesRev())
	s.Close()
	closed = true

	cfg.Hermes, cfg.HermesNote = HermesDouble, "PA_SKIP_HERMES=1"
	s, err = Start(t.Context(), cfg)
	require.NoError(t, err)
	defer s.Close()
	require.Contains(t, s.HermesInfo, "double (PA_SKIP_HERMES=1)")
	require.Contains(t, banner(s, time.Second), "Hermes:     the Hermes double (PA_SKIP_HERMES=1)")
	admin = api.jwt(s.AdminEmail, s.AdminPass)
	hp = hermesRev()
	require.Equal(t, 3.0, hp["revision"], "back on the double: %v", hp)
	require.Contains(t, hp["baseUrl"], "/_dev/hermes")
	jwt = api.jwt(s.DemoEmail, s.DemoPass)
	run := settle(send("double-research", "#research again", "research"))
	require.Equal(t, "completed", run["status"], "%v", run)
}

// TestTheChatRoleDelegatesAJob (issue 30 item 5): the shipped chat role, on the direct
// harness, is offered the MCP job server's enqueue_job (its policy allows it), the demo
// model's "#delegate" calls it, the job server admits a research job through the same
// admission in the chat's conversation, owned by the chat's owner, and it runs and leaves
// its notes; the chat's own answer goes on after the call.
func TestTheChatRoleDelegatesAJob(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	s, err := Start(t.Context(), Config{Root: root, DataDir: t.TempDir()})
	require.NoError(t, err)
	defer s.Close()
	api := devAPI{t: t, url: s.URL}
	jwt := api.jwt(s.DemoEmail, s.DemoPass)
	code, conv := api.call("POST", "/api/conversations", jwt, map[string]any{"title": "coordinator"})
	require.Equal(t, 201, code, conv)
	cid := conv["id"].(string)
	code, adm := api.call("POST", "/api/conversations/"+cid+"/messages", jwt, map[string]any{"requestId": "delegate-1", "text": "please #delegate this", "role": "chat"})
	require.Equal(t, 202, code, adm)
	chat := adm["runId"].(string)
	var run map[string]any
	require.Eventually(t, func() bool {
		_, run = api.call("GET", "/api/runs/"+chat, jwt, nil)
		return run["terminal"] == true
	}, time.Minute, 100*time.Millisecond)
	require.Equal(t, "completed", run["status"], "%v", run)
	var tools []string
	for _, ev := range api.events(jwt, chat) {
		if ev.Type == queue.EventToolStarted {
			var d queue.ToolStartedData
			require.NoError(t, json.Unmarshal(ev.Data, &d))
			tools = append(tools, d.Tool)
		}
	}
	require.Equal(t, []string{"mcp__pa__enqueue_job"}, tools)

	var job map[string]any
	require.Eventually(t, func() bool {
		_, out := api.call("GET", "/api/runs?conversationId="+cid, jwt, nil)
		runs, _ := out["runs"].([]any)
		for _, r := range runs {
			r := r.(map[string]any)
			if r["id"] != chat && r["role"] == "research" {
				job = r
				return r["terminal"] == true
			}
		}
		return false
	}, 2*time.Minute, 200*time.Millisecond, "a research job in the chat's conversation")
	require.Equal(t, "completed", job["status"], "%v", job)
	var art queue.ArtifactData
	for _, ev := range api.events(jwt, job["id"].(string)) {
		if ev.Type == queue.EventArtifact {
			require.NoError(t, json.Unmarshal(ev.Data, &art))
		}
	}
	require.Equal(t, "notes.md", art.Filename)
}
