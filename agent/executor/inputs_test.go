package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
)

// attach puts files in the uploads bucket as the owner would (readable by them only) and
// names them on the run's message, as admission stores them.
func (s *suite) attach(t testing.TB, runID string, files map[string]string, order ...string) {
	t.Helper()
	ctx := context.Background()
	var ids []string
	for _, name := range order {
		id := "f" + runID[1:20] + "-" + string(rune('a'+len(ids)))
		require.NoError(t, s.store.CreateUpload(ctx, id, owner, name, []byte(files[name])))
		ids = append(ids, id)
	}
	s.patchMessage(t, runID, map[string]any{"attachments": ids})
}

// patchMessage writes fields of run's message.
func (s *suite) patchMessage(t testing.TB, runID string, patch map[string]any) {
	t.Helper()
	ctx := context.Background()
	b, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Get(ctx, runID)
	require.NoError(t, err)
	_, err = schema.For[schema.Message](s.store, schema.CollMessages).Update(ctx, b.MessageID, patch)
	require.NoError(t, err)
}

// Issue 17 item 5: before the run starts its attached files are in the run's working
// folder (<work>/inputs/<run>/<safe name>) and the model's input names their paths as the
// harness sees them; a second attempt (resume) neither fetches nor duplicates them and
// sends the identical input.
func TestAttachedFilesArePlacedBeforeTheRunStarts(t *testing.T) {
	t.Parallel()
	parts := make([]string, 1000)
	for i := range parts {
		parts[i] = "x"
	}
	s := setup(t, newFake(func(string) []harness.Event { return deltas(parts...) }, 300*time.Microsecond))
	work := t.TempDir()
	id := s.newRun(t)
	s.attach(t, id, map[string]string{"notes.txt": "the tide turns at 14:07", "../../etc/passwd.txt": "not a path", "notes.TXT": "second"},
		"notes.txt", "../../etc/passwd.txt", "notes.TXT")
	ctx := context.Background()
	exec := func(agent string, lease time.Duration) *executor.Executor {
		e := s.newExecutor(agent)
		e.HermesWorkDir, e.HermesCwd = work, "/srv/hermes/work"
		if lease > 0 {
			e.HeartbeatEvery, e.LeaseTTL = time.Hour, lease // never renews
		}
		return e
	}
	// The first attempt stalls (its lease lapses) after the run started.
	first := make(chan error, 1)
	go func() { first <- exec("agent-1", 50*time.Millisecond).Execute(ctx, id) }()
	waitForDelta(t, s, id)
	dir := filepath.Join(work, executor.RunsDir, id, executor.InputsDir)
	b, err := os.ReadFile(filepath.Join(dir, "notes.txt"))
	require.NoError(t, err)
	require.Equal(t, "the tide turns at 14:07", string(b))
	b, err = os.ReadFile(filepath.Join(dir, "passwd.txt"))
	require.NoError(t, err, "a name with folders is reduced to its base name, inside the run's folder")
	require.Equal(t, "not a path", string(b))
	b, err = os.ReadFile(filepath.Join(dir, "2-notes.TXT"))
	require.NoError(t, err, "names that differ only in case do not collide")
	require.Equal(t, "second", string(b))
	s.fake.mu.Lock()
	in := s.fake.subs[0].Input
	s.fake.mu.Unlock()
	require.True(t, strings.HasPrefix(in, "hello\n\nAttached files"), in)
	for _, n := range []string{"notes.txt", "passwd.txt", "2-notes.TXT"} {
		require.Contains(t, in, "/srv/hermes/work/runs/"+id+"/inputs/"+n, "paths as the harness names the folder")
	}
	require.NotContains(t, in, work, "the host's path is not the harness's")
	require.NotContains(t, strings.ToLower(in), "key")
	// The run is told its own folder, and its session is pointed at it (runfolder.go).
	s.fake.mu.Lock()
	instr := s.fake.subs[0].Instructions
	s.fake.mu.Unlock()
	require.Contains(t, instr, "Your folder for this run is /srv/hermes/work/runs/"+id+".")
	require.Contains(t, instr, "/srv/hermes/work/runs/"+id+"/inputs")
	b, err = os.ReadFile(filepath.Join(work, executor.RunsDir, ".sessions", "pa-"+id))
	require.NoError(t, err)
	require.Equal(t, id+"\n", string(b))

	// A second attempt takes over: the files are already there (kept, not fetched again,
	// not duplicated) and its submission is identical.
	require.NoError(t, os.Chtimes(filepath.Join(dir, "notes.txt"), time.Unix(1, 0), time.Unix(1, 0)))
	require.Eventually(t, func() bool {
		n, err := s.rdb.Exists(ctx, executor.LeaseKey(id)).Result()
		return err == nil && n == 0
	}, 5*time.Second, time.Millisecond, "the first executor's lease lapses")
	require.NoError(t, exec("agent-2", 0).Execute(ctx, id))
	require.Error(t, <-first)
	require.Equal(t, schema.RunCompleted, s.record(t, id).Status)
	s.fake.mu.Lock()
	subs := append([]harness.Submission(nil), s.fake.subs...)
	s.fake.mu.Unlock()
	require.Len(t, subs, 2)
	require.Equal(t, in, subs[1].Input)
	require.Equal(t, instr, subs[1].Instructions, "the same folder on every attempt")
	again, err := os.Stat(filepath.Join(dir, "notes.txt"))
	require.NoError(t, err)
	require.Equal(t, time.Unix(1, 0), again.ModTime(), "not written again")
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	require.Len(t, entries, 3, "nothing duplicated, no partial file left")
	// The card counted the files staged, in real units (issue 32 item 6).
	evs, _, err := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
	require.NoError(t, err)
	var staged []queue.Progress
	for _, e := range evs {
		var d queue.RunStatusData
		if e.Type == queue.EventRunStatus && json.Unmarshal(e.Data, &d) == nil && d.Progress != nil {
			staged = append(staged, *d.Progress)
		}
	}
	require.GreaterOrEqual(t, len(staged), 3)
	require.Equal(t, []queue.Progress{{Completed: 1, Total: 3, Unit: "files staged"}, {Completed: 2, Total: 3, Unit: "files staged"},
		{Completed: 3, Total: 3, Unit: "files staged"}}, staged[:3])
	r := s.record(t, id)
	require.Equal(t, int64(3), *r.ProgressCompleted)
	require.Equal(t, int64(3), *r.ProgressTotal)
}

// directFake is the fake harness as the direct one (plain chat, no file tools).
type directFake struct{ *fakeHarness }

func (directFake) Kind() harness.Kind { return harness.DirectKind }

// Plain chat has no file tools: the text of attached text files is in the input itself
// (fenced, within the route's budget); other files are named with why they are not shown.
func TestAttachedTextIsInlinedForPlainChat(t *testing.T) {
	t.Parallel()
	fake := newFake(func(string) []harness.Event { return deltas("ok") }, 0)
	s := setup(t, fake)
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return directFake{fake}, nil }
	s.exec.ArtifactRoot = t.TempDir()
	id := s.newRun(t)
	s.attach(t, id, map[string]string{"tides.txt": "High tide at 14:07.\n", "code.md": "```go\nx\n```\n", "scan.pdf": "%PDF-1.4",
		"long.txt": strings.Repeat("z", 9000)}, "tides.txt", "code.md", "scan.pdf", "long.txt")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, s.exec.Execute(ctx, id))
	require.Len(t, fake.subs, 1)
	in := fake.subs[0].Input
	require.Contains(t, in, "hello\n\nAttached files:\n- tides.txt (20 bytes)\n- code.md (12 bytes)\n")
	require.Contains(t, in, "tides.txt (the file's text):\n```\nHigh tide at 14:07.\n```")
	require.Contains(t, in, "code.md (the file's text):\n````\n```go\nx\n```\n````", "a fence longer than any inside")
	require.Contains(t, in, "- scan.pdf (8 bytes; not shown: plain chat reads text files only")
	require.Contains(t, in, "- long.txt (8.8 KiB; not shown: too long for this chat's context", "4096 tokens: 8 KiB of text at most")
	require.NotContains(t, in, s.exec.ArtifactRoot, "no host path for a harness that cannot open it")
}

func TestSafeName(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"report.txt": "report.txt", "../../etc/passwd": "passwd", `C:\Users\x\notes.md`: "notes.md",
		".bashrc": "bashrc", "..": "file", "": "file", "a b/ü.txt": "_.txt", "résumé.pdf": "r_sum_.pdf",
		"x\x00y.txt": "x_y.txt", strings.Repeat("a", 300) + ".txt": strings.Repeat("a", 96) + ".txt",
	} {
		require.Equal(t, want, executor.SafeName(in), in)
	}
}

// answeredBy records on run's message the run that answers it, as admission does.
func (s *suite) answeredBy(t testing.TB, runID string) {
	t.Helper()
	s.patchMessage(t, runID, map[string]any{"runId": runID})
}

// A later turn is told of the files attached to earlier turns (their history entries name
// them again, placed again in the earlier run's folder when this host lacks them; plain
// chat gets their text again), the newest first within earlierFilesMax.
func TestEarlierTurnsFilesAreNamedAgain(t *testing.T) {
	t.Parallel()
	fake := newFake(func(string) []harness.Event { return deltas("ok") }, 0)
	s := setup(t, fake)
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return directFake{fake}, nil }
	s.exec.ArtifactRoot = t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	conv := "c-earlier-files"

	r1 := s.newTurn(t, conv, "fake")
	s.answeredBy(t, r1)
	s.attach(t, r1, map[string]string{"tides.txt": "High tide at 14:07.\n"}, "tides.txt")
	require.NoError(t, s.exec.Execute(ctx, r1))
	// Another host answers the next turns: the first turn's file is not there.
	require.NoError(t, os.RemoveAll(filepath.Join(s.exec.ArtifactRoot, executor.InputsDir)))

	r2 := s.newTurn(t, conv, "fake")
	s.answeredBy(t, r2)
	require.NoError(t, s.exec.Execute(ctx, r2))
	sub := fake.lastSub()
	require.Equal(t, "turn "+r2, sub.Input, "the new message carries no files of its own")
	require.NotEmpty(t, sub.History)
	first := sub.History[0]
	require.Equal(t, "user", first.Role)
	require.Equal(t, "turn "+r1+"\n\nFiles attached to this message:\n- tides.txt (20 bytes)\n\n"+
		"tides.txt (the file's text):\n```\nHigh tide at 14:07.\n```", first.Content)
	b, err := os.ReadFile(filepath.Join(s.exec.ArtifactRoot, executor.InputsDir, r1, "tides.txt"))
	require.NoError(t, err, "placed again in the earlier run's folder")
	require.Equal(t, "High tide at 14:07.\n", string(b))

	// Two later turns with five files each: the turn after them lists the newest ten
	// (earlierFilesMax) and only counts the first turn's.
	for _, p := range []string{"a", "b"} {
		r := s.newTurn(t, conv, "fake")
		s.answeredBy(t, r)
		files, order := map[string]string{}, []string{}
		for i := range schema.MaxAttachments {
			n := fmt.Sprintf("%s%d.txt", p, i)
			files[n], order = n, append(order, n)
		}
		s.attach(t, r, files, order...)
		require.NoError(t, s.exec.Execute(ctx, r))
	}
	last := s.newTurn(t, conv, "fake")
	s.answeredBy(t, last)
	require.NoError(t, s.exec.Execute(ctx, last))
	var users []string
	for _, m := range fake.lastSub().History {
		if m.Role == "user" {
			users = append(users, m.Content)
		}
	}
	require.Len(t, users, 4)
	require.NotContains(t, users[0], "tides.txt", "beyond the bound")
	require.Contains(t, users[0], "- (1 more file(s), not listed again)")
	require.Equal(t, "turn "+r2, users[1])
	require.Contains(t, users[2], "- a0.txt (6 bytes)")
	require.Contains(t, users[2], "a4.txt (the file's text):\n```\na4.txt\n```")
	require.Contains(t, users[3], "- b4.txt (6 bytes)")
}
