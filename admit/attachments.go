package admit

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"privateassistant/fault"
	"privateassistant/queue"
	"privateassistant/schema"
)

// ErrAttachment: an attachment is refused (too many, a duplicate, the wrong type or size,
// incomplete, or readable by others). Missing and foreign files are fault.NotFound.
var ErrAttachment = errors.New("attachment refused")

// checkAttachments verifies a message's attached files before anything is stored: at
// most schema.MaxAttachments distinct ids, each a file of schema.BucketUploads that the
// caller uploaded (a file of someone else answers exactly like a missing one), complete,
// readable by the caller alone, of an allowed type, within the per-file and per-message
// size limits. The bucket enforces type and size at upload too; this is the server's
// word, whatever a client did.
func checkAttachments(ctx context.Context, st *schema.Store, owner string, ids []string) error {
	if len(ids) == 0 {
		return nil
	}
	if len(ids) > schema.MaxAttachments {
		return fault.E(fault.Invalid, "too_many_attachments",
			fmt.Sprintf("a message carries at most %d files; this one has %d", schema.MaxAttachments, len(ids)), ErrAttachment)
	}
	var total int64
	for i, id := range ids {
		if !queue.ValidID(id) || len(id) > schema.SizeID {
			return fault.E(fault.Invalid, "invalid_attachment", fmt.Sprintf("attachment %d is not a valid file id", i+1), ErrAttachment)
		}
		if slices.Contains(ids[:i], id) {
			return fault.E(fault.Invalid, "duplicate_attachment", fmt.Sprintf("file %s is attached twice", id), ErrAttachment)
		}
		u, err := st.Upload(ctx, owner, id)
		if errors.Is(err, schema.ErrNotFound) {
			return fault.E(fault.NotFound, "attachment_not_found", fmt.Sprintf("attached file %s not found", id), nil)
		}
		if err != nil {
			return appwriteErr(err)
		}
		switch {
		case !u.Complete:
			return fault.E(fault.Invalid, "attachment_incomplete", fmt.Sprintf("%s has not finished uploading", u.Name), ErrAttachment)
		case !u.Private:
			return fault.E(fault.Invalid, "attachment_not_private", fmt.Sprintf("%s is readable by others; attach a file only you can read", u.Name), ErrAttachment)
		case !schema.UploadExtensionAllowed(u.Name):
			return fault.E(fault.Invalid, "attachment_type", fmt.Sprintf("%s: this type of file cannot be attached", u.Name), ErrAttachment)
		case u.Size > schema.MaxUploadBytes:
			return fault.E(fault.Invalid, "attachment_too_large", fmt.Sprintf("%s is larger than %d MiB", u.Name, schema.MaxUploadBytes>>20), ErrAttachment)
		}
		total += u.Size
	}
	if total > schema.MaxAttachmentBytes {
		return fault.E(fault.Invalid, "attachments_too_large",
			fmt.Sprintf("the attached files add up to more than %d MiB", schema.MaxAttachmentBytes>>20), ErrAttachment)
	}
	return nil
}
