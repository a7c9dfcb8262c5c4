package schema

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"unicode/utf8"

	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/models"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/role"
	"github.com/appwrite/sdk-for-go/storage"
)

// Content larger than its field is never cut (issue 12, the implementation guide §2): a
// string attribute declared with Overflow holds at most Size characters, and a longer
// value goes whole to a private file in BucketArtifacts whose id the record keeps in the
// Overflow attribute (the attribute itself is then null). Every Get and List through a
// Table reads such a file back into the attribute, so the functions — and through them the
// web — the agent and a restore always see the whole content; nothing else needs to know.
//
// The file id is derived from the collection, the record id and the attribute
// (OverflowFileID), so a retried create writes the same file: a file that already exists
// is taken as this write's own (the record create that follows decides, as before, whether
// the record is new). The file is readable by the record's owner only (user-visible
// collections) or by nobody but server keys (server-only ones). Only Create overflows: an
// Update with a value beyond the declared size is refused (no record updates one of these
// fields today).
//
// Appwrite 1.9.6 checks a string attribute's size in characters (the Text validator,
// mb_strlen) on MongoDB and MariaDB alike; validate checks the same before the request.

// OverflowFileID is the id of the file that holds attribute attr of record id in
// collection coll when the value is larger than the attribute: deterministic and
// lower-case (ids are case-insensitive on every engine).
func OverflowFileID(coll, id, attr string) string {
	h := sha256.Sum256([]byte(coll + "/" + strings.ToLower(id) + "/" + attr))
	return "o" + hex.EncodeToString(h[:])[:35]
}

// overflow moves every oversized overflowable value of data to its file.
func (t Table[T]) overflow(ctx context.Context, id, owner string, data map[string]any) error {
	for _, a := range t.coll.Attributes {
		if a.Overflow == "" {
			continue
		}
		s, ok := data[a.Key].(string)
		if !ok || utf8.RuneCountInString(s) <= a.Size {
			continue
		}
		fid := OverflowFileID(t.coll.ID, id, a.Key)
		if err := t.s.putFile(ctx, fid, owner, t.coll.UserVisible, a.Key, []byte(s)); err != nil {
			return fmt.Errorf("create %s/%s: %s: %w", t.coll.ID, id, a.Key, err)
		}
		data[a.Key] = nil
		data[a.Overflow] = fid
	}
	return nil
}

// putFile stores content as file fid (private: the owner's read, or none).
func (s *Store) putFile(ctx context.Context, fid, owner string, userVisible bool, name string, content []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	st := storage.New(s.client)
	if _, err := st.GetFile(BucketArtifacts, fid); err == nil {
		return nil // a retry: the file is already there
	} else if !errors.Is(mapError(err), ErrNotFound) {
		return mapError(err)
	}
	perms := []string{}
	if userVisible {
		if owner == "" {
			return errors.New("a user-visible record needs an owner")
		}
		perms = []string{permission.Read(role.User(owner, ""))}
	}
	// The SDK uploads from a path (in chunks beyond its chunk size).
	dir, err := os.MkdirTemp("", "pa-overflow-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	p := filepath.Join(dir, name+".txt")
	if err := os.WriteFile(p, content, 0o600); err != nil {
		return err
	}
	_, err = st.CreateFile(BucketArtifacts, fid, file.NewInputFile(p, name+".txt"), st.WithCreateFilePermissions(perms))
	if err != nil && errors.Is(mapError(err), ErrConflict) {
		return nil // a concurrent retry stored it
	}
	return mapError(err)
}

func (s *Store) getFile(ctx context.Context, fid string) ([]byte, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b, err := storage.New(s.client).GetFileDownload(BucketArtifacts, fid)
	if err != nil {
		return nil, fmt.Errorf("read overflow file %s: %w", fid, mapError(err))
	}
	return *b, nil
}

func (t Table[T]) overflows() bool {
	for _, a := range t.coll.Attributes {
		if a.Overflow != "" {
			return true
		}
	}
	return false
}

// hydrate reads back every overflowed value of one document (as a JSON object).
func (t Table[T]) hydrate(ctx context.Context, m map[string]any) error {
	for _, a := range t.coll.Attributes {
		if a.Overflow == "" {
			continue
		}
		fid, _ := m[a.Overflow].(string)
		if fid == "" {
			continue
		}
		if v, _ := m[a.Key].(string); v != "" {
			continue
		}
		b, err := t.s.getFile(ctx, fid)
		if err != nil {
			return err
		}
		m[a.Key] = string(b)
	}
	return nil
}

// decodeWhole decodes a document into T with its overflowed values read back.
func (t Table[T]) decodeWhole(ctx context.Context, doc *models.Document) (*T, error) {
	if !t.overflows() {
		return decodeDoc[T](doc)
	}
	var m map[string]any
	if err := doc.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", doc.Id, err)
	}
	if err := t.hydrate(ctx, m); err != nil {
		return nil, fmt.Errorf("get %s/%s: %w", t.coll.ID, doc.Id, err)
	}
	return remarshal[T](m)
}

// wholeItems hydrates a list's documents (raw JSON objects) and decodes them into T.
func (t Table[T]) wholeItems(ctx context.Context, docs []map[string]any) ([]T, error) {
	out := make([]T, 0, len(docs))
	for _, m := range docs {
		if err := t.hydrate(ctx, m); err != nil {
			return nil, fmt.Errorf("list %s: %w", t.coll.ID, err)
		}
		rec, err := remarshal[T](m)
		if err != nil {
			return nil, err
		}
		out = append(out, *rec)
	}
	return out, nil
}

func remarshal[T any](m map[string]any) (*T, error) {
	b, err := json.Marshal(m)
	if err != nil {
		return nil, err
	}
	var rec T
	if err := json.Unmarshal(b, &rec); err != nil {
		return nil, err
	}
	return &rec, nil
}
