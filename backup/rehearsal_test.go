package backup

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/databases"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/storage"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/outbox"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

var testQueue = queue.DeviceQueue("xtx")

// cancelOn is a progress writer that cancels a context at the first line containing
// what: an interruption at a known point.
type cancelOn struct {
	what   string
	cancel context.CancelFunc
	mu     sync.Mutex
	buf    bytes.Buffer
}

func (c *cancelOn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.buf.Write(p)
	if c.what != "" && strings.Contains(string(p), c.what) {
		c.cancel()
	}
	return len(p), nil
}

// project is what populate wrote.
type project struct {
	users    []string
	byStatus map[schema.RunStatus][]string
	// cancelQueued is the queued run whose cancel was requested.
	cancelQueued string
	artifact     []byte // the 12 MiB one
}

// populate writes a project as the application would: two users, their conversations
// and messages, runs in every status (two queued) with bindings and events, a version
// claim, and artifacts (a 12 MiB one and a small one) with their records.
func populate(t testing.TB, env *schematest.Env, bigArtifact int) *project {
	t.Helper()
	ctx := context.Background()
	p := &project{users: []string{"user-ada", "user-bob"}, byStatus: map[schema.RunStatus][]string{}}
	convs := schema.For[schema.Conversation](env.Store, schema.CollConversations)
	msgs := schema.For[schema.Message](env.Store, schema.CollMessages)
	runs := schema.For[schema.Run](env.Store, schema.CollRuns)
	binds := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings)
	events := schema.For[schema.Event](env.Store, schema.CollEvents)
	arts := schema.For[schema.Artifact](env.Store, schema.CollArtifacts)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	// Three queued: the first has its cancel requested (the cancel path had not settled it).
	statuses := append([]schema.RunStatus{schema.RunQueued, schema.RunQueued}, schema.RunStatuses...)
	for ui, u := range p.users {
		for ci := range 2 {
			conv := fmt.Sprintf("conv-%d-%d", ui, ci)
			_, err := convs.Create(ctx, conv, u, &schema.Conversation{OwnerID: u, Title: "Conversation " + conv, LastActivityAt: now})
			require.NoError(t, err)
			for si := range 3 {
				text := fmt.Sprintf("message %d of %s", si, conv)
				_, err := msgs.Create(ctx, fmt.Sprintf("msg-%s-%d", conv, si), u, &schema.Message{OwnerID: u, ConversationID: conv,
					Sequence: int64(si + 1), Role: "user", Text: &text})
				require.NoError(t, err)
			}
		}
	}
	for i, st := range statuses {
		u := p.users[i%2]
		conv := fmt.Sprintf("conv-%d-0", i%2)
		id := fmt.Sprintf("run-%02d-%s", i, strings.ReplaceAll(string(st), "_", "-"))
		_, err := binds.Create(ctx, id, "", &schema.RunBinding{OwnerID: u, RunID: id, ConversationID: conv, MessageID: "msg-" + conv + "-0",
			ContextSnapshotID: "snap", HarnessProfileID: "hermes", HarnessRevision: 1, RouteID: "work", RouteRevision: 1, Queue: testQueue})
		require.NoError(t, err)
		run := &schema.Run{OwnerID: u, ConversationID: conv, MessageID: "msg-" + conv + "-0", RequestID: "req-" + id, Role: "research",
			Status: st, QueuedAt: now, LastSequence: schema.Ptr(int64(2)), CancelRequested: i == 0}
		if st == schema.RunCompleted {
			run.Version = schema.Ptr(int64(1))
			_, err := schema.For[schema.VersionClaim](env.Store, schema.CollVersions).Create(ctx, schema.VersionDocID(schema.CollRuns, id, 1), "",
				&schema.VersionClaim{Target: schema.CollRuns + "/" + id, Version: 1, Patch: `{"status":"completed"}`})
			require.NoError(t, err)
		}
		_, err = runs.Create(ctx, id, u, run)
		require.NoError(t, err)
		for seq := int64(1); seq <= 2; seq++ {
			data := fmt.Sprintf(`{"n":%d}`, seq)
			_, err := events.Create(ctx, schema.EventDocID(id, seq), u, &schema.Event{OwnerID: u, RunID: id, Sequence: seq, Type: "run.status", Data: &data})
			require.NoError(t, err)
		}
		if i == 0 {
			p.cancelQueued = id
			continue
		}
		p.byStatus[st] = append(p.byStatus[st], id)
	}
	// Artifacts: the bytes in the private bucket, readable by their owner only.
	st := storage.New(env.Client)
	dir := t.TempDir()
	p.artifact = make([]byte, bigArtifact)
	_, _ = rand.Read(p.artifact)
	for i, a := range []struct {
		id, name string
		data     []byte
	}{{"art-big", "report.bin", p.artifact}, {"art-small", "notes.md", []byte("# notes\n")}} {
		path := filepath.Join(dir, a.name)
		require.NoError(t, os.WriteFile(path, a.data, 0o600))
		u := p.users[i%2]
		_, err := st.CreateFile(schema.BucketArtifacts, a.id, file.NewInputFile(path, a.name),
			st.WithCreateFilePermissions([]string{`read("user:` + u + `")`}))
		require.NoError(t, err)
		_, err = arts.Create(ctx, a.id, u, &schema.Artifact{OwnerID: u, ConversationID: "conv-0-0", RunID: p.byStatus[schema.RunCompleted][0],
			Filename: a.name, MimeType: "application/octet-stream", Size: int64(len(a.data)), Checksum: "sha", BucketID: schema.BucketArtifacts, FileID: a.id})
		require.NoError(t, err)
	}
	return p
}

func opts(env *schematest.Env, progress io.Writer) Options {
	return Options{Client: env.Client, Model: env.Model, KeyRef: "env:APPWRITE_API_KEY", AppVersion: "test-1", Progress: progress}
}

// TestRehearsal is the restore drill of deploy/RUNBOOK.md, end to end: a populated
// project is backed up (interrupted once and resumed), restored into a fresh emulator
// (interrupted once and re-run), every document and byte compared, and then, with Redis
// wiped, every queued run is given one task and runs exactly once while the runs that
// were in progress come back interrupted and never run.
func TestRehearsal(t *testing.T) {
	t.Parallel()
	src := schematest.New(t)
	p := populate(t, src, 12<<20)
	archive := filepath.Join(t.TempDir(), "pa-backup.tar")

	// A backup interrupted after its first collection resumes where it stopped.
	ctx, cancel := context.WithCancel(context.Background())
	stop := &cancelOn{what: "backup: " + schema.CollConversations + ":", cancel: cancel}
	_, err := Backup(ctx, opts(src, stop), archive)
	require.ErrorIs(t, err, context.Canceled)
	require.NoFileExists(t, archive)
	require.DirExists(t, archive+".partial")
	var out bytes.Buffer
	res, err := Backup(context.Background(), opts(src, &out), archive)
	require.NoError(t, err)
	require.True(t, res.Resumed)
	require.Contains(t, out.String(), "resuming")
	require.NoDirExists(t, archive+".partial")

	fi, err := os.Stat(archive)
	require.NoError(t, err)
	require.Equal(t, os.FileMode(0o600), fi.Mode().Perm(), "owner-only archive")
	raw, err := os.ReadFile(archive)
	require.NoError(t, err)
	require.False(t, bytes.Contains(raw, []byte(src.RuntimeKey)), "the archive holds no key")
	m := res.Manifest
	require.Equal(t, "env:APPWRITE_API_KEY", m.KeyRef)
	require.Equal(t, FormatVersion, m.Format)
	require.Equal(t, "test-1", m.ApplicationVersion)
	require.Equal(t, SchemaVersion(src.Model), m.Schema.Version)
	require.Equal(t, 4, m.Counts.Documents[schema.CollConversations])
	require.Equal(t, 12, m.Counts.Documents[schema.CollMessages])
	require.Equal(t, len(schema.RunStatuses)+2, m.Counts.Documents[schema.CollRuns])
	require.Equal(t, 2, m.Counts.Files)
	require.Equal(t, int64(12<<20+8), m.Counts.FileBytes)
	require.Len(t, m.Entries, len(src.Model.Collections)+len(src.Model.Buckets)+2, "documents, one index per bucket, two files")

	// Restore into a fresh, provisioned project; the first attempt is cut short.
	dst := schematest.New(t)
	ctx, cancel = context.WithCancel(context.Background())
	stop = &cancelOn{what: "restore: " + schema.CollMessages + ":", cancel: cancel}
	_, err = Restore(ctx, opts(dst, stop), archive)
	require.ErrorIs(t, err, context.Canceled)
	rep, err := Restore(context.Background(), opts(dst, io.Discard), archive)
	require.NoError(t, err, "a re-run completes a partial restore")
	require.NotZero(t, rep.Present["files/"+schema.BucketArtifacts], "the first attempt had restored the files")

	live := []string{}
	for _, st := range []schema.RunStatus{schema.RunWaitingForResource, schema.RunRunning, schema.RunWaitingForApproval, schema.RunCancelling} {
		live = append(live, p.byStatus[st]...)
	}
	require.ElementsMatch(t, live, rep.Interrupted)
	require.ElementsMatch(t, p.byStatus[schema.RunQueued], rep.Queued)
	require.Equal(t, []string{p.cancelQueued}, rep.Cancelled)

	// Every document and byte, compared with the source project.
	for _, c := range src.Model.Collections {
		want, err := listAll(context.Background(), opts(src, nil), databasesOf(src), c.ID)
		require.NoError(t, err)
		got, err := listAll(context.Background(), opts(dst, nil), databasesOf(dst), c.ID)
		require.NoError(t, err)
		extra := 0
		for id, g := range got {
			w, ok := want[id]
			if !ok {
				require.Equal(t, schema.CollVersions, c.ID, "only interruption claims are new: %s/%s", c.ID, id)
				extra++
				continue
			}
			if c.ID == schema.CollRuns && id == p.cancelQueued {
				require.Equal(t, string(schema.RunCancelled), g["status"])
				require.Equal(t, CancelledReason, g["errorSummary"])
				require.True(t, equalDoc(c.ID, w, g))
				continue
			}
			if c.ID == schema.CollRuns && contains(live, id) {
				require.Equal(t, string(schema.RunInterrupted), g["status"])
				require.Contains(t, g["errorSummary"], "interrupted by a restore from backup: it was "+w["status"].(string))
				require.True(t, equalDoc(c.ID, w, g))
				continue
			}
			require.Equal(t, w, g, "%s/%s: same fields, permissions and timestamps", c.ID, id)
		}
		if c.ID == schema.CollVersions {
			require.Equal(t, len(live)+1, extra, "one claim per settled run")
		}
		require.Equal(t, len(want)+extra, len(got), c.ID)
	}
	for _, id := range []string{"art-big", "art-small"} {
		a, err := storage.New(src.Client).GetFileDownload(schema.BucketArtifacts, id)
		require.NoError(t, err)
		b, err := storage.New(dst.Client).GetFileDownload(schema.BucketArtifacts, id)
		require.NoError(t, err)
		require.True(t, bytes.Equal(*a, *b), id)
		fa, err := storage.New(dst.Client).GetFile(schema.BucketArtifacts, id)
		require.NoError(t, err)
		require.Len(t, fa.Permissions, 1)
	}
	big, err := storage.New(dst.Client).GetFileDownload(schema.BucketArtifacts, "art-big")
	require.NoError(t, err)
	require.True(t, bytes.Equal(p.artifact, *big), "the 12 MiB artifact, byte for byte")

	// Restoring again changes nothing.
	rep, err = Restore(context.Background(), opts(dst, io.Discard), archive)
	require.NoError(t, err)
	require.Empty(t, rep.Created)

	// Redis wiped entirely (a fresh one): every queued run runs exactly once, nothing else runs.
	rs := redistest.Start(t)
	rdb := rs.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	insp := asynq.NewInspectorFromRedisClient(rdb)
	t.Cleanup(func() { _ = insp.Close() })
	aclient := asynq.NewClientFromRedisClient(rdb)
	recon := func() *outbox.Reconciler {
		return &outbox.Reconciler{Store: dst.Store, Inspector: insp, Enq: queue.NewEnqueuer(aclient), RDB: rdb,
			Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	}
	var created atomic.Int64
	var wg sync.WaitGroup
	for range 4 { // four agents' outboxes at once
		wg.Go(func() {
			n, err := recon().Once(context.Background())
			require.NoError(t, err)
			created.Add(int64(n))
		})
	}
	wg.Wait()
	require.Equal(t, int64(len(p.byStatus[schema.RunQueued])), created.Load(), "one task per queued run")

	var mu sync.Mutex
	ran := map[string]int{}
	srv := asynq.NewServerFromRedisClient(rdb, asynq.Config{Concurrency: 2, Queues: map[string]int{testQueue: 1},
		TaskCheckInterval: 10 * time.Millisecond, LogLevel: asynq.FatalLevel})
	require.NoError(t, srv.Start(asynq.HandlerFunc(func(_ context.Context, task *asynq.Task) error {
		rt, err := queue.Decode[queue.RunTask](task)
		if err != nil {
			return err
		}
		mu.Lock()
		ran[rt.RunID]++
		mu.Unlock()
		return nil
	})))
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(ran) == len(p.byStatus[schema.RunQueued])
	}, 20*time.Second, 10*time.Millisecond)
	srv.Shutdown()
	n, err := recon().Once(context.Background())
	require.NoError(t, err)
	require.Zero(t, n, "a completed task keeps its id: no second run")
	for _, id := range p.byStatus[schema.RunQueued] {
		require.Equal(t, 1, ran[id], id)
	}
	require.Len(t, ran, len(p.byStatus[schema.RunQueued]), "no interrupted or settled run ran")
}

func contains(xs []string, x string) bool {
	for _, y := range xs {
		if y == x {
			return true
		}
	}
	return false
}

func databasesOf(env *schematest.Env) *databases.Databases { return databases.New(env.Client) }
