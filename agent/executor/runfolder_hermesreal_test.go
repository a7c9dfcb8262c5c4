package executor_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/artifacts"
	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/agent/homes/homestest"
	"privateassistant/hermes"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
)

// Issue 30, on the real Hermes in its sandbox (skipped without it, failed under CI=true):
// every run works in its own folder (<work>/runs/<run id>, /member/work/runs/<run id> to
// its Hermes). Three research runs of one member each write notes.md by a relative path:
// all three complete, each with its own notes as its artifact, none refused; the run's
// terminal starts in its folder and its attachment is in its inputs/. A run whose write is
// refused (another run's notes.md) completes with the refusal in its terminal event, and
// the other run's notes are untouched. A run that swaps its folder for a link to the host's
// /etc uploads nothing of the host's. Another member's run sees none of these folders.
func TestEachRunWorksInItsOwnFolderOnRealHermes(t *testing.T) {
	homestest.Require(t)
	model := modeltest.New("demo-model")
	he := homestest.Start(t, homestest.Options{Model: model, Toolsets: []string{"terminal", "file"},
		Config: map[string]any{"approvals": map[string]any{"mode": "off"}}})
	s := setup(t, nil)
	s.exec.Uploader = &artifacts.Uploader{Store: s.store, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	s.exec.MemberHome = func(ctx context.Context, _ *schema.HarnessProfile, owner string) (executor.MemberHome, error) {
		h, release, err := he.Acquire(ctx, owner)
		if err != nil {
			return executor.MemberHome{}, err
		}
		return executor.MemberHome{Harness: &harness.Hermes{Client: &hermes.Client{BaseURL: h.URL, APIKey: h.Key}},
			WorkDir: h.WorkDir, Cwd: h.Cwd, Release: release}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	call := func(name string, args map[string]any) modeltest.ToolCall {
		b, _ := json.Marshal(args)
		return modeltest.ToolCall{Name: name, Arguments: string(b)}
	}
	done := modeltest.Turn{Tokens: []string{"I saved my notes as notes.md."}}
	work := filepath.Join(he.Root, "alice", "work")

	var runs []string
	for i, note := range []string{"# First notes\n", "# Second notes\n", "# Third notes\n"} {
		marker := "#research-" + string(rune('a'+i))
		id := s.newRunOf(t, "alice", "research the abacus "+marker)
		s.attachOf(t, "alice", id, "brief.txt", "brief "+marker+"\n")
		model.SetScript(marker, modeltest.Script{Turns: []modeltest.Turn{
			{ToolCalls: []modeltest.ToolCall{call("terminal", map[string]any{"command": "pwd; cat inputs/brief.txt"})}},
			{ToolCalls: []modeltest.ToolCall{call("write_file", map[string]any{"path": "notes.md", "content": note})}},
			done,
		}})
		require.NoError(t, s.exec.Execute(ctx, id))
		require.Equal(t, schema.RunCompleted, s.record(t, id).Status, "research run %d", i+1)
		require.Equal(t, map[string]string{"notes.md": note}, s.artifactsOf(t, "alice", id), "run %d's own notes, its only artifact", i+1)
		b, err := os.ReadFile(filepath.Join(work, executor.RunsDir, id, "notes.md"))
		require.NoError(t, err, "written in the run's own folder")
		require.Equal(t, note, string(b))
		reqs := requestsSaying(model.Requests(), marker)
		res := toolResults(reqs)
		require.NotEmpty(t, res)
		require.Contains(t, res[0], "/member/work/runs/"+id, "the run's terminal starts in its folder")
		require.Contains(t, res[0], "brief "+marker, "its attachment is in its inputs/")
		sys := strings.Join(requestTexts(reqs[:1]), "\n")
		require.Contains(t, sys, "Your folder for this run is /member/work/runs/"+id, "the run is told its folder")
		for _, ev := range s.eventsOf(t, id) {
			require.NotContains(t, string(ev.Data), "Refusing", "run %d: nothing refused", i+1)
			require.NotContains(t, string(ev.Data), "skippedArtifacts", "run %d", i+1)
		}
		runs = append(runs, id)
	}
	_, err := os.Stat(filepath.Join(work, "notes.md"))
	require.ErrorIs(t, err, os.ErrNotExist, "nothing lands in the shared work folder")

	// A follow-up turn continues the first run's Hermes session, in a folder of its own.
	follow := s.followUpOf(t, "alice", runs[0], "and now the follow-up #follow-up")
	model.SetScript("#follow-up", modeltest.Script{Turns: []modeltest.Turn{
		{ToolCalls: []modeltest.ToolCall{call("terminal", map[string]any{"command": "pwd"})}},
		{ToolCalls: []modeltest.ToolCall{call("write_file", map[string]any{"path": "notes.md", "content": "# Follow-up notes\n"})}},
		done,
	}})
	require.NoError(t, s.exec.Execute(ctx, follow))
	require.Equal(t, schema.RunCompleted, s.record(t, follow).Status)
	bind, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Get(ctx, follow)
	require.NoError(t, err)
	require.Equal(t, "pa-"+runs[0], *bind.NativeSessionID, "the session is continued")
	res := toolResults(requestsSaying(model.Requests(), "#follow-up"))
	require.Len(t, res, 4, "the first run's two tool results, then the follow-up's")
	require.Contains(t, res[2], "/member/work/runs/"+follow, "the continued session works in the follow-up's folder")
	require.Equal(t, map[string]string{"notes.md": "# Follow-up notes\n"}, s.artifactsOf(t, "alice", follow))
	b, err := os.ReadFile(filepath.Join(work, executor.RunsDir, runs[0], "notes.md"))
	require.NoError(t, err)
	require.Equal(t, "# First notes\n", string(b), "the first run's notes are untouched")

	// A write Hermes refuses (another run's notes.md, which this run never read): the run
	// completes, and its terminal event says the write failed; the file is untouched.
	clash := s.newRunOf(t, "alice", "overwrite #clash")
	other := "/member/work/runs/" + runs[0] + "/notes.md"
	model.SetScript("#clash", modeltest.Script{Turns: []modeltest.Turn{
		{ToolCalls: []modeltest.ToolCall{call("write_file", map[string]any{"path": other, "content": "clobbered\n"})}},
		done,
	}})
	require.NoError(t, s.exec.Execute(ctx, clash))
	require.Equal(t, schema.RunCompleted, s.record(t, clash).Status)
	require.Empty(t, s.artifactsOf(t, "alice", clash))
	var end queue.RunEndData
	for _, ev := range s.eventsOf(t, clash) {
		t.Logf("%s %.300s", ev.Type, ev.Data)
		if ev.Type == queue.EventRunCompleted {
			require.NoError(t, json.Unmarshal(ev.Data, &end))
		}
	}
	require.Len(t, end.SkippedArtifacts, 1, "the refused write is in the terminal event")
	require.Equal(t, other, end.SkippedArtifacts[0].Name)
	require.Contains(t, end.SkippedArtifacts[0].Reason, "write_file failed: ")
	b, err = os.ReadFile(filepath.Join(work, executor.RunsDir, runs[0], "notes.md"))
	require.NoError(t, err)
	require.Equal(t, "# First notes\n", string(b), "the other run's notes are untouched")

	// A run that swaps its folder for a link to the host's /etc after writing "hostname"
	// there: the agent, collecting the run's files on the host, never follows the link out of
	// the member's home (nothing of the host is uploaded), and places nothing through it.
	swap := s.newRunOf(t, "alice", "swap #swap")
	model.SetScript("#swap", modeltest.Script{Turns: []modeltest.Turn{
		{ToolCalls: []modeltest.ToolCall{call("write_file", map[string]any{"path": "hostname", "content": "mine\n"})}},
		{ToolCalls: []modeltest.ToolCall{call("terminal", map[string]any{"command": "cd /member/work/runs && mv " + swap + " " + swap + ".old && ln -s /etc " + swap +
			" && mv .sessions .sessions.old && ln -s /etc .sessions && ls -la"})}},
		done,
	}})
	require.NoError(t, s.exec.Execute(ctx, swap))
	require.Equal(t, schema.RunCompleted, s.record(t, swap).Status)
	for name, content := range s.artifactsOf(t, "alice", swap) {
		t.Errorf("artifact %s uploaded through the link: %.80q", name, content)
	}
	fi, err := os.Lstat(filepath.Join(work, executor.RunsDir, swap))
	require.NoError(t, err)
	require.Equal(t, os.ModeSymlink, fi.Mode().Type(), "the run did swap its folder (the control)")
	var swapEnd queue.RunEndData
	for _, ev := range s.eventsOf(t, swap) {
		if ev.Type == queue.EventRunCompleted {
			require.NoError(t, json.Unmarshal(ev.Data, &swapEnd))
		}
	}
	require.Equal(t, []queue.SkippedArtifact{{Name: "/member/work/runs/" + swap + "/hostname", Reason: "the run's folder is not a folder of its home"}},
		swapEnd.SkippedArtifacts, "the file is named as not saved, and why")

	// Another member's run: its own folder only; none of alice's runs.
	bobRun := s.newRunOf(t, "bob", "look #bob-look")
	model.SetScript("#bob-look", modeltest.Script{Turns: []modeltest.Turn{
		{ToolCalls: []modeltest.ToolCall{call("terminal", map[string]any{"command": "pwd; ls -la /member/work/runs/ ..; find / -path /proc -prune -o -name notes.md -print 2>/dev/null"})}},
		done,
	}})
	require.NoError(t, s.exec.Execute(ctx, bobRun))
	require.Equal(t, schema.RunCompleted, s.record(t, bobRun).Status)
	res = toolResults(requestsSaying(model.Requests(), "#bob-look"))
	require.Len(t, res, 1)
	t.Logf("bob: %.600s", res[0])
	require.Contains(t, res[0], "/member/work/runs/"+bobRun, "bob's run works in its own folder (the control)")
	for _, id := range append(runs, clash) {
		require.NotContains(t, res[0], id, "bob sees none of alice's runs")
	}
	require.NotContains(t, res[0], "notes.md")
}

// followUpOf admits a run of owner for a new user message after prev's, in prev's
// conversation, on the same harness and route (so it may continue prev's native session).
func (s *suite) followUpOf(t *testing.T, owner, prev, text string) string {
	t.Helper()
	ctx := context.Background()
	p, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Get(ctx, prev)
	require.NoError(t, err)
	seq, err := s.rdb.Incr(ctx, queue.ConvSeqKey(p.ConversationID)).Result()
	require.NoError(t, err)
	tok := eventlog.NewToken()
	id, msgID := "r"+tok[:31], "m"+tok[:31]
	_, err = schema.For[schema.Message](s.store, schema.CollMessages).Create(ctx, msgID, owner, &schema.Message{
		OwnerID: owner, ConversationID: p.ConversationID, Sequence: seq, Role: "user", Text: schema.Ptr(text)})
	require.NoError(t, err)
	_, err = schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Create(ctx, id, "", &schema.RunBinding{
		OwnerID: owner, RunID: id, ConversationID: p.ConversationID, MessageID: msgID, ContextSnapshotID: "s" + tok[:31],
		HarnessProfileID: p.HarnessProfileID, HarnessRevision: p.HarnessRevision, RouteID: p.RouteID, RouteRevision: p.RouteRevision, Queue: "q"})
	require.NoError(t, err)
	_, err = schema.For[schema.Run](s.store, schema.CollRuns).Create(ctx, id, owner, &schema.Run{
		OwnerID: owner, ConversationID: p.ConversationID, MessageID: msgID, RequestID: "q" + id, Role: "coding",
		Status: schema.RunQueued, QueuedAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	return id
}
