package backup

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/client"
	"github.com/appwrite/sdk-for-go/databases"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/storage"

	"privateassistant/schema"
)

// Sentinel errors a caller may classify.
var (
	// ErrNewerFormat: the archive was written by a newer build.
	ErrNewerFormat = errors.New("backup: archive format is newer than this build")
	// ErrChecksum: an archive member or a restored record differs from the manifest.
	ErrChecksum = errors.New("backup: checksum mismatch")
	// ErrSchema: the archive holds collections or attributes the target's model lacks.
	ErrSchema = errors.New("backup: the archive's schema is newer than the target's")
	// ErrNotEmpty: the target holds a record the archive has with other content.
	ErrNotEmpty = errors.New("backup: the target project is not empty")
	// ErrNotProvisioned: the target lacks the database, a collection or the bucket.
	ErrNotProvisioned = errors.New("backup: the target project is not provisioned")
	// ErrOtherBackup: a partial backup of another project is in the way.
	ErrOtherBackup = errors.New("backup: a partial backup of another project is in the way")
)

// Options are what Backup and Restore need.
type Options struct {
	// Client is an SDK client with the endpoint, the project and a server key
	// (documents.read and files.read to back up; documents.write and files.write too to
	// restore).
	Client client.Client
	Model  schema.Model
	// KeyRef is where the key came from (env:NAME or file:/path), recorded in the
	// manifest. Never the key.
	KeyRef string
	// AppVersion is the build's version, recorded in the manifest.
	AppVersion string
	// Progress receives one line per step (nil: quiet).
	Progress io.Writer
	// PageSize is the documents or files per list call (default 100).
	PageSize int
	// Workers is how many records or files a restore writes at once (default 8).
	Workers int
	// Now is the clock (default time.Now).
	Now func() time.Time
}

func (o *Options) defaults() {
	if o.PageSize <= 0 {
		o.PageSize = 100
	}
	if o.Workers <= 0 {
		o.Workers = 8
	}
	if o.Now == nil {
		o.Now = time.Now
	}
}

func (o *Options) say(format string, args ...any) {
	if o.Progress != nil {
		fmt.Fprintf(o.Progress, format+"\n", args...)
	}
}

// progress is a partial backup's journal (state.json in the staging directory).
// A journal an older build left (format 1: one bucket, its files at the staging root)
// resumes its documents; its files are listed again, per bucket.
type progress struct {
	Endpoint  string                  `json:"endpoint"`
	Project   string                  `json:"project"`
	Database  string                  `json:"database"`
	StartedAt string                  `json:"startedAt"`
	Docs      map[string]*cursorState `json:"documents"`
	// Buckets are each bucket's listing (format 2 journals).
	Buckets map[string]*cursorState `json:"buckets"`
}

// cursorState: the lines up to Offset of a listing's file are complete pages that end at
// the record Cursor.
type cursorState struct {
	Cursor string `json:"cursor"`
	Offset int64  `json:"offset"`
	Count  int    `json:"count"`
	Bytes  int64  `json:"bytes"`
	Done   bool   `json:"done"`
}

// Result is what a backup wrote.
type Result struct {
	Path     string
	Manifest *Manifest
	Resumed  bool
	Took     time.Duration
}

// Backup writes one archive of the project's data to path: every document of every
// collection of the model (with its permissions and timestamps) and every complete file
// of every bucket of the model (with its id and permissions), plus a manifest. It works in path+".partial" (owner-only) and journals
// each page there, so a backup that is interrupted resumes where it stopped when run
// again with the same path; the archive appears, owner-only (0600), only when complete.
func Backup(ctx context.Context, o Options, path string) (*Result, error) {
	o.defaults()
	start := time.Now()
	staging := path + ".partial"
	if err := os.MkdirAll(filepath.Join(staging, blobsDir), 0o700); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	if err := os.MkdirAll(filepath.Join(staging, docsDir), 0o700); err != nil {
		return nil, fmt.Errorf("backup: %w", err)
	}
	st, resumed, err := loadProgress(staging, o)
	if err != nil {
		return nil, err
	}
	if resumed {
		o.say("backup: resuming the partial backup in %s", staging)
	}
	db := databases.New(o.Client)
	for _, c := range o.Model.Collections {
		cs := st.Docs[c.ID]
		if cs == nil {
			cs = &cursorState{}
			st.Docs[c.ID] = cs
		}
		if err := backupCollection(ctx, o, db, staging, st, c.ID, cs); err != nil {
			return nil, err
		}
	}
	st0 := storage.New(o.Client)
	for _, b := range o.Model.Buckets {
		cs := st.Buckets[b.ID]
		if cs == nil {
			cs = &cursorState{}
			st.Buckets[b.ID] = cs
		}
		if err := backupFiles(ctx, o, st0, staging, st, b.ID, cs); err != nil {
			return nil, err
		}
	}
	m, err := finish(o, staging, st, path)
	if err != nil {
		return nil, err
	}
	if err := os.RemoveAll(staging); err != nil {
		return nil, fmt.Errorf("backup: remove %s: %w", staging, err)
	}
	o.say("backup: wrote %s (%d documents, %d files, %d file bytes) in %s", path, total(m.Counts.Documents), m.Counts.Files,
		m.Counts.FileBytes, time.Since(start).Round(time.Millisecond))
	return &Result{Path: path, Manifest: m, Resumed: resumed, Took: time.Since(start)}, nil
}

func total(m map[string]int) int {
	n := 0
	for _, v := range m {
		n += v
	}
	return n
}

func loadProgress(staging string, o Options) (*progress, bool, error) {
	want := progress{Endpoint: redactURL(o.Client.Endpoint), Project: projectOf(o.Client), Database: o.Model.DatabaseID}
	b, err := os.ReadFile(filepath.Join(staging, "state.json"))
	if errors.Is(err, os.ErrNotExist) {
		want.StartedAt = o.Now().UTC().Format(time.RFC3339Nano)
		want.Docs = map[string]*cursorState{}
		want.Buckets = map[string]*cursorState{}
		return &want, false, nil
	}
	if err != nil {
		return nil, false, fmt.Errorf("backup: %w", err)
	}
	var st progress
	if err := json.Unmarshal(b, &st); err != nil {
		return nil, false, fmt.Errorf("backup: read %s/state.json: %w", staging, err)
	}
	if st.Project != want.Project || st.Database != want.Database || st.Endpoint != want.Endpoint {
		return nil, false, fmt.Errorf("%w: %s holds project %s database %s at %s (remove it to start over)", ErrOtherBackup, staging, st.Project, st.Database, st.Endpoint)
	}
	if st.Docs == nil {
		st.Docs = map[string]*cursorState{}
	}
	if st.Buckets == nil {
		st.Buckets = map[string]*cursorState{}
	}
	return &st, true, nil
}

// redactURL drops any user information from an endpoint (the manifest holds no secret).
func redactURL(s string) string {
	u, err := url.Parse(s)
	if err != nil || u.User == nil {
		return s
	}
	u.User = nil
	return u.String()
}

func projectOf(c client.Client) string { return c.Headers["X-Appwrite-Project"] }

func saveProgress(staging string, st *progress) error {
	b, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(filepath.Join(staging, "state.json"), b)
}

func writeFileAtomic(path string, b []byte) error {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o600)
	if err != nil {
		return err
	}
	if _, err := f.Write(b); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// openJournal opens a listing's lines file and cuts it back to the last complete page.
func openJournal(path string, cs *cursorState) (*os.File, error) {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := f.Truncate(cs.Offset); err != nil {
		f.Close()
		return nil, err
	}
	if _, err := f.Seek(cs.Offset, io.SeekStart); err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// restartJournal empties a listing's lines file.
func restartJournal(f *os.File) error {
	if err := f.Truncate(0); err != nil {
		return err
	}
	_, err := f.Seek(0, io.SeekStart)
	return err
}

// systemFields are the document fields a backup drops: they name where a document lives
// or are assigned by the server ($sequence), and a restore cannot set them.
var systemFields = []string{"$sequence", "$collectionId", "$databaseId", "$tableId"}

// canonical turns one document as Appwrite returned it into the archive's form: the
// document's own fields, $id, $permissions, $createdAt and $updatedAt, keys sorted,
// numbers exactly as served.
func canonical(raw json.RawMessage) (map[string]any, []byte, error) {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	m := map[string]any{}
	if err := dec.Decode(&m); err != nil {
		return nil, nil, err
	}
	for _, k := range systemFields {
		delete(m, k)
	}
	b, err := json.Marshal(m)
	return m, b, err
}

func backupCollection(ctx context.Context, o Options, db *databases.Databases, staging string, st *progress, coll string, cs *cursorState) error {
	if cs.Done {
		return nil
	}
	f, err := openJournal(filepath.Join(staging, docsDir, coll+".jsonl"), cs)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	var last time.Time // the first page is reported, then one line a second
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		qs := []string{query.Limit(o.PageSize)}
		if cs.Cursor != "" {
			qs = append(qs, query.CursorAfter(cs.Cursor))
		}
		list, err := db.ListDocuments(o.Model.DatabaseID, coll, db.WithListDocumentsQueries(qs), db.WithListDocumentsTotal(false))
		if cs.Cursor != "" && isType(err, "general_cursor_not_found") {
			// The record the journal ends at was deleted meanwhile: list this collection again.
			o.say("backup: %s: the cursor %s is gone; listing %s again", coll, cs.Cursor, coll)
			*cs = cursorState{}
			if err := restartJournal(f); err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("backup: list %s after %q: %w", coll, cs.Cursor, err)
		}
		var page struct {
			Documents []json.RawMessage `json:"documents"`
		}
		if err := list.Decode(&page); err != nil {
			return fmt.Errorf("backup: decode %s: %w", coll, err)
		}
		var buf bytes.Buffer
		lastID := cs.Cursor
		for _, raw := range page.Documents {
			m, line, err := canonical(raw)
			if err != nil {
				return fmt.Errorf("backup: decode %s: %w", coll, err)
			}
			lastID, _ = m["$id"].(string)
			buf.Write(line)
			buf.WriteByte('\n')
		}
		if _, err := f.Write(buf.Bytes()); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		cs.Offset += int64(buf.Len())
		cs.Count += len(page.Documents)
		cs.Cursor = lastID
		cs.Done = len(page.Documents) < o.PageSize
		if err := saveProgress(staging, st); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		if cs.Done || time.Since(last) > time.Second {
			o.say("backup: %s: %d documents", coll, cs.Count)
			last = time.Now()
		}
		if cs.Done {
			return nil
		}
	}
}

// fileLine is one file's line in its bucket's files.jsonl.
type fileLine struct {
	ID          string   `json:"$id"`
	Name        string   `json:"name"`
	MimeType    string   `json:"mimeType"`
	Permissions []string `json:"$permissions"`
	CreatedAt   string   `json:"$createdAt"`
	Size        int64    `json:"size"`
	SHA256      string   `json:"sha256"`
}

func backupFiles(ctx context.Context, o Options, st0 *storage.Storage, staging string, st *progress, bucket string, cs *cursorState) error {
	if cs.Done {
		return nil
	}
	if !safeName(bucketDir(bucket)+filesIndex) || strings.Contains(bucket, "/") {
		return fmt.Errorf("backup: bucket id %q cannot be an archive member", bucket)
	}
	dir := filepath.Join(staging, filepath.FromSlash(bucketDir(bucket)))
	if err := os.MkdirAll(filepath.Join(dir, blobsDir), 0o700); err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	f, err := openJournal(filepath.Join(dir, filesIndex), cs)
	if err != nil {
		return fmt.Errorf("backup: %w", err)
	}
	defer f.Close()
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		qs := []string{query.Limit(o.PageSize)}
		if cs.Cursor != "" {
			qs = append(qs, query.CursorAfter(cs.Cursor))
		}
		list, err := st0.ListFiles(bucket, st0.WithListFilesQueries(qs), st0.WithListFilesTotal(false))
		if cs.Cursor != "" && isType(err, "general_cursor_not_found") {
			// The file the journal ends at was deleted meanwhile (an artifact replaced
			// after a checksum mismatch): list the bucket again.
			o.say("backup: bucket %s: the cursor %s is gone; listing the bucket again", bucket, cs.Cursor)
			*cs = cursorState{}
			if err := restartJournal(f); err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			continue
		}
		if err != nil {
			return fmt.Errorf("backup: list bucket %s after %q: %w", bucket, cs.Cursor, err)
		}
		var buf bytes.Buffer
		var pageBytes int64
		for _, fm := range list.Files {
			if fm.ChunksUploaded < fm.ChunksTotal {
				o.say("backup: bucket %s: file %s: upload not complete, skipped", bucket, fm.Id)
				continue
			}
			if !safeName(blobsDir + fm.Id) {
				return fmt.Errorf("backup: file id %q cannot be an archive member", fm.Id)
			}
			data, err := st0.GetFileDownload(bucket, fm.Id)
			if err != nil {
				return fmt.Errorf("backup: download %s/%s: %w", bucket, fm.Id, err)
			}
			if len(*data) != fm.SizeOriginal {
				return fmt.Errorf("backup: download %s/%s: %d bytes, the file has %d", bucket, fm.Id, len(*data), fm.SizeOriginal)
			}
			if err := writeFileAtomic(filepath.Join(dir, blobsDir, fm.Id), *data); err != nil {
				return fmt.Errorf("backup: %w", err)
			}
			sum := sha256.Sum256(*data)
			line, err := json.Marshal(fileLine{ID: fm.Id, Name: fm.Name, MimeType: fm.MimeType, Permissions: nonNil(fm.Permissions),
				CreatedAt: fm.CreatedAt, Size: int64(len(*data)), SHA256: hex.EncodeToString(sum[:])})
			if err != nil {
				return err
			}
			buf.Write(line)
			buf.WriteByte('\n')
			pageBytes += int64(len(*data))
			cs.Count++
		}
		if _, err := f.Write(buf.Bytes()); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		if err := f.Sync(); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		cs.Offset += int64(buf.Len())
		cs.Bytes += pageBytes
		if n := len(list.Files); n > 0 {
			cs.Cursor = list.Files[n-1].Id
		}
		cs.Done = len(list.Files) < o.PageSize
		if err := saveProgress(staging, st); err != nil {
			return fmt.Errorf("backup: %w", err)
		}
		o.say("backup: bucket %s: %d files (%d bytes)", bucket, cs.Count, cs.Bytes)
		if cs.Done {
			return nil
		}
	}
}

func nonNil(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}
