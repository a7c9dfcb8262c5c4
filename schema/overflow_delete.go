package schema

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/storage"
)

// deleteOverflowFiles deletes the files record id names: its overflow files (issue 12: a
// record's content longer than its field lives in a private file of the bucket, and
// deleting the record must not leave it there), a message's attachments and an artifact's
// file. It runs before the record is deleted, so a delete that
// fails half-way is finished by a retry (the record still names its files); a file that
// is already gone is fine. A record that is gone is ErrNotFound, as the delete would say.
func (t Table[T]) deleteOverflowFiles(ctx context.Context, id string) error {
	doc, err := t.s.db.GetDocument(t.id(), t.coll.ID, id)
	if err != nil {
		return fmt.Errorf("delete %s/%s: %w", t.coll.ID, id, mapError(err))
	}
	var m map[string]any
	if err := doc.Decode(&m); err != nil {
		return fmt.Errorf("delete %s/%s: decode: %w", t.coll.ID, id, err)
	}
	st := storage.New(t.s.client)
	for _, a := range t.coll.Attributes {
		if a.Overflow == "" {
			continue
		}
		fid, _ := m[a.Overflow].(string)
		if fid == "" {
			continue
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if _, err := st.DeleteFile(BucketArtifacts, fid); err != nil && !errors.Is(mapError(err), ErrNotFound) {
			return fmt.Errorf("delete %s/%s: overflow file %s: %w", t.coll.ID, id, fid, mapError(err))
		}
	}
	if t.coll.ID == CollArtifacts {
		// An artifact's file goes with its record (issue 30: deleting a conversation
		// deletes its artifacts).
		bucket, _ := m["bucketId"].(string)
		fid, _ := m["fileId"].(string)
		if bucket != "" && fid != "" {
			if _, err := st.DeleteFile(bucket, fid); err != nil && !errors.Is(mapError(err), ErrNotFound) {
				return fmt.Errorf("delete %s/%s: file %s: %w", t.coll.ID, id, fid, mapError(err))
			}
		}
	}
	if t.coll.ID == CollMessages {
		// A message's attached files (issue 17) go with it: deleting a conversation leaves
		// none of its uploads behind. Only files that name the message's owner, and only
		// when no other message of the owner names them.
		owner, _ := m["ownerId"].(string)
		ids, _ := m["attachments"].([]any)
		for _, v := range ids {
			fid, _ := v.(string)
			if fid == "" || owner == "" {
				continue
			}
			if err := ctx.Err(); err != nil {
				return err
			}
			f, err := st.GetFile(BucketUploads, fid)
			if errors.Is(mapError(err), ErrNotFound) {
				continue
			}
			if err != nil {
				return fmt.Errorf("delete %s/%s: attached file %s: %w", t.coll.ID, id, fid, mapError(err))
			}
			if !slices.Contains(f.Permissions, UploadReadPermission(owner)) {
				continue
			}
			// A file another message of the owner still names stays: it goes with the last
			// one (the same file id sent twice). Two messages deleted at once may each see
			// the other and keep it; the upload sweep deletes it once no message names it.
			others, err := For[Message](t.s, CollMessages).List(ctx, ListQuery{Owner: owner,
				Filters: []string{query.Contains("attachments", fid)}, Limit: 2})
			if err != nil {
				return fmt.Errorf("delete %s/%s: messages naming %s: %w", t.coll.ID, id, fid, err)
			}
			if slices.ContainsFunc(others.Items, func(o Message) bool { return o.ID != id }) {
				continue
			}
			if _, err := st.DeleteFile(BucketUploads, fid); err != nil && !errors.Is(mapError(err), ErrNotFound) {
				return fmt.Errorf("delete %s/%s: attached file %s: %w", t.coll.ID, id, fid, mapError(err))
			}
		}
	}
	return nil
}
