// Package artifacts uploads the files a run produced to the private bucket and records
// their metadata (owner, conversation, run, filename, MIME type, size, sha256, bucket,
// file). Each file's id is derived from (run, path), so a retried upload finds what an
// earlier attempt stored instead of storing it twice. Uploads over 5 MiB are chunked by
// the SDK. Every stored file is verified by a digest we compute ourselves: the stored bytes
// are read back and their size and sha256 compared with the local file's (the sha256 is
// kept in the record's checksum). Appwrite's `signature` is never trusted: it is an MD5 of
// the content only on a local storage device; on an S3-type device a chunked file's
// signature is the object's multipart ETag.
//
// Only a run's own files leave the host. A file is opened inside the run's folder with
// os.Root (no path component may lead outside it) and O_NOFOLLOW (a symbolic link is
// never followed); anything but a regular file with exactly one link is skipped with the
// reason (a hard link may be a name for a file outside the folder, e.g. a secret; a FIFO
// or device is never read). The opened file is copied to a private temporary file while
// it is hashed, and that copy is what is uploaded, so a path swapped after the check
// uploads nothing else.
//
// A harness whose runs share one work folder (real Hermes's terminal.cwd) has no folder
// per run: UploadFiles takes the paths the run's own file tools named, refuses any that
// lead outside the folder (Resolve), and opens each the same way; nothing else in the
// folder is read.
package artifacts

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"mime"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/role"
	"github.com/appwrite/sdk-for-go/storage"

	"privateassistant/internal/backoff"
	"privateassistant/schema"
)

// Uploader stores run outputs.
type Uploader struct {
	Store    *schema.Store
	Bucket   string        // default schema.BucketArtifacts
	MaxFiles int           // per run (default 50)
	Attempts int           // per file (default 4)
	Backoff  time.Duration // first retry delay, doubled each time with jitter (default 500 ms)
	Log      *slog.Logger
}

// Skipped is a file that was not uploaded, with the reason (shown to the user).
type Skipped struct {
	Name, Reason string
}

func (u *Uploader) bucket() string {
	if u.Bucket == "" {
		return schema.BucketArtifacts
	}
	return u.Bucket
}

// FileID is the deterministic file (and artifact record) id of a run's output.
func FileID(runID, rel string) string {
	h := sha256.Sum256([]byte(runID + "\x00" + rel))
	return "f" + hex.EncodeToString(h[:])[:32]
}

// UploadDir uploads every regular file under dir. It returns what it stored and what it
// skipped; err is set when some upload kept failing (the others are still returned).
func (u *Uploader) UploadDir(ctx context.Context, dir string, run *schema.Run) ([]schema.Artifact, []Skipped, error) {
	var rels []string
	var skipped []Skipped
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return filepath.SkipAll
			}
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		rel = filepath.ToSlash(rel)
		switch t := d.Type(); {
		case t.IsRegular():
			rels = append(rels, rel)
		case t&fs.ModeSymlink != 0:
			skipped = append(skipped, Skipped{rel, reasonSymlink}) // never followed
		case !t.IsDir():
			skipped = append(skipped, Skipped{rel, reasonNotRegular})
		}
		return nil
	})
	if err != nil {
		return nil, nil, err
	}
	if len(rels) == 0 {
		return nil, skipped, nil
	}
	sort.Strings(rels)
	return u.uploadRels(ctx, dir, rels, run, skipped, false)
}

// uploadRels uploads the files rels names inside dir (opened as an os.Root: nothing outside
// it is reachable), at most MaxFiles of them, adding what it skips to skipped. With
// missingOK a file that is no longer there is skipped as such rather than failing.
func (u *Uploader) uploadRels(ctx context.Context, dir string, rels []string, run *schema.Run, skipped []Skipped, missingOK bool) ([]schema.Artifact, []Skipped, error) {
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, skipped, err
	}
	defer root.Close()
	return u.uploadRoot(ctx, root, rels, run, skipped, missingOK)
}

// uploadRoot is uploadRels inside root.
func (u *Uploader) uploadRoot(ctx context.Context, root *os.Root, rels []string, run *schema.Run, skipped []Skipped, missingOK bool) ([]schema.Artifact, []Skipped, error) {
	max := u.MaxFiles
	if max <= 0 {
		max = 50
	}
	var out []schema.Artifact
	var firstErr error
	report, _ := ctx.Value(progressKey{}).(func(done, total int))
	total := min(len(rels), max)
	for i, rel := range rels {
		if i >= max {
			skipped = append(skipped, Skipped{rel, fmt.Sprintf("more than %d files", max)})
			continue
		}
		if report != nil {
			report(i, total) // i of total handled: the card counts real files, never bytes as a percentage
		}
		a, skip, err := u.uploadWithRetry(ctx, root, rel, run)
		switch {
		case err != nil && missingOK && os.IsNotExist(err):
			skipped = append(skipped, Skipped{rel, "no longer there"})
		case err != nil:
			skipped = append(skipped, Skipped{rel, "upload failed"})
			if firstErr == nil {
				firstErr = err
			}
		case skip != "":
			skipped = append(skipped, Skipped{rel, skip})
		default:
			out = append(out, *a)
		}
	}
	if report != nil {
		report(total, total)
	}
	return out, skipped, firstErr
}

type progressKey struct{}

// WithProgress returns ctx carrying report: an upload through it calls report(done, total)
// before each file it uploads and once all are handled (issue 32 item 6: artifacts
// uploaded n of m).
func WithProgress(ctx context.Context, report func(done, total int)) context.Context {
	return context.WithValue(ctx, progressKey{}, report)
}

// Reasons a file is skipped.
const (
	reasonSymlink    = "a symbolic link (never followed)"
	reasonNotRegular = "not a regular file"
	reasonHardLink   = "a hard link (it may name a file outside the run's folder)"
)

// local is one file of the run, copied aside: what is uploaded.
type local struct {
	path string // the private copy
	sha  string
	size int64
	mime string
}

// snapshot opens rel inside root without following a symbolic link, refuses anything but
// a regular file with one link, and copies it (at most max bytes) to a private temporary
// file while hashing it. skip is the reason a file is not uploaded.
func snapshot(root *os.Root, rel string, max int64) (l *local, skip string, err error) {
	f, err := root.OpenFile(filepath.FromSlash(rel), os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if errors.Is(err, syscall.ELOOP) {
		return nil, reasonSymlink, nil
	}
	if err != nil {
		if strings.Contains(err.Error(), "escapes from parent") {
			return nil, reasonSymlink, nil
		}
		return nil, "", err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, "", err
	}
	if !fi.Mode().IsRegular() {
		return nil, reasonNotRegular, nil
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); !ok || st.Nlink != 1 {
		return nil, reasonHardLink, nil
	}
	if fi.Size() > max {
		return nil, fmt.Sprintf("larger than %d bytes", max), nil
	}
	tmp, err := os.CreateTemp("", "pa-artifact-*")
	if err != nil {
		return nil, "", err
	}
	keep := false
	defer func() {
		if !keep {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	hs := sha256.New()
	head := &headWriter{max: 512}
	n, err := io.Copy(io.MultiWriter(tmp, hs, head), io.LimitReader(f, max+1))
	if err != nil {
		return nil, "", err
	}
	if err := tmp.Close(); err != nil {
		return nil, "", err
	}
	if n > max {
		return nil, fmt.Sprintf("larger than %d bytes", max), nil
	}
	if n == 0 {
		return nil, "empty file", nil
	}
	mt := mime.TypeByExtension(filepath.Ext(rel))
	if mt == "" {
		mt = http.DetectContentType(head.b)
	}
	if i := strings.Index(mt, ";"); i > 0 {
		mt = mt[:i]
	}
	keep = true
	return &local{path: tmp.Name(), sha: hex.EncodeToString(hs.Sum(nil)), size: n, mime: mt}, "", nil
}

// headWriter keeps the first max bytes written (for content sniffing).
type headWriter struct {
	b   []byte
	max int
}

func (h *headWriter) Write(p []byte) (int, error) {
	if room := h.max - len(h.b); room > 0 {
		h.b = append(h.b, p[:min(room, len(p))]...)
	}
	return len(p), nil
}

func (u *Uploader) uploadWithRetry(ctx context.Context, root *os.Root, rel string, run *schema.Run) (*schema.Artifact, string, error) {
	l, skip, err := snapshot(root, rel, schema.MaxArtifactBytes)
	if err != nil || skip != "" {
		return nil, skip, err
	}
	defer os.Remove(l.path)
	attempts := u.Attempts
	if attempts <= 0 {
		attempts = 4
	}
	retry := backoff.Backoff{Min: u.Backoff, Max: time.Minute, Factor: 2, Jitter: 0.1}
	if retry.Min <= 0 {
		retry.Min = 500 * time.Millisecond
	}
	for i := 0; i < attempts; i++ {
		if i > 0 {
			if werr := retry.Wait(ctx); werr != nil {
				return nil, "", werr
			}
		}
		var a *schema.Artifact
		a, skip, err = u.upload(ctx, l, rel, run)
		if err == nil {
			return a, skip, nil
		}
		if u.Log != nil {
			u.Log.Warn("artifact upload failed", "run", run.ID, "file", rel, "attempt", i+1, "err", err)
		}
	}
	return nil, "", err
}

// errChecksum: the stored bytes are not the local file's.
var errChecksum = errors.New("checksum mismatch")

// verify reads the stored file back and compares its size and sha256 with ours.
func (u *Uploader) verify(st *storage.Storage, id, sha string, size int64) error {
	b, err := st.GetFileDownload(u.bucket(), id)
	if err != nil {
		return schema.MapError(err)
	}
	sum := sha256.Sum256(*b)
	if int64(len(*b)) != size || hex.EncodeToString(sum[:]) != sha {
		return errChecksum
	}
	return nil
}

func (u *Uploader) upload(ctx context.Context, l *local, rel string, run *schema.Run) (*schema.Artifact, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	sha, size, mt, path := l.sha, l.size, l.mime, l.path
	id := FileID(run.ID, rel)
	st := storage.New(u.Store.Client())
	existing, gerr := st.GetFile(u.bucket(), id)
	switch {
	case gerr == nil && existing.ChunksUploaded >= existing.ChunksTotal && int64(existing.SizeOriginal) == size &&
		u.verify(st, id, sha, size) == nil:
		// An earlier attempt stored it.
	case gerr == nil:
		// Incomplete or different: remove it (the SDK cannot resume onto an existing id).
		if _, err := st.DeleteFile(u.bucket(), id); err != nil {
			return nil, "", fmt.Errorf("replace %s: %w", rel, schema.MapError(err))
		}
		fallthrough
	case errors.Is(schema.MapError(gerr), schema.ErrNotFound):
		f, err := st.CreateFile(u.bucket(), id, file.NewInputFile(path, filepath.Base(rel)),
			st.WithCreateFilePermissions([]string{permission.Read(role.User(run.OwnerID, ""))}))
		if err != nil {
			return nil, "", fmt.Errorf("upload %s: %w", rel, schema.MapError(err))
		}
		err = errChecksum
		if int64(f.SizeOriginal) == size {
			err = u.verify(st, id, sha, size)
		}
		if errors.Is(err, errChecksum) {
			_, _ = st.DeleteFile(u.bucket(), id)
			return nil, "", fmt.Errorf("upload %s: %w", rel, err)
		}
		if err != nil {
			return nil, "", fmt.Errorf("verify %s: %w", rel, err)
		}
	default:
		return nil, "", fmt.Errorf("inspect %s: %w", rel, schema.MapError(gerr))
	}
	name := rel
	if len(name) > 255 {
		name = name[len(name)-255:]
	}
	rec := &schema.Artifact{OwnerID: run.OwnerID, ConversationID: run.ConversationID, RunID: run.ID, Filename: name,
		MimeType: mt, Size: size, Checksum: sha, BucketID: u.bucket(), FileID: id}
	arts := schema.For[schema.Artifact](u.Store, schema.CollArtifacts)
	got, err := arts.Create(ctx, id, run.OwnerID, rec)
	if errors.Is(err, schema.ErrConflict) {
		got, err = arts.Get(ctx, id)
	}
	if err != nil {
		return nil, "", fmt.Errorf("record %s: %w", rel, err)
	}
	return got, "", nil
}
