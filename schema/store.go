package schema

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"strings"
	"unicode/utf8"

	"github.com/appwrite/sdk-for-go/client"
	"github.com/appwrite/sdk-for-go/databases"
	"github.com/appwrite/sdk-for-go/models"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/role"
)

// Store is the data model over the Appwrite Go SDK, with a server credential. It never
// grants a client write access: user-visible records get exactly read("user:<owner>"),
// server-only records no document permissions at all.
//
// The SDK takes no context; each call is bounded by the SDK client's own timeout, and a
// cancelled ctx stops a Store method before its next call.
type Store struct {
	client client.Client
	db     *databases.Databases
	model  Model
}

// NewStore wraps an SDK client that carries the project and a server API key.
func NewStore(c client.Client, m Model) *Store {
	return &Store{client: c, db: databases.New(c), model: m}
}

// Client returns the SDK client the store uses (for Storage calls with the same key).
func (s *Store) Client() client.Client { return s.client }

// Model returns the data model the store serves.
func (s *Store) Model() Model { return s.model }

// Table is the typed view of one collection.
type Table[T any] struct {
	s    *Store
	coll Collection
}

// For returns the typed table for a collection id.
func For[T any](s *Store, collectionID string) Table[T] {
	return Table[T]{s: s, coll: s.model.Collection(collectionID)}
}

// Store returns the store the table reads and writes through.
func (t Table[T]) Store() *Store { return t.s }

// Collection returns the table's definition.
func (t Table[T]) Collection() Collection { return t.coll }

// Page is one page of a list and the cursor of the next one ("" when it was the last).
type Page[T any] struct {
	Items []T
	Next  string
}

// ListQuery selects records. Owner, when set, is both a query filter and re-checked on
// every returned record.
type ListQuery struct {
	Owner   string
	Filters []string // sdk query strings, e.g. query.Equal("runId", id)
	Order   []string // sdk order queries; $createdAt ascending when empty (never $sequence: a UUIDv7 on MongoDB)
	Cursor  string   // the last id of the previous page
	Limit   int      // default 100
	// AllOwners lists a user-visible collection across owners (server jobs only, such as
	// the outbox); without it such a list must name an Owner.
	AllOwners bool
}

func (t Table[T]) id() string { return t.s.model.DatabaseID }

// Create writes a new record with id. For user-visible collections owner is required and
// becomes the only reader.
func (t Table[T]) Create(ctx context.Context, id, owner string, rec *T) (*T, error) {
	return t.create(ctx, id, owner, rec, true)
}

// Encoded is a record as a create sends it (Table.Encode).
type Encoded[T any] struct{ data map[string]any }

// Encode does a create's own work ahead of the write: it turns rec into the data the
// create sends. That is most of the work (a JSON round trip), and a caller that knows a
// record before it may write it can encode it meanwhile (admit, while its
// reservation or the write before is in flight).
func (t Table[T]) Encode(rec *T) (Encoded[T], error) {
	data, err := t.encode(rec)
	return Encoded[T]{data}, err
}

// InsertEncoded writes a record Encode encoded, exactly as Create would, without decoding
// the created document (admit writes three records per message and reads none
// of them back; decoding them was a tenth of a warm admission). e stays as it was.
func (t Table[T]) InsertEncoded(ctx context.Context, id, owner string, e Encoded[T]) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	_, err := t.write(ctx, id, owner, maps.Clone(e.data), false)
	return err
}

func (t Table[T]) create(ctx context.Context, id, owner string, rec *T, decode bool) (*T, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	data, err := t.encode(rec)
	if err != nil {
		return nil, err
	}
	return t.write(ctx, id, owner, data, decode)
}

// encode turns rec into the data a create sends.
func (t Table[T]) encode(rec *T) (map[string]any, error) {
	data, err := toData(rec)
	if err != nil {
		return nil, err
	}
	if t.coll.ID == CollMessages {
		// The string key that makes (conversation, sequence) unique on every engine.
		conv, _ := data["conversationId"].(string)
		seq, _ := data["sequence"].(float64)
		data["sequenceKey"] = SequenceKey(conv, int64(seq))
	}
	return data, nil
}

// write creates the record of data (consumed: overflowed content leaves it).
func (t Table[T]) write(ctx context.Context, id, owner string, data map[string]any, decode bool) (*T, error) {
	whole := map[string]any{}
	if t.overflows() {
		if id == "" || id == "unique()" {
			return nil, fmt.Errorf("create %s: a record with overflowable content needs its own id", t.coll.ID)
		}
		for k, v := range data {
			whole[k] = v
		}
		if err := t.overflow(ctx, id, owner, data); err != nil {
			return nil, err
		}
	}
	if err := t.validate(data, true); err != nil {
		return nil, err
	}
	perms := []string{}
	if t.coll.UserVisible {
		if owner == "" {
			return nil, fmt.Errorf("create %s: a user-visible record needs an owner", t.coll.ID)
		}
		perms = []string{permission.Read(role.User(owner, ""))}
	}
	doc, err := t.s.db.CreateDocument(t.id(), t.coll.ID, id, data, t.s.db.WithCreateDocumentPermissions(perms))
	if err != nil {
		return nil, fmt.Errorf("create %s/%s: %w", t.coll.ID, id, mapError(err))
	}
	if !decode {
		return nil, nil
	}
	if len(whole) == 0 {
		return decodeDoc[T](doc)
	}
	// The record as created, with its overflowed values whole (as written, no download).
	var m map[string]any
	if err := doc.Decode(&m); err != nil {
		return nil, fmt.Errorf("decode %s: %w", doc.Id, err)
	}
	for _, a := range t.coll.Attributes {
		if a.Overflow != "" && m[a.Key] == nil && whole[a.Key] != nil {
			m[a.Key] = whole[a.Key]
		}
	}
	return remarshal[T](m)
}

// Get reads a record with server trust: no owner check. Use GetOwned for anything a
// user asked for.
func (t Table[T]) Get(ctx context.Context, id string) (*T, error) {
	rec, _, err := t.get(ctx, id)
	return rec, err
}

func (t Table[T]) get(ctx context.Context, id string) (*T, *models.Document, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	if id == "" {
		return nil, nil, fmt.Errorf("get %s: %w", t.coll.ID, ErrNotFound)
	}
	doc, err := t.s.db.GetDocument(t.id(), t.coll.ID, id)
	if err != nil {
		return nil, nil, fmt.Errorf("get %s/%s: %w", t.coll.ID, id, mapError(err))
	}
	rec, err := t.decodeWhole(ctx, doc)
	return rec, doc, err
}

// GetOwned reads a record and verifies its owner. A foreign record is ErrNotFound,
// exactly like a missing one.
func (t Table[T]) GetOwned(ctx context.Context, owner, id string) (*T, error) {
	if t.coll.Attr("ownerId") == nil {
		return nil, fmt.Errorf("get %s: collection has no owner", t.coll.ID)
	}
	if owner == "" {
		return nil, fmt.Errorf("get %s: %w", t.coll.ID, ErrNotFound)
	}
	rec, doc, err := t.get(ctx, id)
	if errors.Is(err, ErrNotFound) {
		// Same error text as a foreign record: nothing tells the two apart.
		return nil, fmt.Errorf("get %s/%s: %w", t.coll.ID, id, ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	if docOwner(doc) != owner {
		return nil, fmt.Errorf("get %s/%s: %w", t.coll.ID, id, ErrNotFound)
	}
	return rec, nil
}

// List returns one page. It never assumes a page is everything: Next is set whenever the
// page was full.
func (t Table[T]) List(ctx context.Context, q ListQuery) (Page[T], error) {
	if err := ctx.Err(); err != nil {
		return Page[T]{}, err
	}
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	qs := make([]string, 0, len(q.Filters)+4)
	if q.Owner != "" {
		qs = append(qs, query.Equal("ownerId", q.Owner))
	} else if t.coll.UserVisible && !q.AllOwners {
		return Page[T]{}, fmt.Errorf("list %s: user-visible records are listed per owner", t.coll.ID)
	}
	qs = append(qs, q.Filters...)
	qs = append(qs, q.Order...)
	if len(q.Order) == 0 {
		// Creation order to the millisecond; within one millisecond the order is the
		// engine's own tie-break, stable for the cursor. Lists that need an exact order name
		// their attribute (sequence, revision).
		qs = append(qs, query.OrderAsc("$createdAt"))
	}
	if q.Cursor != "" {
		qs = append(qs, query.CursorAfter(q.Cursor))
	}
	qs = append(qs, query.Limit(limit))
	list, err := t.s.db.ListDocuments(t.id(), t.coll.ID, t.s.db.WithListDocumentsQueries(qs), t.s.db.WithListDocumentsTotal(false))
	if err != nil {
		return Page[T]{}, fmt.Errorf("list %s: %w", t.coll.ID, mapError(err))
	}
	var items struct {
		Documents []T `json:"documents"`
	}
	var raw struct {
		Documents []map[string]any `json:"documents"`
	}
	var heads struct {
		Documents []struct {
			ID      string `json:"$id"`
			OwnerID string `json:"ownerId"`
		} `json:"documents"`
	}
	if t.overflows() {
		if err := list.Decode(&raw); err != nil {
			return Page[T]{}, fmt.Errorf("list %s: decode: %w", t.coll.ID, err)
		}
		if items.Documents, err = t.wholeItems(ctx, raw.Documents); err != nil {
			return Page[T]{}, err
		}
	} else if err := list.Decode(&items); err != nil {
		return Page[T]{}, fmt.Errorf("list %s: decode: %w", t.coll.ID, err)
	}
	if err := list.Decode(&heads); err != nil {
		return Page[T]{}, fmt.Errorf("list %s: decode: %w", t.coll.ID, err)
	}
	page := Page[T]{Items: make([]T, 0, len(items.Documents))}
	for i, rec := range items.Documents {
		if q.Owner != "" && heads.Documents[i].OwnerID != q.Owner {
			// Defence in depth: the filter already excludes these.
			continue
		}
		page.Items = append(page.Items, rec)
	}
	if len(heads.Documents) == limit {
		page.Next = heads.Documents[len(heads.Documents)-1].ID
	}
	return page, nil
}

// All pages through every matching record.
func (t Table[T]) All(ctx context.Context, q ListQuery) ([]T, error) {
	var out []T
	for {
		p, err := t.List(ctx, q)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Items...)
		if p.Next == "" {
			return out, nil
		}
		q.Cursor = p.Next
	}
}

// Update patches a record with server trust.
func (t Table[T]) Update(ctx context.Context, id string, patch map[string]any) (*T, error) {
	return t.update(ctx, t.s.db, id, patch)
}

func (t Table[T]) update(ctx context.Context, db *databases.Databases, id string, patch map[string]any) (*T, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	if err := t.validate(patch, false); err != nil {
		return nil, err
	}
	doc, err := db.UpdateDocument(t.id(), t.coll.ID, id, db.WithUpdateDocumentData(patch))
	if err != nil {
		return nil, fmt.Errorf("update %s/%s: %w", t.coll.ID, id, mapError(err))
	}
	return t.decodeWhole(ctx, doc)
}

// UpdateOwned patches a record after verifying its owner (ErrNotFound otherwise).
func (t Table[T]) UpdateOwned(ctx context.Context, owner, id string, patch map[string]any) (*T, error) {
	if _, err := t.GetOwned(ctx, owner, id); err != nil {
		return nil, err
	}
	return t.Update(ctx, id, patch)
}

// UpdateRevision patches a revision-guarded record only if its revision is still
// expected, and bumps it. Revision expected+1 is claimed first (ClaimVersion): exactly one
// writer owns it on every engine, where Appwrite's X-Appwrite-Timestamp check alone lets
// two writes in one millisecond both land. A revision that moved on, or a claim another
// writer holds, is ErrStale (after the other writer's revision landed, or was rolled
// forward: AwaitVersion).
func (t Table[T]) UpdateRevision(ctx context.Context, id string, expected int64, patch map[string]any) (*T, error) {
	if t.coll.Attr("revision") == nil {
		return nil, fmt.Errorf("update %s: collection is not revision guarded", t.coll.ID)
	}
	_, doc, err := t.get(ctx, id)
	if err != nil {
		return nil, err
	}
	cur, err := fieldVersion(doc, "revision")
	if err != nil {
		return nil, fmt.Errorf("update %s/%s: decode: %w", t.coll.ID, id, err)
	}
	if cur != expected {
		return nil, fmt.Errorf("update %s/%s: revision is %d, expected %d: %w", t.coll.ID, id, cur, expected, ErrStale)
	}
	next := maps.Clone(patch)
	if next == nil {
		next = map[string]any{}
	}
	next["revision"] = expected + 1
	if err := t.validate(next, false); err != nil {
		return nil, err
	}
	err = t.ClaimVersion(ctx, id, expected+1, next)
	if errors.Is(err, ErrConflict) {
		if _, aerr := t.AwaitVersion(ctx, id, "revision", expected+1); aerr != nil {
			return nil, aerr
		}
		return nil, fmt.Errorf("update %s/%s: revision %d is taken: %w", t.coll.ID, id, expected+1, ErrStale)
	}
	if err != nil {
		return nil, err
	}
	return t.WriteClaimed(ctx, id, "revision", expected+1, doc.UpdatedAt, next)
}

// UpdateIfUnchanged patches a record only if nobody changed it after updatedAt (its
// $updatedAt as last read or written): Appwrite's X-Appwrite-Timestamp check refuses a
// later one atomically, as ErrStale.
func (t Table[T]) UpdateIfUnchanged(ctx context.Context, id, updatedAt string, patch map[string]any) (*T, error) {
	c := t.s.client
	c.Headers = maps.Clone(t.s.client.Headers)
	c.Headers["X-Appwrite-Timestamp"] = updatedAt
	return t.update(ctx, databases.New(c), id, patch)
}

// Delete removes a record with server trust, and first the overflow files it names (a
// failed file delete leaves the record, so a retry finishes the job).
func (t Table[T]) Delete(ctx context.Context, id string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if t.overflows() || t.coll.ID == CollArtifacts {
		if err := t.deleteOverflowFiles(ctx, id); err != nil {
			return err
		}
	}
	if _, err := t.s.db.DeleteDocument(t.id(), t.coll.ID, id); err != nil {
		return fmt.Errorf("delete %s/%s: %w", t.coll.ID, id, mapError(err))
	}
	return nil
}

// validate enforces declared sizes, enums and (on create) required fields before a
// request is sent, so the error names the field.
func (t Table[T]) validate(data map[string]any, create bool) error {
	if !create && t.coll.ID == CollRuns {
		// A run's status changes only through schema/runstate, which checks the move and
		// claims the record's next version first: a patch that changes the status without
		// a version did not come from there.
		if _, ok := data["status"]; ok {
			if _, ok := data["version"]; !ok {
				return ErrStatusOutsideRunstate
			}
		}
	}
	for k, v := range data {
		a := t.coll.Attr(k)
		if a == nil {
			return &FieldError{t.coll.ID, k, "not declared"}
		}
		if v == nil {
			if a.Required {
				return &FieldError{t.coll.ID, k, "required"}
			}
			continue
		}
		switch a.Type {
		case TypeString:
			if a.Array {
				// JSON arrays of strings (toData decodes them as []any).
				items, ok := v.([]any)
				if ss, isStrings := v.([]string); isStrings {
					items, ok = make([]any, len(ss)), true
					for i, x := range ss {
						items[i] = x
					}
				}
				if !ok {
					return &FieldError{t.coll.ID, k, "must be an array of strings"}
				}
				for _, it := range items {
					s, ok := it.(string)
					if !ok {
						return &FieldError{t.coll.ID, k, "must be an array of strings"}
					}
					if n := utf8.RuneCountInString(s); n > a.Size {
						return &FieldError{t.coll.ID, k, fmt.Sprintf("an item of %d characters exceeds the declared %d", n, a.Size)}
					}
				}
				continue
			}
			s, ok := v.(string)
			if !ok {
				return &FieldError{t.coll.ID, k, "must be a string"}
			}
			if n := utf8.RuneCountInString(s); n > a.Size {
				return &FieldError{t.coll.ID, k, fmt.Sprintf("%d characters exceed the declared %d", n, a.Size)}
			}
		case TypeEnum:
			s, _ := v.(string)
			if st, ok := v.(fmt.Stringer); ok {
				s = st.String() // a named string type (schema.RunStatus)
			}
			ok := false
			for _, e := range a.Elements {
				ok = ok || e == s
			}
			if !ok {
				return &FieldError{t.coll.ID, k, fmt.Sprintf("%q is not one of %s", s, strings.Join(a.Elements, ", "))}
			}
		}
	}
	if create {
		for _, a := range t.coll.Attributes {
			if v, ok := data[a.Key]; a.Required && (!ok || v == nil) {
				return &FieldError{t.coll.ID, a.Key, "required"}
			}
		}
	}
	return nil
}

// toData turns a record into the data map Appwrite takes: system ($) fields dropped.
func toData[T any](rec *T) (map[string]any, error) {
	b, err := json.Marshal(rec)
	if err != nil {
		return nil, err
	}
	m := map[string]any{}
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, err
	}
	for k := range m {
		if strings.HasPrefix(k, "$") {
			delete(m, k)
		}
	}
	return m, nil
}

func decodeDoc[T any](doc *models.Document) (*T, error) {
	var rec T
	if err := doc.Decode(&rec); err != nil {
		return nil, fmt.Errorf("decode %s: %w", doc.Id, err)
	}
	return &rec, nil
}

func docOwner(doc *models.Document) string {
	var o struct {
		OwnerID string `json:"ownerId"`
	}
	_ = doc.Decode(&o)
	return o.OwnerID
}
