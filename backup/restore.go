package backup

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/appwrite/sdk-for-go/client"
	"github.com/appwrite/sdk-for-go/databases"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/storage"

	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// InterruptedReason is the errorSummary of a run a restore ends: it was live, not
// queued, when the backup was taken, so whatever it had started (a native run, tools) is
// not known to the restored project and it is never executed again.
const InterruptedReason = "interrupted by a restore from backup: it was %s when the backup was taken, so it is not run again (nothing it started is replayed); send the message again to redo it"

// Report is what a restore did.
type Report struct {
	Manifest *Manifest
	// Created and Present count, per collection ("files/<bucket id>" for a bucket), what
	// this run wrote and what a previous run had already restored.
	Created, Present map[string]int
	// Interrupted are the runs this restore ended (live and not queued in the archive).
	Interrupted []string
	// Cancelled are the queued runs whose cancel was requested: this restore settled them.
	Cancelled []string
	// Queued are the runs restored queued: the outbox gives each one task.
	Queued []string
	Took   time.Duration
}

// Restore writes an archive into a provisioned project that is empty or holds a
// partial restore of the same archive: first every file of every bucket it holds (each
// with its id and permissions; a format 1 archive holds the artifacts bucket only), then every collection (runs
// last, after their bindings), each record with its id, permissions and timestamps. A
// record that already exists must equal the archived one (a re-run completes a partial
// restore); anything else is ErrNotEmpty. Runs that were live but not queued are then
// ended interrupted through the run state machine (InterruptedReason), so they never run
// again; queued runs stay queued and the agent's outbox gives each one task (exactly one:
// TaskID is the run id). Finally every record and file is read back and compared with
// the archive (Verify). Stop the agents before restoring.
func Restore(ctx context.Context, o Options, path string) (*Report, error) {
	o.defaults()
	start := time.Now()
	dir, err := os.MkdirTemp("", "pa-restore-")
	if err != nil {
		return nil, fmt.Errorf("restore: %w", err)
	}
	defer os.RemoveAll(dir)
	m, err := extract(path, dir)
	if err != nil {
		return nil, err
	}
	o.say("restore: %s: format %d, application %s, schema %s, %d documents, %d files (checksums verified)", path, m.Format,
		m.ApplicationVersion, m.Schema.Version, total(m.Counts.Documents), m.Counts.Files)
	if missing := Schema(o.Model).Covers(m.Schema); len(missing) > 0 {
		return nil, fmt.Errorf("%w: it has %s; upgrade this build (and make appwrite-apply) first", ErrSchema, strings.Join(missing, ", "))
	}
	r := &restorer{o: o, dir: dir, m: m, db: databases.New(o.Client), st: storage.New(o.Client),
		rep: &Report{Manifest: m, Created: map[string]int{}, Present: map[string]int{}}}
	if err := r.checkProvisioned(); err != nil {
		return nil, err
	}
	if err := r.files(ctx); err != nil {
		return nil, err
	}
	order := slices.Clone(o.Model.Collections)
	sort.SliceStable(order, func(i, j int) bool { return order[j].ID == schema.CollRuns && order[i].ID != schema.CollRuns })
	for _, c := range order {
		if _, ok := m.Counts.Documents[c.ID]; !ok {
			continue // an older archive without this collection
		}
		if err := r.collection(ctx, c.ID); err != nil {
			return nil, err
		}
	}
	if err := r.interrupt(ctx); err != nil {
		return nil, err
	}
	if err := Verify(ctx, o, dir, m); err != nil {
		return nil, err
	}
	r.rep.Took = time.Since(start)
	o.say("restore: verified %d documents and %d files; %d runs interrupted, %d queued for the outbox, in %s",
		total(m.Counts.Documents), m.Counts.Files, len(r.rep.Interrupted), len(r.rep.Queued), r.rep.Took.Round(time.Millisecond))
	return r.rep, nil
}

type restorer struct {
	o   Options
	dir string
	m   *Manifest
	db  *databases.Databases
	st  *storage.Storage
	mu  sync.Mutex
	rep *Report
}

func (r *restorer) count(coll string, created bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if created {
		r.rep.Created[coll]++
	} else {
		r.rep.Present[coll]++
	}
}

func (r *restorer) checkProvisioned() error {
	for coll := range r.m.Counts.Documents {
		if _, err := r.db.ListDocuments(r.o.Model.DatabaseID, coll, r.db.WithListDocumentsQueries([]string{query.Limit(1)}),
			r.db.WithListDocumentsTotal(false)); err != nil {
			if isType(err, "database_not_found", "collection_not_found") {
				return fmt.Errorf("%w: %s/%s: %v (run make appwrite-apply)", ErrNotProvisioned, r.o.Model.DatabaseID, coll, err)
			}
			return fmt.Errorf("restore: %w", err)
		}
	}
	for _, part := range r.m.parts() {
		if _, err := r.st.ListFiles(part.ID, r.st.WithListFilesQueries([]string{query.Limit(1)}), r.st.WithListFilesTotal(false)); err != nil {
			if isType(err, "storage_bucket_not_found") {
				return fmt.Errorf("%w: bucket %s (run make appwrite-apply)", ErrNotProvisioned, part.ID)
			}
			return fmt.Errorf("restore: %w", err)
		}
	}
	return nil
}

// parallel runs fn for each item on o.Workers goroutines; the first error stops the rest.
func parallel[T any](ctx context.Context, workers int, items []T, fn func(T) error) error {
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	ch := make(chan T)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for it := range ch {
				if err := fn(it); err != nil {
					cancel(err)
				}
			}
		})
	}
feed:
	for _, it := range items {
		select {
		case ch <- it:
		case <-ctx.Done():
			break feed
		}
	}
	close(ch)
	wg.Wait()
	return context.Cause(ctx)
}

// readFiles reads a bucket's archived file lines.
func readFiles(dir string, part bucketPart) ([]fileLine, error) {
	var lines []fileLine
	err := eachLine(filepath.Join(dir, filepath.FromSlash(part.Index)), func(b []byte) error {
		var fl fileLine
		if err := json.Unmarshal(b, &fl); err != nil {
			return err
		}
		if !safeName(part.Blobs + fl.ID) {
			return fmt.Errorf("file id %q cannot be an archive member", fl.ID)
		}
		lines = append(lines, fl)
		return nil
	})
	return lines, err
}

// files restores every bucket the archive holds.
func (r *restorer) files(ctx context.Context) error {
	for _, part := range r.m.parts() {
		if err := r.bucketFiles(ctx, part); err != nil {
			return err
		}
	}
	return nil
}

func (r *restorer) bucketFiles(ctx context.Context, part bucketPart) error {
	lines, err := readFiles(r.dir, part)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	var done atomic.Int64
	bucket := part.ID
	err = parallel(ctx, r.o.Workers, lines, func(fl fileLine) error {
		// GetFile first: the SDK cannot resume onto an existing id (its chunked upload
		// panics reading the existing file), so a file a previous run left incomplete is
		// removed and uploaded again.
		existing, gerr := r.st.GetFile(bucket, fl.ID)
		switch {
		case gerr == nil && existing.ChunksUploaded >= existing.ChunksTotal:
			// A previous run restored it: it must be the same bytes and permissions.
			if err := checkFile(r.st, bucket, fl); err != nil {
				return err
			}
			r.count("files/"+bucket, false)
		case gerr == nil || isType(gerr, "storage_file_not_found"):
			if gerr == nil {
				if _, err := r.st.DeleteFile(bucket, fl.ID); err != nil {
					return fmt.Errorf("restore: remove the incomplete file %s/%s: %w", bucket, fl.ID, err)
				}
			}
			p := filepath.Join(r.dir, filepath.FromSlash(part.Blobs+fl.ID))
			if _, err := r.st.CreateFile(bucket, fl.ID, file.NewInputFile(p, fl.Name), r.st.WithCreateFilePermissions(nonNil(fl.Permissions))); err != nil {
				return fmt.Errorf("restore: file %s/%s: %w", bucket, fl.ID, err)
			}
			r.count("files/"+bucket, true)
		default:
			return fmt.Errorf("restore: file %s/%s: %w", bucket, fl.ID, gerr)
		}
		if n := done.Add(1); n%10 == 0 || int(n) == len(lines) {
			r.o.say("restore: bucket %s: %d/%d files", bucket, n, len(lines))
		}
		return nil
	})
	if err == nil && len(lines) == 0 {
		r.o.say("restore: bucket %s: 0 files", bucket)
	}
	return err
}

// checkFile compares a file in the bucket with its archived line.
func checkFile(st *storage.Storage, bucket string, fl fileLine) error {
	data, err := st.GetFileDownload(bucket, fl.ID)
	if err != nil {
		return fmt.Errorf("restore: read back file %s/%s: %w", bucket, fl.ID, err)
	}
	sum := sha256.Sum256(*data)
	if int64(len(*data)) != fl.Size || hex.EncodeToString(sum[:]) != fl.SHA256 {
		return fmt.Errorf("%w: file %s/%s differs from the archive (%d bytes, want %d)", ErrNotEmpty, bucket, fl.ID, len(*data), fl.Size)
	}
	f, err := st.GetFile(bucket, fl.ID)
	if err != nil {
		return fmt.Errorf("restore: read back file %s/%s: %w", bucket, fl.ID, err)
	}
	if !sameSet(f.Permissions, fl.Permissions) {
		return fmt.Errorf("%w: file %s/%s has permissions %v, the archive %v", ErrNotEmpty, bucket, fl.ID, f.Permissions, fl.Permissions)
	}
	return nil
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// archived reads a collection's archived documents.
func readDocs(dir, coll string) ([]map[string]any, error) {
	var out []map[string]any
	err := eachLine(filepath.Join(dir, docsDir+coll+".jsonl"), func(b []byte) error {
		m, _, err := canonical(b)
		if err != nil {
			return err
		}
		out = append(out, m)
		return nil
	})
	return out, err
}

func (r *restorer) collection(ctx context.Context, coll string) error {
	docs, err := readDocs(r.dir, coll)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	var done atomic.Int64
	last := time.Now()
	var lastMu sync.Mutex
	err = parallel(ctx, r.o.Workers, docs, func(d map[string]any) error {
		id, _ := d["$id"].(string)
		perms := toStrings(d["$permissions"])
		data := map[string]any{}
		for k, v := range d {
			if k != "$id" && k != "$permissions" {
				data[k] = v // with $createdAt and $updatedAt: a key may set them
			}
		}
		_, err := r.db.CreateDocument(r.o.Model.DatabaseID, coll, id, data, r.db.WithCreateDocumentPermissions(perms))
		switch {
		case err == nil:
			r.count(coll, true)
		case isType(err, "document_already_exists"):
			if err := r.same(coll, d); err != nil {
				return err
			}
			r.count(coll, false)
		default:
			return fmt.Errorf("restore: %s/%s: %w", coll, id, err)
		}
		n := done.Add(1)
		lastMu.Lock()
		if int(n) == len(docs) || time.Since(last) > time.Second {
			r.o.say("restore: %s: %d/%d documents", coll, n, len(docs))
			last = time.Now()
		}
		lastMu.Unlock()
		return nil
	})
	if err == nil && len(docs) == 0 {
		r.o.say("restore: %s: 0 documents", coll)
	}
	return err
}

// same checks that an existing document is the archived one (or, for a run this restore
// interrupts, that one as interrupted).
func (r *restorer) same(coll string, want map[string]any) error {
	id, _ := want["$id"].(string)
	doc, err := r.db.GetDocument(r.o.Model.DatabaseID, coll, id)
	if err != nil {
		// The id is free but a unique index refused the record: another record holds its key.
		return fmt.Errorf("%w: %s/%s: a record with another id holds its unique key (%v)", ErrNotEmpty, coll, id, err)
	}
	var raw json.RawMessage
	if err := doc.Decode(&raw); err != nil {
		return err
	}
	got, _, err := canonical(raw)
	if err != nil {
		return err
	}
	if !equalDoc(coll, want, got) {
		return fmt.Errorf("%w: %s/%s exists with other content than the archive's", ErrNotEmpty, coll, id)
	}
	return nil
}

// settledByRestore says how a restore settles an archived run: a live run that is not
// queued ends interrupted (whatever it started natively is unknown to the restored
// project); a queued run whose cancel was requested ends cancelled (the cancel path had
// not settled it yet, and the outbox never enqueues it). Any other run is left as it is.
func settledByRestore(d map[string]any) (from, to schema.RunStatus, ok bool) {
	s, _ := d["status"].(string)
	from = schema.RunStatus(s)
	switch {
	case from.Terminal():
		return from, "", false
	case from == schema.RunQueued:
		if c, _ := d["cancelRequested"].(bool); c {
			return from, schema.RunCancelled, true
		}
		return from, "", false
	}
	return from, schema.RunInterrupted, true
}

// toBeInterrupted reports whether an archived run is ended by a restore (interrupted or,
// for a queued run with a cancel requested, cancelled).
func toBeInterrupted(d map[string]any) (schema.RunStatus, bool) {
	from, _, ok := settledByRestore(d)
	return from, ok
}

// CancelledReason is the errorSummary of a queued run whose cancel was requested before
// the backup: the restore settles it cancelled.
const CancelledReason = "cancelled: its cancel was requested before the backup was taken"

// interruptedFields are what interrupting a run changes.
var interruptedFields = []string{"status", "errorSummary", "finishedAt", "version", "$updatedAt"}

// equalDoc compares an archived document with one read back; a run the restore
// interrupted may differ in the fields that did.
func equalDoc(coll string, want, got map[string]any) bool {
	if reflect.DeepEqual(want, got) {
		return true
	}
	if coll != schema.CollRuns {
		return false
	}
	if _, to, ok := settledByRestore(want); !ok || got["status"] != string(to) {
		return false
	}
	w, g := clone(want), clone(got)
	for _, k := range interruptedFields {
		delete(w, k)
		delete(g, k)
	}
	return reflect.DeepEqual(w, g)
}

func clone(m map[string]any) map[string]any {
	out := make(map[string]any, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func toStrings(v any) []string {
	out := []string{}
	xs, _ := v.([]any)
	for _, x := range xs {
		if s, ok := x.(string); ok {
			out = append(out, s)
		}
	}
	return out
}

// interrupt settles the archived runs a restore ends (settledByRestore): live and not
// queued → interrupted, queued with a cancel requested → cancelled, each through runstate
// (the one status writer: a version claim, then the record). Idempotent: a run already
// terminal is left alone.
func (r *restorer) interrupt(ctx context.Context) error {
	docs, err := readDocs(r.dir, schema.CollRuns)
	if err != nil {
		return fmt.Errorf("restore: %w", err)
	}
	store := schema.NewStore(r.o.Client, r.o.Model)
	runs := schema.For[schema.Run](store, schema.CollRuns)
	now := r.o.Now()
	for _, d := range docs {
		id, _ := d["$id"].(string)
		from, to, settle := settledByRestore(d)
		if !settle {
			if from == schema.RunQueued {
				r.rep.Queued = append(r.rep.Queued, id)
			}
			continue
		}
		cur, err := runs.Get(ctx, id)
		if err != nil {
			return fmt.Errorf("restore: interrupt %s: %w", id, err)
		}
		reason := fmt.Sprintf(InterruptedReason, from)
		if to == schema.RunCancelled {
			reason = CancelledReason
		}
		if !cur.Status.Terminal() {
			if err := runstate.Track(runs, cur, nil).Change(ctx, to, runstate.Patch{
				ErrorSummary: runstate.Set(reason), FinishedAt: runstate.Set(now)}); err != nil {
				return fmt.Errorf("restore: settle %s: %w", id, err)
			}
		}
		if to == schema.RunCancelled {
			r.rep.Cancelled = append(r.rep.Cancelled, id)
			continue
		}
		r.rep.Interrupted = append(r.rep.Interrupted, id)
	}
	if len(r.rep.Interrupted) > 0 {
		r.o.say("restore: %d runs that were in progress are now interrupted (never run again)", len(r.rep.Interrupted))
	}
	return nil
}

// isType reports whether err is an Appwrite error of one of the types.
func isType(err error, types ...string) bool {
	var ae *client.AppwriteError
	if !errors.As(err, &ae) {
		return false
	}
	var body struct {
		Type string `json:"type"`
	}
	_ = json.Unmarshal([]byte(ae.GetResponse()), &body)
	return slices.Contains(types, body.Type)
}
