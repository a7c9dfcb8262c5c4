package daemon_test

import (
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/settings"
	"privateassistant/stacktest"
)

func types(evs []queue.Event) []string {
	out := []string{}
	for _, e := range evs {
		out = append(out, e.Type)
	}
	return out
}

func deltaText(evs []queue.Event) string {
	var b strings.Builder
	for _, e := range evs {
		switch e.Type {
		case queue.EventMessageDelta:
			var d struct{ Text string }
			_ = json.Unmarshal(e.Data, &d)
			b.WriteString(d.Text)
		case queue.EventMessageReset:
			b.Reset()
		}
	}
	return b.String()
}

func runRecord(t *testing.T, env *stacktest.Env, runID string) *schema.Run {
	t.Helper()
	r, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(context.Background(), runID)
	require.NoError(t, err)
	return r
}

// settledRun waits for a run's record to turn terminal: followers see the terminal event
// before the executor writes the record (by design), so a read right after Follow races.
func settledRun(t *testing.T, env *stacktest.Env, runID string) *schema.Run {
	t.Helper()
	var r *schema.Run
	require.Eventually(t, func() bool { r = runRecord(t, env, runID); return schema.IsTerminal(r.Status) }, 10*time.Second, 20*time.Millisecond)
	return r
}

// answers returns the assistant messages of a run.
func answers(t *testing.T, env *stacktest.Env, owner, runID string) []schema.Message {
	t.Helper()
	msgs, err := schema.For[schema.Message](env.Store, schema.CollMessages).All(context.Background(), schema.ListQuery{Owner: owner,
		Filters: []string{query.Equal("runId", runID), query.Equal("role", "assistant")}})
	require.NoError(t, err)
	return msgs
}

func TestChatTurnStreamsAndCompletes(t *testing.T) {
	t.Parallel()
	for _, h := range []string{"direct", "hermes"} {
		t.Run(h, func(t *testing.T) {
			t.Parallel()
			env := stacktest.New(t, stacktest.Options{ChatHarness: h})
			env.StartAgent(t)
			owner, jwt := env.SignUp(t, "chat@example.com", "password-chat")
			conv := env.Conversation(t, jwt)
			a := env.Admit(t, jwt, conv, "q1", "hello agent", "")
			evs, status := env.Follow(t, jwt, a.RunID, 30*time.Second, nil)
			require.Equal(t, "completed", status)
			require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
			require.Equal(t, "You said: hello agent", deltaText(evs))
			run := settledRun(t, env, a.RunID)
			require.Equal(t, schema.RunCompleted, run.Status)
			require.NotNil(t, run.Usage)
			require.NotNil(t, run.FinishedAt)
			require.Equal(t, int64(len(evs)), *run.LastSequence)
			ans := answers(t, env, owner, a.RunID)
			require.Len(t, ans, 1)
			require.Equal(t, "You said: hello agent", *ans[0].Text)
			require.Equal(t, int64(2), ans[0].Sequence, "the answer follows the question")

			// A second turn continues the conversation (and, for Hermes, the native session).
			b := env.Admit(t, jwt, conv, "q2", "and again", "")
			_, status = env.Follow(t, jwt, b.RunID, 30*time.Second, nil)
			require.Equal(t, "completed", status)
			reqs := env.Model.Requests()
			last := reqs[len(reqs)-1].Messages
			var texts []string
			for _, m := range last {
				if s, ok := m.Content.(string); ok {
					texts = append(texts, s)
				}
			}
			require.Contains(t, strings.Join(texts, "|"), "hello agent", "the earlier turn is in the model's context")
			if h == "hermes" {
				require.Equal(t, 2, env.Hermes.RunsCreated())
			}
		})
	}
}

func TestApprovalApproveAndDeny(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t)
	env.StartAgent(t)
	_, jwt := env.SignUp(t, "approve@example.com", "password-approve")
	conv := env.Conversation(t, jwt)
	for _, choice := range []string{"once", "deny"} {
		a := env.Admit(t, jwt, conv, "tool-"+choice, "please run #tool", "coding")
		evs, status := env.Follow(t, jwt, a.RunID, 30*time.Second, func(ev queue.Event) bool {
			if ev.Type == queue.EventApprovalRequest {
				var d struct {
					RequestID string
					Command   string
					Choices   []string
				}
				require.NoError(t, json.Unmarshal(ev.Data, &d))
				require.Equal(t, "ls -la /tmp", d.Command)
				require.Equal(t, []string{"once", "deny"}, d.Choices)
				require.Equal(t, schema.RunWaitingForApproval, runRecord(t, env, a.RunID).Status)
				res := env.Do(t, "POST", "/api/runs/"+a.RunID+"/approval", jwt, map[string]any{"requestId": d.RequestID, "choice": choice})
				require.Equal(t, 202, res.Status, string(res.Body))
			}
			return true
		})
		require.Equal(t, "completed", status, choice)
		ts := types(evs)
		require.Contains(t, ts, queue.EventApprovalRequest)
		require.Contains(t, ts, queue.EventApprovalResponse)
		if choice == "once" {
			require.Contains(t, ts, queue.EventToolStarted)
			require.Contains(t, ts, queue.EventToolCompleted)
		} else {
			require.NotContains(t, ts, queue.EventToolStarted, "a denied tool never runs")
		}
	}
}

func TestCancelWhileStreamingAndWhileWaitingForApproval(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.StartAgent(t)
	owner, jwt := env.SignUp(t, "cancel@example.com", "password-cancel")
	conv := env.Conversation(t, jwt)

	a := env.Admit(t, jwt, conv, "long", "tell a #long story", "")
	cancelled := false
	evs, status := env.Follow(t, jwt, a.RunID, 60*time.Second, func(ev queue.Event) bool {
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

	b := env.Admit(t, jwt, conv, "wait", "run #tool please", "coding")
	evs, status = env.Follow(t, jwt, b.RunID, 60*time.Second, func(ev queue.Event) bool {
		if ev.Type == queue.EventApprovalRequest {
			res := env.Do(t, "POST", "/api/runs/"+b.RunID+"/cancel", jwt, nil)
			require.Equal(t, 202, res.Status)
		}
		return true
	})
	require.Equal(t, "cancelled", status)
	require.NotContains(t, types(evs), queue.EventToolStarted)
}

func TestDroppedStreamIsReconciled(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.Model.SetScript("#slowish", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields("a b c d e f g h i j k l m n o p"), TokenDelay: 30 * time.Millisecond}}})
	env.StartAgent(t)
	owner, jwt := env.SignUp(t, "drop@example.com", "password-drop")
	conv := env.Conversation(t, jwt)
	a := env.Admit(t, jwt, conv, "d1", "a #slowish answer", "")
	dropped := false
	evs, status := env.Follow(t, jwt, a.RunID, 30*time.Second, func(ev queue.Event) bool {
		if ev.Type == queue.EventMessageDelta && !dropped {
			dropped = true
			b, err := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).Get(context.Background(), a.RunID)
			require.NoError(t, err)
			env.Hermes.DropStream(*b.NativeRunID)
		}
		return true
	})
	require.True(t, dropped)
	require.Equal(t, "completed", status)
	require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
	ans := answers(t, env, owner, a.RunID)
	require.Len(t, ans, 1)
	require.Equal(t, "abcdefghijklmnop", *ans[0].Text, "the final answer comes from the native status, not the lost deltas")
	require.Equal(t, 1, env.Hermes.RunsCreated())
}

func TestHermesRestartIsSurfacedAsInterrupted(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.StartAgent(t)
	_, jwt := env.SignUp(t, "restart@example.com", "password-restart")
	conv := env.Conversation(t, jwt)
	a := env.Admit(t, jwt, conv, "r1", "a #long one", "")
	restarted := false
	evs, status := env.Follow(t, jwt, a.RunID, 60*time.Second, func(ev queue.Event) bool {
		if ev.Type == queue.EventMessageDelta && !restarted {
			restarted = true
			env.KillHermes()
			env.StartHermes(t)
		}
		return true
	})
	require.Equal(t, "interrupted", status)
	last := evs[len(evs)-1]
	require.Equal(t, queue.EventRunInterrupted, last.Type)
	require.Contains(t, string(last.Data), "restarted")
	run := settledRun(t, env, a.RunID)
	require.Contains(t, *run.ErrorSummary, "restarted")
	require.Equal(t, 0, env.Hermes.RunsCreated(), "never silently resubmitted to the restarted Hermes")
}

func TestTwelveMiBArtifactRoundTrip(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t)
	const size = 12 << 20
	env.Model.SetScript("#bigfile", modeltest.Script{Turns: []modeltest.Turn{
		{ToolCalls: []modeltest.ToolCall{{Name: "write_file", Arguments: fmt.Sprintf(`{"path":"out/big.bin","size":%d}`, size)}}},
		{Tokens: []string{"Wrote", " it."}},
	}})
	env.StartAgent(t)
	_, jwt := env.SignUp(t, "art@example.com", "password-artifact")
	conv := env.Conversation(t, jwt)
	a := env.Admit(t, jwt, conv, "big", "make a #bigfile", "research")
	evs, status := env.Follow(t, jwt, a.RunID, 60*time.Second, nil)
	require.Equal(t, "completed", status)
	var art struct {
		ArtifactID string
		Size       int64
		Checksum   string
		Filename   string
	}
	var phases []string
	var counts []queue.Progress
	for _, e := range evs {
		if e.Type == queue.EventArtifact {
			require.NoError(t, json.Unmarshal(e.Data, &art))
		}
		var st queue.RunStatusData
		if e.Type == queue.EventRunStatus && json.Unmarshal(e.Data, &st) == nil {
			if st.Phase != "" {
				phases = append(phases, st.Phase)
			}
			if st.Progress != nil {
				counts = append(counts, *st.Progress)
			}
		}
	}
	// The card said what happened at the end (issue 32 items 5, 6): the upload as a phase,
	// counted in files.
	require.Equal(t, executor.PhaseUploading, phases[len(phases)-1], "%v", phases)
	require.Equal(t, []queue.Progress{{Completed: 0, Total: 1, Unit: "artifacts uploaded"}, {Completed: 1, Total: 1, Unit: "artifacts uploaded"}}, counts)
	require.Equal(t, int64(size), art.Size)
	require.Equal(t, "out/big.bin", art.Filename)
	want := make([]byte, size)
	for i := range want {
		want[i] = byte(i*31 + i/1024)
	}
	sum := sha256.Sum256(want)
	require.Equal(t, fmt.Sprintf("%x", sum), art.Checksum)
	// Download through the API, in ranges as the web client does, and compare bytes.
	var got []byte
	for off := 0; off < size; off += 4 << 20 {
		end := min(off+(4<<20), size) - 1
		req, _ := http.NewRequest("GET", env.URL+"/api/artifacts/"+art.ArtifactID+"/download", nil)
		req.Header.Set("Authorization", "Bearer "+jwt)
		req.Header.Set("Range", fmt.Sprintf("bytes=%d-%d", off, end))
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, 206, resp.StatusCode)
		got = append(got, b...)
	}
	require.Equal(t, sum, sha256.Sum256(got))
}

func TestShutdownWithARunInFlightResumesOnTheNextStart(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.Model.SetScript("#steady", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 60)), TokenDelay: 25 * time.Millisecond}}})
	first := env.StartAgent(t)
	owner, jwt := env.SignUp(t, "shutdown@example.com", "password-shutdown")
	conv := env.Conversation(t, jwt)
	a := env.Admit(t, jwt, conv, "s1", "go #steady", "")
	stopped := false
	evs, status := env.Follow(t, jwt, a.RunID, 60*time.Second, func(ev queue.Event) bool {
		if ev.Type == queue.EventMessageDelta && !stopped {
			stopped = true
			first.StopIntake()
			first.Shutdown() // abort: the handler returns without stopping Hermes
			env.StartAgent(t)
		}
		return true
	})
	require.Equal(t, "completed", status)
	require.Equal(t, 1, env.Hermes.RunsCreated(), "one native run across both agents")
	require.Len(t, answers(t, env, owner, a.RunID), 1)
	n := 0
	for _, e := range evs {
		if queue.IsTerminalEvent(e.Type) {
			n++
		}
	}
	require.Equal(t, 1, n)
}

func TestHermesDownAtSubmissionIsRetried(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.KillHermes()
	env.StartAgent(t)
	owner, jwt := env.SignUp(t, "down@example.com", "password-down")
	conv := env.Conversation(t, jwt)
	a := env.Admit(t, jwt, conv, "h1", "are you there", "")
	// The submission fails (connection refused) and is retried; nothing is settled.
	require.Never(t, func() bool {
		r, err := schema.For[schema.Run](env.Store, schema.CollRuns).Get(context.Background(), a.RunID)
		return err == nil && schema.IsTerminal(r.Status)
	}, time.Second, 50*time.Millisecond)
	env.StartHermes(t)
	_, status := env.Follow(t, jwt, a.RunID, 90*time.Second, nil)
	require.Equal(t, "completed", status)
	require.Equal(t, 1, env.Hermes.RunsCreated())
	require.Len(t, answers(t, env, owner, a.RunID), 1)
}

func schemaFor(env *stacktest.Env, runID string) (string, error) {
	b, err := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).Get(context.Background(), runID)
	if err != nil || b.NativeRunID == nil {
		return "", fmt.Errorf("no native run for %s: %v", runID, err)
	}
	return *b.NativeRunID, nil
}

func TestRunsKeepTheirPinnedRevisionsAfterACommit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := stacktest.New(t)
	_, jwt := env.SignUp(t, "pin@example.com", "password-pinned")
	conv := env.Conversation(t, jwt)
	old := env.Admit(t, jwt, conv, "before", "before the change", "")

	// An admin moves chat to a new route revision (alias chat-v2) while the run is queued.
	adm := &settings.Admin{Store: env.Store, Devices: func(context.Context) ([]string, error) { return []string{"arc", "xtx"}, nil }}
	_, _, err := adm.CommitRoute(ctx, "admin", settings.RouteInput{RouteID: "chat", Alias: "chat-v2", Device: "arc", BackendModel: "demo-model", ContextBudget: 131072}, 1)
	require.NoError(t, err)
	s, roles, err := currentRoles(ctx, env)
	require.NoError(t, err)
	chat := roles["chat"]
	chat.RouteRevision = 2
	roles["chat"] = chat
	_, err = adm.CommitSelection(ctx, "admin", settings.SelectionInput{ExpectedRevision: s, Roles: roles})
	require.NoError(t, err)
	require.NoError(t, env.Redis.Client().Del(ctx, queue.PlanPointerKey()).Err()) // the functions' cache sees the new revision

	env.StartAgent(t)
	_, status := env.Follow(t, jwt, old.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	fresh := env.Admit(t, jwt, conv, "after", "after the change", "")
	_, status = env.Follow(t, jwt, fresh.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	var models []string
	for _, r := range env.Model.Requests() {
		models = append(models, r.Model)
	}
	require.Equal(t, []string{"chat", "chat-v2"}, models, "the queued run ran on its pinned route revision")
}

func currentRoles(ctx context.Context, env *stacktest.Env) (int64, map[string]runconfig.RoleBinding, error) {
	s, err := schema.For[schema.Settings](env.Store, schema.CollSettings).Get(ctx, runconfig.SystemSettingsID)
	if err != nil {
		return 0, nil, err
	}
	roles := map[string]runconfig.RoleBinding{}
	err = json.Unmarshal([]byte(*s.Roles), &roles)
	return s.Revision, roles, err
}
