package backup

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/storage"

	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// BenchEnv turns BenchmarkBackupRestore on: it moves 10,000 documents and 100 files per
// iteration, so it is skipped without it; `make bench` sets it and runs it once
// (-benchtime 1x, scripts/bench/plan.go).
const BenchEnv = "PA_BENCH_BACKUP"

// populateMany writes 10,000 documents (100 conversations, 2,000 messages, 500 runs with
// their bindings, 6,900 events) and 100 files of 100 KiB.
func populateMany(b *testing.B, env *schematest.Env) {
	b.Helper()
	ctx := context.Background()
	type job func() error
	var jobs []job
	convs := schema.For[schema.Conversation](env.Store, schema.CollConversations)
	msgs := schema.For[schema.Message](env.Store, schema.CollMessages)
	runs := schema.For[schema.Run](env.Store, schema.CollRuns)
	binds := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings)
	events := schema.For[schema.Event](env.Store, schema.CollEvents)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	for c := range 100 {
		conv, owner := fmt.Sprintf("conv-%03d", c), fmt.Sprintf("user-%d", c%10)
		jobs = append(jobs, func() error {
			_, err := convs.Create(ctx, conv, owner, &schema.Conversation{OwnerID: owner, Title: "c " + conv, LastActivityAt: now})
			return err
		})
		for m := range 20 {
			jobs = append(jobs, func() error {
				text := fmt.Sprintf("message %d of %s, long enough to be a sentence someone typed", m, conv)
				_, err := msgs.Create(ctx, fmt.Sprintf("msg-%03d-%02d", c, m), owner, &schema.Message{OwnerID: owner, ConversationID: conv,
					Sequence: int64(m + 1), Role: "user", Text: &text})
				return err
			})
		}
		for r := range 5 {
			run := fmt.Sprintf("run-%03d-%d", c, r)
			jobs = append(jobs, func() error {
				if _, err := binds.Create(ctx, run, "", &schema.RunBinding{OwnerID: owner, RunID: run, ConversationID: conv, MessageID: "m",
					ContextSnapshotID: "s", HarnessProfileID: "h", HarnessRevision: 1, RouteID: "r", RouteRevision: 1, Queue: testQueue}); err != nil {
					return err
				}
				_, err := runs.Create(ctx, run, owner, &schema.Run{OwnerID: owner, ConversationID: conv, MessageID: "m", RequestID: run,
					Role: "chat", Status: schema.RunCompleted, QueuedAt: now})
				return err
			})
			n := 14
			if r == 0 {
				n = 13 // 6,900 events in all
			}
			for seq := range n {
				jobs = append(jobs, func() error {
					data := `{"text":"a delta of streamed text"}`
					_, err := events.Create(ctx, schema.EventDocID(run, int64(seq+1)), owner, &schema.Event{OwnerID: owner, RunID: run,
						Sequence: int64(seq + 1), Type: "message.delta", Data: &data})
					return err
				})
			}
		}
	}
	dir := b.TempDir()
	st := storage.New(env.Client)
	for f := range 100 {
		jobs = append(jobs, func() error {
			p := filepath.Join(dir, fmt.Sprintf("f%03d.bin", f))
			data := make([]byte, 100<<10)
			_, _ = rand.Read(data)
			if err := os.WriteFile(p, data, 0o600); err != nil {
				return err
			}
			_, err := st.CreateFile(schema.BucketArtifacts, fmt.Sprintf("file-%03d", f), file.NewInputFile(p, "out.bin"),
				st.WithCreateFilePermissions([]string{`read("user:user-1")`}))
			return err
		})
	}
	var mu sync.Mutex
	var first error
	_ = parallel(ctx, 8, jobs, func(j job) error {
		if err := j(); err != nil {
			mu.Lock()
			if first == nil {
				first = err
			}
			mu.Unlock()
			return err
		}
		return nil
	})
	if first != nil {
		b.Fatal(first)
	}
}

// BenchmarkBackupRestore backs up a project of 10,000 documents and 100 files (10 MiB)
// and restores it into a fresh emulator, reporting each direction's throughput.
func BenchmarkBackupRestore(b *testing.B) {
	if os.Getenv(BenchEnv) == "" {
		b.Skipf("set %s=1 (make bench does) to move 10,000 documents and 100 files", BenchEnv)
	}
	src := schematest.New(b)
	populateMany(b, src)
	var backupT, restoreT time.Duration
	var docs, files int
	var bytes int64
	b.ResetTimer()
	for i := range b.N {
		archive := filepath.Join(b.TempDir(), fmt.Sprintf("b%d.tar", i))
		t0 := time.Now()
		res, err := Backup(context.Background(), opts(src, io.Discard), archive)
		if err != nil {
			b.Fatal(err)
		}
		backupT += time.Since(t0)
		docs, files, bytes = total(res.Manifest.Counts.Documents), res.Manifest.Counts.Files, res.Manifest.Counts.FileBytes
		b.StopTimer()
		dst := schematest.New(b)
		b.StartTimer()
		t0 = time.Now()
		if _, err := Restore(context.Background(), opts(dst, io.Discard), archive); err != nil {
			b.Fatal(err)
		}
		restoreT += time.Since(t0)
	}
	if docs != 10000 || files != 100 {
		b.Fatalf("backed up %d documents and %d files, want 10,000 and 100", docs, files)
	}
	n := float64(b.N)
	b.ReportMetric(float64(docs)*n/backupT.Seconds(), "backup-docs/s")
	b.ReportMetric(float64(bytes)*n/backupT.Seconds()/(1<<20), "backup-MiB/s")
	b.ReportMetric(backupT.Seconds()/n, "backup-s")
	b.ReportMetric(float64(docs)*n/restoreT.Seconds(), "restore-docs/s")
	b.ReportMetric(float64(bytes)*n/restoreT.Seconds()/(1<<20), "restore-MiB/s")
	b.ReportMetric(restoreT.Seconds()/n, "restore-s")
}
