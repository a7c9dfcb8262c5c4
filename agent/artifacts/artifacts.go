// Package artifacts uploads the files a run produced to the private bucket and records
// their metadata (owner, conversation, run, filename, MIME type, size, sha256, bucket,
// file). Each file's id is derived from (run, path), so a retried upload finds what an
// earlier attempt stored instead of storing it twice. Uploads over 5 MiB are chunked by
// the SDK. Every stored file is verified by a digest we compute ourselves: the stored bytes
// are read back and their size and sha256 compared with the local file's (the sha256 is
// kept in the record's checksum). Appwrite's `signature` is never trusted: it is an MD5 of
// the content only on a local storage device; on an S3-type device a chunked file's
// signature is the object's multipart ETag.
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
	"time"

	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/role"
	"github.com/appwrite/sdk-for-go/storage"

	"privateassistant/schema"
)

// Uploader stores run outputs.
type Uploader struct {
	Store    *schema.Store
	Bucket   string        // default schema.BucketArtifacts
	MaxFiles int           // per run (default 50)
	Attempts int           // per file (default 4)
	Backoff  time.Duration // first retry delay, doubled each time (default 500 ms)
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
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return filepath.SkipAll
			}
			return err
		}
		if d.Type().IsRegular() {
			rel, _ := filepath.Rel(dir, p)
			rels = append(rels, filepath.ToSlash(rel))
		}
		return nil // symlinks and devices are never followed
	})
	if err != nil {
		return nil, nil, err
	}
	sort.Strings(rels)
	max := u.MaxFiles
	if max <= 0 {
		max = 50
	}
	var out []schema.Artifact
	var skipped []Skipped
	var firstErr error
	for i, rel := range rels {
		if i >= max {
			skipped = append(skipped, Skipped{rel, fmt.Sprintf("more than %d files", max)})
			continue
		}
		a, skip, err := u.uploadWithRetry(ctx, filepath.Join(dir, filepath.FromSlash(rel)), rel, run)
		switch {
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
	return out, skipped, firstErr
}

func (u *Uploader) uploadWithRetry(ctx context.Context, path, rel string, run *schema.Run) (*schema.Artifact, string, error) {
	attempts, delay := u.Attempts, u.Backoff
	if attempts <= 0 {
		attempts = 4
	}
	if delay <= 0 {
		delay = 500 * time.Millisecond
	}
	var err error
	for i := 0; i < attempts; i++ {
		var a *schema.Artifact
		var skip string
		a, skip, err = u.upload(ctx, path, rel, run)
		if err == nil {
			return a, skip, nil
		}
		if u.Log != nil {
			u.Log.Warn("artifact upload failed", "run", run.ID, "file", rel, "attempt", i+1, "err", err)
		}
		select {
		case <-ctx.Done():
			return nil, "", ctx.Err()
		case <-time.After(delay):
		}
		delay *= 2
	}
	return nil, "", err
}

func digest(path string) (sha string, size int64, mt string, err error) {
	f, err := os.Open(path)
	if err != nil {
		return "", 0, "", err
	}
	defer f.Close()
	hs := sha256.New()
	head := make([]byte, 512)
	n, _ := io.ReadFull(f, head)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return "", 0, "", err
	}
	size, err = io.Copy(hs, f)
	if err != nil {
		return "", 0, "", err
	}
	mt = mime.TypeByExtension(filepath.Ext(path))
	if mt == "" {
		mt = http.DetectContentType(head[:n])
	}
	if i := strings.Index(mt, ";"); i > 0 {
		mt = mt[:i]
	}
	return hex.EncodeToString(hs.Sum(nil)), size, mt, nil
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

func (u *Uploader) upload(ctx context.Context, path, rel string, run *schema.Run) (*schema.Artifact, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	sha, size, mt, err := digest(path)
	if err != nil {
		return nil, "", err
	}
	if size > schema.MaxArtifactBytes {
		return nil, fmt.Sprintf("larger than %d bytes", schema.MaxArtifactBytes), nil
	}
	if size == 0 {
		return nil, "empty file", nil
	}
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
