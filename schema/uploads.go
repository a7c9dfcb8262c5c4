package schema

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/storage"
)

// Files attached to messages (issue 17): a member uploads them with their own Appwrite
// session straight into BucketUploads, readable by themselves only; admission accepts a
// message's attachments only when each file is the caller's, complete, and within these
// limits; the agent copies them into the run's working folder before the run starts.
const (
	// MaxUploadBytes is the uploads bucket's file size limit (10 MiB).
	MaxUploadBytes = 10 << 20
	// MaxAttachments is how many files one message may carry.
	MaxAttachments = 5
	// MaxAttachmentBytes is the total size of one message's attachments (25 MiB).
	MaxAttachmentBytes = 25 << 20
)

// UploadLabels are the Appwrite labels whose holders may create files in BucketUploads
// (the defaults of PA_MEMBER_LABEL and PA_ADMIN_LABEL): an account from Appwrite's public
// sign-up has no label and cannot upload. A deployment with other labels edits them here.
var UploadLabels = []string{"member", "admin"}

// UploadExtensions are the file types a message may carry: text, data, code, documents
// and images a model's file tools can read (the bucket refuses others at upload).
var UploadExtensions = []string{
	"txt", "md", "markdown", "csv", "tsv", "json", "jsonl", "yaml", "yml", "toml", "xml", "html", "htm", "log",
	"py", "go", "js", "ts", "java", "c", "h", "cpp", "rs", "rb", "sh", "sql", "css",
	"pdf", "png", "jpg", "jpeg", "gif", "webp",
}

func uploadsBucket() Bucket {
	perms := make([]string, 0, len(UploadLabels))
	for _, l := range UploadLabels {
		// create only: reading, changing and deleting a file is granted per file, to its
		// uploader alone (read("user:<id>"), set by the web client; admission checks it).
		perms = append(perms, fmt.Sprintf(`create("label:%s")`, l))
	}
	return Bucket{
		ID: BucketUploads, Name: "Uploads", Permissions: perms, FileSecurity: true, Enabled: true,
		MaximumFileSize: MaxUploadBytes, Compression: "none", Encryption: true, Antivirus: true,
		AllowedFileExtensions: slices.Clone(UploadExtensions),
	}
}

// UploadReadPermission is the permission that makes an attached file its owner's: read by
// them. Only they can have granted it (Appwrite lets a client grant only its own roles).
func UploadReadPermission(owner string) string { return fmt.Sprintf(`read("user:%s")`, owner) }

// UploadPermissions are what the web client gives a file it uploads: its owner may read it
// and delete it (a file removed from the composer is deleted at once); nobody else anything.
func UploadPermissions(owner string) []string {
	return []string{UploadReadPermission(owner), fmt.Sprintf(`delete("user:%s")`, owner)}
}

// UploadExtensionAllowed reports whether a file name's extension is one of UploadExtensions.
func UploadExtensionAllowed(name string) bool {
	ext := strings.TrimPrefix(strings.ToLower(path.Ext(name)), ".")
	return ext != "" && slices.Contains(UploadExtensions, ext)
}

// Upload is what the server knows of an attached file.
type Upload struct {
	ID, Name, MimeType string
	Size               int64
	// Complete: every chunk arrived (a chunked upload may stop half way).
	Complete bool
	// Private: the file grants nothing beyond UploadPermissions(owner) (a file its owner
	// shared more widely is refused, not silently narrowed).
	Private bool
}

// Upload returns file id of BucketUploads as owner may attach it. A file that does not
// name owner's read permission is ErrNotFound, exactly like a missing one: its existence
// is not the caller's to learn. Only the uploader can grant read("user:<owner>") (Appwrite
// lets a client grant only roles it holds), so that permission proves the uploader.
func (s *Store) Upload(ctx context.Context, owner, id string) (Upload, error) {
	if err := ctx.Err(); err != nil {
		return Upload{}, err
	}
	if owner == "" || id == "" || len(id) > SizeID {
		return Upload{}, ErrNotFound
	}
	f, err := storage.New(s.client).GetFile(BucketUploads, id)
	if err != nil {
		return Upload{}, mapError(err)
	}
	mine := UploadReadPermission(owner)
	if !slices.Contains(f.Permissions, mine) {
		return Upload{}, ErrNotFound
	}
	return Upload{ID: f.Id, Name: f.Name, MimeType: f.MimeType, Size: int64(f.SizeOriginal),
		Complete: f.ChunksUploaded >= f.ChunksTotal, Private: onlyOwners(f.Permissions, owner)}, nil
}

func onlyOwners(perms []string, owner string) bool {
	allowed := UploadPermissions(owner)
	for _, p := range perms {
		if !slices.Contains(allowed, p) {
			return false
		}
	}
	return true
}

// UploadBytes downloads an attached file whole (at most MaxUploadBytes) with the store's key.
func (s *Store) UploadBytes(ctx context.Context, id string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := storage.New(s.client).GetFileDownload(BucketUploads, id)
	if err != nil {
		return nil, fmt.Errorf("download upload %s: %w", id, mapError(err))
	}
	return *b, nil
}

// CreateUpload stores content as file id of BucketUploads readable by owner only, as the
// web client uploads it with the owner's session (for tools and tests that hold a key).
func (s *Store) CreateUpload(ctx context.Context, id, owner, name string, content []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	dir, err := os.MkdirTemp("", "pa-upload-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, "content") // the SDK uploads from a path
	if err := os.WriteFile(p, content, 0o600); err != nil {
		return err
	}
	st := storage.New(s.client)
	_, err = st.CreateFile(BucketUploads, id, file.NewInputFile(p, name),
		st.WithCreateFilePermissions(UploadPermissions(owner)))
	return mapError(err)
}

// UploadFile is one file of BucketUploads as a sweep sees it.
type UploadFile struct {
	ID        string
	Owner     string // the user its read permission names ("" when none does)
	CreatedAt time.Time
}

// UploadsCreatedBefore returns the files of BucketUploads created before t, oldest first,
// after the file id cursor ("" from the start), at most limit (default 100), and the
// cursor of the next page ("" when there is none). Files are listed in creation order
// (Appwrite's $sequence), so the first one at or after t ends the listing.
func (s *Store) UploadsCreatedBefore(ctx context.Context, t time.Time, cursor string, limit int) ([]UploadFile, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	if limit <= 0 {
		limit = 100
	}
	st := storage.New(s.client)
	qs := []string{query.Limit(limit)}
	if cursor != "" {
		qs = append(qs, query.CursorAfter(cursor))
	}
	list, err := st.ListFiles(BucketUploads, st.WithListFilesQueries(qs), st.WithListFilesTotal(false))
	if err != nil {
		return nil, "", fmt.Errorf("list %s: %w", BucketUploads, mapError(err))
	}
	out := make([]UploadFile, 0, len(list.Files))
	for _, f := range list.Files {
		at, err := time.Parse(time.RFC3339Nano, f.CreatedAt)
		if err != nil {
			return nil, "", fmt.Errorf("file %s: $createdAt %q: %w", f.Id, f.CreatedAt, err)
		}
		if !at.Before(t) {
			return out, "", nil
		}
		out = append(out, UploadFile{ID: f.Id, Owner: uploadOwner(f.Permissions), CreatedAt: at})
	}
	if len(list.Files) < limit {
		return out, "", nil
	}
	return out, list.Files[len(list.Files)-1].Id, nil
}

// uploadOwner is the user a file's read permission names ("" when none does).
func uploadOwner(perms []string) string {
	for _, p := range perms {
		if id, ok := strings.CutPrefix(p, `read("user:`); ok {
			if id, ok = strings.CutSuffix(id, `")`); ok {
				return id
			}
		}
	}
	return ""
}

// DeleteUpload deletes file id of BucketUploads; a file already gone is not an error.
func (s *Store) DeleteUpload(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if _, err := storage.New(s.client).DeleteFile(BucketUploads, id); err != nil && !errors.Is(mapError(err), ErrNotFound) {
		return fmt.Errorf("delete upload %s: %w", id, mapError(err))
	}
	return nil
}
