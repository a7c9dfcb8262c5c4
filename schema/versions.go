package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/appwrite/sdk-for-go/models"

	"privateassistant/internal/backoff"
)

// Versioned records (a run record's "version", the settings' "revision") are written as a
// sequence of versions, each owned by exactly one writer on every engine: a writer of
// version v first creates the claim document VersionDocID(collection, record, v) (ClaimVersion);
// $id uniqueness is enforced by every Appwrite database adapter, unlike a compare of
// X-Appwrite-Timestamp, which lets two writes in one millisecond both land ($updatedAt has
// millisecond precision and an equal one passes). The owner then writes the record
// (WriteClaimed); a writer whose claim was refused waits for the record to reach v
// (AwaitVersion), and writes the claimed patch itself when the owner does not within
// RollForwardAfter (it may have died between claim and write).

// RollForwardAfter is how long a writer waits for the owner of a claimed version to write
// it before it writes the claimed patch itself. The wait restarts with every write it
// sees, and the roll-forward is conditional on the $updatedAt that stood that long, so it
// lands strictly later than any $updatedAt the owner can have read: the owner's own late
// write, conditional on that older $updatedAt, is then refused.
var RollForwardAfter = time.Second

func fieldVersion(doc *models.Document, field string) (int64, error) {
	m := map[string]any{}
	if err := doc.Decode(&m); err != nil {
		return 0, err
	}
	switch v := m[field].(type) {
	case nil:
		return 0, nil // written before versions were claimed
	case float64:
		return int64(v), nil
	default:
		return 0, fmt.Errorf("%s: %T is not a version", field, v)
	}
}

// ClaimVersion makes this writer the owner of version v of record id: nil when it is,
// ErrConflict when another writer is. The patch is kept with the claim (roll-forward).
//
// The patch is checked against the record's declaration first: a claim whose patch the
// record refuses could never be written, by its owner or by a roll-forward, and every
// later writer of the record would wait on it forever.
func (t Table[T]) ClaimVersion(ctx context.Context, id string, v int64, patch map[string]any) error {
	if err := t.validate(patch, false); err != nil {
		return err
	}
	b, err := json.Marshal(patch)
	if err != nil {
		return err
	}
	if len([]rune(string(b))) > SizeRunPatch {
		return &FieldError{CollVersions, "patch", fmt.Sprintf("%d characters exceed the declared %d", len([]rune(string(b))), SizeRunPatch)}
	}
	_, err = For[VersionClaim](t.s, CollVersions).Create(ctx, VersionDocID(t.coll.ID, id, v), "",
		&VersionClaim{Target: t.coll.ID + "/" + id, Version: v, Patch: string(b)})
	return err
}

// WriteClaimed lands the patch of version v, which this writer owns (ClaimVersion), on
// record id last read at updatedAt. The patch must set field to v. A refusal of the
// X-Appwrite-Timestamp check means another field was written plainly in between (the
// record is still below v: the write is retried on the newer $updatedAt) or the version
// was rolled forward (this very patch landed).
func (t Table[T]) WriteClaimed(ctx context.Context, id, field string, v int64, updatedAt string, patch map[string]any) (*T, error) {
	for try := 0; ; try++ {
		got, err := t.UpdateIfUnchanged(ctx, id, updatedAt, patch)
		if err == nil {
			return got, nil
		}
		if !errors.Is(err, ErrStale) || try >= 8 {
			return nil, err
		}
		rec, doc, err := t.get(ctx, id)
		if err != nil {
			return nil, err
		}
		have, err := fieldVersion(doc, field)
		if err != nil {
			return nil, err
		}
		if have >= v {
			return rec, nil
		}
		updatedAt = doc.UpdatedAt
	}
}

// AwaitVersion reads record id until its field is v or later, after another writer claimed
// v. When the owner does not write it within RollForwardAfter (restarting with every write
// seen), the claimed patch is written here.
func (t Table[T]) AwaitVersion(ctx context.Context, id, field string, v int64) (*T, error) {
	var seen string
	var deadline time.Time
	b := backoff.Backoff{Min: 2 * time.Millisecond, Max: 100 * time.Millisecond, Factor: 2}
	for {
		rec, doc, err := t.get(ctx, id)
		if err != nil {
			return nil, err
		}
		have, err := fieldVersion(doc, field)
		if err != nil {
			return nil, err
		}
		if have >= v {
			return rec, nil
		}
		if doc.UpdatedAt != seen {
			seen, deadline = doc.UpdatedAt, time.Now().Add(RollForwardAfter)
		}
		if time.Now().After(deadline) {
			claim, err := For[VersionClaim](t.s, CollVersions).Get(ctx, VersionDocID(t.coll.ID, id, v))
			if err != nil {
				return nil, err
			}
			patch := map[string]any{}
			if err := json.Unmarshal([]byte(claim.Patch), &patch); err != nil {
				return nil, fmt.Errorf("roll forward %s/%s to %d: %w", t.coll.ID, id, v, err)
			}
			got, err := t.UpdateIfUnchanged(ctx, id, doc.UpdatedAt, patch)
			if err == nil || !errors.Is(err, ErrStale) {
				return got, err
			}
			continue
		}
		if err := backoff.Sleep(ctx, b.Next()); err != nil {
			return nil, err
		}
	}
}
