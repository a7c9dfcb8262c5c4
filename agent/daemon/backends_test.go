package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/hermes/hermesreal"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// The agent's end-to-end suite on two backends: each test body below runs against the
// Hermes double (hermes/hermestest) and the real Hermes API server (hermes/hermesreal),
// through the whole product (functions, Redis, Appwrite emulator, the agent). Locally the
// real backend skips and says why when Hermes is not installed; under CI=true it fails.
// Where the double cannot do what real Hermes does, the body branches on env.Backend and
// pins what the double does (hermes/hermestest's package comment says why).

// sharedReal is one real Hermes (and its scripted model) shared by the cases that need
// no server of their own: each start costs seconds of CPU (about 15 s on a busy 2-core
// box). Started on first use; TestMain stops it.
var sharedReal struct {
	once  sync.Once
	srv   *hermesreal.Server
	model *modeltest.Backend
	err   error
}

func sharedRealHermes(t *testing.T) (*hermesreal.Server, *modeltest.Backend) {
	t.Helper()
	venv := hermesreal.Require(t)
	sharedReal.once.Do(func() {
		root, err := os.MkdirTemp("", "pa-daemon-hermes-")
		if err != nil {
			sharedReal.err = err
			return
		}
		sharedReal.model = modeltest.New("demo-model")
		sharedReal.model.TokenDelay = 2 * time.Millisecond
		sharedReal.srv, sharedReal.err = hermesreal.Launch(context.Background(), venv, root, hermesreal.Options{Model: sharedReal.model})
		if sharedReal.err == nil {
			t.Logf("shared real Hermes %s started in %v", sharedReal.srv.Version, sharedReal.srv.StartTime.Round(time.Millisecond))
		}
	})
	if sharedReal.err != nil {
		t.Fatalf("starting the shared real Hermes: %v", sharedReal.err)
	}
	return sharedReal.srv, sharedReal.model
}

// stopSharedHermes stops the shared real Hermes and removes its folder (TestMain).
func stopSharedHermes() {
	if s := sharedReal.srv; s != nil {
		_ = s.Close()
		_ = os.RemoveAll(s.Root)
	}
}

// onBothBackends runs body once per Hermes backend, in parallel subtests. own gives the
// real backend a server of its own (a case that restarts it); else the cases share one.
func onBothBackends(t *testing.T, opts stacktest.Options, own bool, body func(t *testing.T, env *stacktest.Env)) {
	t.Helper()
	for _, backend := range []string{stacktest.HermesDouble, stacktest.HermesReal} {
		t.Run(backend, func(t *testing.T) {
			t.Parallel()
			o := opts
			o.Hermes = backend
			if o.ChatHarness == "" {
				o.ChatHarness = "hermes"
			}
			if backend == stacktest.HermesReal && !own {
				srv, model := sharedRealHermes(t)
				o.External = &stacktest.External{URL: srv.URL, Key: srv.Key, WorkDir: srv.WorkDir}
				o.Model = model
			}
			env := stacktest.New(t, o)
			if isReal(env) {
				// Real Hermes's runs share terminal.cwd: the agent collects each run's files
				// there by name (artifacts.UploadFiles).
				env.Settings.HermesWorkDir = env.WorkDir
			}
			body(t, env)
		})
	}
}

// real reports whether env's Hermes is the real server (its own or the shared one).
func isReal(env *stacktest.Env) bool { return env.Backend != stacktest.HermesDouble }

// turnCalls counts the model's conversation turns (not Hermes's auxiliary calls) whose
// newest user message holds marker: one native run of a one-turn script makes one.
func turnCalls(env *stacktest.Env, marker string) int {
	n := 0
	for _, r := range env.Model.Requests() {
		if r.Aux != "" {
			continue
		}
		for i := len(r.Messages) - 1; i >= 0; i-- {
			if r.Messages[i].Role == "user" {
				if s, ok := r.Messages[i].Content.(string); ok && strings.Contains(s, marker) {
					n++
				}
				break
			}
		}
	}
	return n
}

func binding(t *testing.T, env *stacktest.Env, runID string) *schema.RunBinding {
	t.Helper()
	b, err := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).Get(context.Background(), runID)
	require.NoError(t, err)
	return b
}

// A chat turn streams deltas and completes; the next turn of the conversation continues
// the same native session (serialized turns reuse it) and the model sees the first turn.
func TestBackendsChatTurnAndSessionReuse(t *testing.T) {
	t.Parallel()
	onBothBackends(t, stacktest.Options{}, false, func(t *testing.T, env *stacktest.Env) {
		env.StartAgent(t)
		owner, jwt := env.SignUp(t, "both-chat@example.com", "password-both-chat")
		conv := env.Conversation(t, jwt)
		a := env.Admit(t, jwt, conv, "q1", "hello agent", "")
		evs, status := env.Follow(t, jwt, a.RunID, 90*time.Second, nil)
		require.Equal(t, "completed", status)
		require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
		require.Contains(t, types(evs), queue.EventMessageDelta, "the answer streams")
		require.Equal(t, "You said: hello agent", deltaText(evs))
		ans := answers(t, env, owner, a.RunID)
		require.Len(t, ans, 1)
		require.Equal(t, "You said: hello agent", *ans[0].Text)
		settledRun(t, env, a.RunID)

		b := env.Admit(t, jwt, conv, "q2", "and again", "")
		_, status = env.Follow(t, jwt, b.RunID, 90*time.Second, nil)
		require.Equal(t, "completed", status)
		first, second := binding(t, env, a.RunID), binding(t, env, b.RunID)
		require.NotNil(t, first.NativeSessionID)
		require.NotNil(t, second.NativeSessionID)
		require.Equal(t, *first.NativeSessionID, *second.NativeSessionID, "the second turn continues the native session")
		require.NotEqual(t, *first.NativeRunID, *second.NativeRunID)
		// Each run's binding records the Hermes checked before its submission.
		for _, b := range []*schema.RunBinding{first, second} {
			require.NotNil(t, b.HarnessCheck)
			var chk harness.Check
			require.NoError(t, json.Unmarshal([]byte(*b.HarnessCheck), &chk))
			require.NotEmpty(t, chk.Build.Version)
			require.NotEmpty(t, chk.Build.Commit+chk.Build.CommitUnknown, "a commit, or why it is unknown")
			require.Equal(t, true, chk.Capabilities["run_submission"])
		}
		var last []modeltest.Message
		for _, r := range env.Model.Requests() {
			if r.Aux == "" && len(r.Messages) > 0 && r.Messages[len(r.Messages)-1].Content == "and again" {
				last = r.Messages
			}
		}
		var texts []string
		for _, m := range last {
			if s, ok := m.Content.(string); ok {
				texts = append(texts, s)
			}
		}
		require.Contains(t, strings.Join(texts, "|"), "hello agent", "the earlier turn is in the model's context")
	})
}

// A terminal command that needs approval, approved and denied. The command is Hermes's
// recursive-delete pattern on a folder inside the test's own work folder. Real Hermes
// runs it when approved; the double asks for every terminal call and runs nothing.
func TestBackendsApprovalApprovedAndDenied(t *testing.T) {
	t.Parallel()
	onBothBackends(t, stacktest.Options{}, false, func(t *testing.T, env *stacktest.Env) {
		env.StartAgent(t)
		_, jwt := env.SignUp(t, "both-approve@example.com", "password-both-approve")
		conv := env.Conversation(t, jwt)
		for _, choice := range []string{"once", "deny"} {
			dir := filepath.Join(env.WorkDir, "victim-"+choice)
			require.NoError(t, os.MkdirAll(dir, 0o700))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "keep.txt"), []byte("x"), 0o600))
			args, _ := json.Marshal(map[string]string{"command": "rm -rf '" + dir + "'"})
			marker := "#rm-" + choice
			env.Model.SetScript(marker, modeltest.Script{Turns: []modeltest.Turn{
				{Tokens: []string{"Removing", " it."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: string(args)}}},
				{Tokens: []string{"Done", " here."}},
			}})
			a := env.Admit(t, jwt, conv, "tool-"+choice, "clean up "+marker, "coding")
			asked := 0
			evs, status := env.Follow(t, jwt, a.RunID, 90*time.Second, func(ev queue.Event) bool {
				if ev.Type == queue.EventApprovalRequest {
					asked++
					var d queue.ApprovalRequestData
					require.NoError(t, json.Unmarshal(ev.Data, &d))
					require.Contains(t, d.Command, dir)
					require.Equal(t, []string{"once", "deny"}, d.Choices)
					res := env.Do(t, "POST", "/api/runs/"+a.RunID+"/approval", jwt, map[string]any{"requestId": d.RequestID, "choice": choice})
					require.Equal(t, 202, res.Status, string(res.Body))
				}
				return true
			})
			require.Equal(t, "completed", status, choice)
			require.Equal(t, 1, asked, "asked once")
			ts := types(evs)
			require.Contains(t, ts, queue.EventApprovalResponse)
			switch {
			case choice == "deny":
				require.DirExists(t, dir, "a denied command never runs")
			case isReal(env):
				require.NoDirExists(t, dir, "real Hermes ran the approved command")
				require.Contains(t, ts, queue.EventToolCompleted)
			default:
				require.DirExists(t, dir, "the double runs no command")
			}
		}
	})
}

// Cancel while streaming keeps the partial answer; cancel while waiting for approval never
// runs the command.
func TestBackendsCancelWhileStreamingAndWhileWaiting(t *testing.T) {
	t.Parallel()
	onBothBackends(t, stacktest.Options{}, false, func(t *testing.T, env *stacktest.Env) {
		env.StartAgent(t)
		owner, jwt := env.SignUp(t, "both-cancel@example.com", "password-both-cancel")
		conv := env.Conversation(t, jwt)
		a := env.Admit(t, jwt, conv, "long", "tell a #long story", "")
		cancelled := false
		evs, status := env.Follow(t, jwt, a.RunID, 90*time.Second, func(ev queue.Event) bool {
			if ev.Type == queue.EventMessageDelta && !cancelled {
				cancelled = true
				res := env.Do(t, "POST", "/api/runs/"+a.RunID+"/cancel", jwt, nil)
				require.Equal(t, 202, res.Status)
			}
			return true
		})
		require.Equal(t, "cancelled", status)
		require.Equal(t, queue.EventRunCancelled, evs[len(evs)-1].Type)
		ans := answers(t, env, owner, a.RunID)
		require.Len(t, ans, 1, "the partial answer is kept")
		require.NotEmpty(t, *ans[0].Text)
		require.Equal(t, deltaText(evs), *ans[0].Text, "the partial answer is what the user saw")

		dir := filepath.Join(env.WorkDir, "victim-cancel")
		require.NoError(t, os.MkdirAll(dir, 0o700))
		args, _ := json.Marshal(map[string]string{"command": "rm -rf '" + dir + "'"})
		env.Model.SetScript("#rm-cancel", modeltest.Script{Turns: []modeltest.Turn{
			{ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: string(args)}}},
			{Tokens: []string{"Done."}},
		}})
		b := env.Admit(t, jwt, conv, "wait", "clean #rm-cancel", "coding")
		evs, status = env.Follow(t, jwt, b.RunID, 90*time.Second, func(ev queue.Event) bool {
			if ev.Type == queue.EventApprovalRequest {
				res := env.Do(t, "POST", "/api/runs/"+b.RunID+"/cancel", jwt, nil)
				require.Equal(t, 202, res.Status)
			}
			return true
		})
		require.Equal(t, "cancelled", status)
		ts := types(evs)
		require.Contains(t, ts, queue.EventApprovalRequest)
		// Real Hermes announces the terminal tool, then asks inside it; the double asks first.
		asked := slices.Index(ts, queue.EventApprovalRequest)
		require.NotContains(t, ts[asked:], queue.EventToolStarted)
		require.NotContains(t, ts, queue.EventToolCompleted)
		if !isReal(env) {
			require.NotContains(t, ts, queue.EventToolStarted)
		}
		require.DirExists(t, dir, "the command waiting for approval never ran")
	})
}

// Hermes crashes and restarts mid-run: the run ends interrupted, saying so, and is not
// submitted again.
func TestBackendsHermesRestartMidRunIsInterrupted(t *testing.T) {
	t.Parallel()
	onBothBackends(t, stacktest.Options{}, true, func(t *testing.T, env *stacktest.Env) {
		env.StartAgent(t)
		_, jwt := env.SignUp(t, "both-restart@example.com", "password-both-restart")
		conv := env.Conversation(t, jwt)
		a := env.Admit(t, jwt, conv, "r1", "a #long one", "")
		restarted := false
		evs, status := env.Follow(t, jwt, a.RunID, 120*time.Second, func(ev queue.Event) bool {
			if ev.Type == queue.EventMessageDelta && !restarted {
				restarted = true
				env.RestartHermes(t)
			}
			return true
		})
		require.Equal(t, "interrupted", status)
		last := evs[len(evs)-1]
		require.Equal(t, queue.EventRunInterrupted, last.Type)
		require.Contains(t, string(last.Data), "restarted")
		run := settledRun(t, env, a.RunID)
		require.Contains(t, *run.ErrorSummary, "restarted")
		require.Equal(t, 1, turnCalls(env, "#long"), "never submitted again to the restarted Hermes")
	})
}

// The agent stops mid-run (abort) and a new agent resumes the run: it resubmits with the
// same Idempotency-Key, Hermes replays the native run instead of starting a second one,
// and the text the user sees equals the answer.
func TestBackendsAgentRestartReplaysTheNativeRun(t *testing.T) {
	t.Parallel()
	onBothBackends(t, stacktest.Options{}, false, func(t *testing.T, env *stacktest.Env) {
		env.Model.SetScript("#steady", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 60)), TokenDelay: 25 * time.Millisecond}}})
		first := env.StartAgent(t)
		owner, jwt := env.SignUp(t, "both-resume@example.com", "password-both-resume")
		conv := env.Conversation(t, jwt)
		a := env.Admit(t, jwt, conv, "s1", "go #steady", "")
		deltas, stopped := 0, false
		evs, status := env.Follow(t, jwt, a.RunID, 90*time.Second, func(ev queue.Event) bool {
			if ev.Type == queue.EventMessageDelta {
				deltas++
			}
			if deltas >= 3 && !stopped {
				stopped = true
				first.StopIntake()
				first.Shutdown() // abort: the handler returns without stopping Hermes
				env.StartAgent(t)
			}
			return true
		})
		require.True(t, stopped)
		require.Equal(t, "completed", status)
		require.Equal(t, 1, turnCalls(env, "#steady"), "one native run across both agents")
		msgs := answers(t, env, owner, a.RunID)
		require.Len(t, msgs, 1)
		require.Equal(t, 60, strings.Count(*msgs[0].Text, "tok"))
		require.Equal(t, *msgs[0].Text, deltaText(evs))
		n := 0
		for _, e := range evs {
			if queue.IsTerminalEvent(e.Type) {
				n++
			}
		}
		require.Equal(t, 1, n)
	})
}

// Files runs write with the file tool, two runs at once, each in its own conversation:
// each run's artifacts are exactly the file it wrote, and the user downloads it. The
// double writes under <artifact root>/<native run id>/, where the agent collects a run's
// folder. A shared real Hermes (no member homes, no run-folder plugin: relative paths land
// in its terminal.cwd, see the Artifacts paragraph of docs/design/agent.md): the agent reads
// the run's turn of the session transcript and uploads exactly the files its successful
// write_file/patch calls wrote (PA_AGENT_HERMES_WORKDIR), so the other run's file, in the
// same folder, is never collected (issue #11).
func TestBackendsFileToolArtifacts(t *testing.T) {
	t.Parallel()
	onBothBackends(t, stacktest.Options{}, false, func(t *testing.T, env *stacktest.Env) {
		var names, contents [2]string
		// On real Hermes the first run also writes a file outside the work folder (in the
		// test's temporary folder) by naming its absolute path: Hermes writes it, the agent
		// never uploads it (the double confines write_file to the run's folder).
		outside := ""
		if isReal(env) {
			outside = filepath.Join(filepath.Dir(env.WorkDir), fmt.Sprintf("outside-%d.md", time.Now().UnixNano()))
		}
		for i := range names {
			names[i] = fmt.Sprintf("report-%d-%d.md", time.Now().UnixNano(), i)
			contents[i] = fmt.Sprintf("# Report %d\n\nAll good.\n", i)
			args, _ := json.Marshal(map[string]string{"path": names[i], "content": contents[i]})
			calls := []modeltest.ToolCall{{Name: "write_file", Arguments: string(args)}}
			if i == 0 && outside != "" {
				out, _ := json.Marshal(map[string]string{"path": outside, "content": "not the run's to upload"})
				calls = append(calls, modeltest.ToolCall{Name: "write_file", Arguments: string(out)})
			}
			env.Model.SetScript("#art-"+names[i], modeltest.Script{Turns: []modeltest.Turn{
				{ToolCalls: calls},
				// The first file is in the folder before the second run settles.
				{Tokens: []string{"Wrote", " it."}, FirstDelay: 300 * time.Millisecond},
			}})
		}
		env.Settings.Devices = "arc:4,xtx:2" // both research runs at once
		env.StartAgent(t)
		_, jwt := env.SignUp(t, "both-art@example.com", "password-both-art")
		var runs [2]string
		for i := range names {
			conv := env.Conversation(t, jwt)
			runs[i] = env.Admit(t, jwt, conv, fmt.Sprintf("art-%d", i), "write #art-"+names[i], "research").RunID
		}
		for i, id := range runs {
			evs, status := env.Follow(t, jwt, id, 90*time.Second, nil)
			require.Equal(t, "completed", status)
			var arts []queue.ArtifactData
			var end queue.RunEndData
			for _, e := range evs {
				switch {
				case e.Type == queue.EventArtifact:
					var d queue.ArtifactData
					require.NoError(t, json.Unmarshal(e.Data, &d))
					arts = append(arts, d)
				case queue.IsTerminalEvent(e.Type):
					require.NoError(t, json.Unmarshal(e.Data, &end))
				}
			}
			if isReal(env) {
				require.FileExists(t, filepath.Join(env.WorkDir, names[i]), "real Hermes wrote into its terminal.cwd")
			}
			if i == 0 && outside != "" {
				require.FileExists(t, outside, "real Hermes wrote the file outside its work folder")
				require.Equal(t, []queue.SkippedArtifact{{Name: outside, Reason: "outside the work folder"}}, end.SkippedArtifacts)
			}
			require.Len(t, arts, 1, "run %d: exactly its own file", i)
			require.Equal(t, names[i], arts[0].Filename)
			res := env.Do(t, "GET", "/api/artifacts/"+arts[0].ArtifactID+"/download", jwt, nil)
			require.Equal(t, 200, res.Status)
			require.Equal(t, contents[i], string(res.Body))
		}
	})
}
