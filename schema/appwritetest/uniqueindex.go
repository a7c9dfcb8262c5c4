package appwritetest

import (
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"
)

// This file holds the collection's lookup structures, so that no write does work that
// grows with the collection (issue 15: a linear unique check was 39% of make load's CPU
// and made admission slower as collections grew):
//
//   - uniqueIndexes: per available unique index, the documents holding each key, as a
//     database's unique index is a B-tree over the key (O(log n) upstream, O(1) here);
//   - ids (foldIDs): the documents by case-folded id, for the engines whose _uid index and
//     lookups ignore case (was a linear EqualFold scan on every create of a new id); a
//     bucket's files have the same (bucket.ids);
//   - vals: per string attribute a list filtered with equal, the documents holding each
//     value (folded as the engine compares), so such a list reads its candidates instead
//     of every document (runQueries still applies every filter to each candidate);
//   - enc: each document's snapshot encoding (snapshot.go).
//
// All are derived state, never persisted: built on first use from col.Docs, kept up to
// date by every write that changes a document (indexDoc after create and update,
// dropDoc on delete), and dropped (rebuilt on next use) by a change to the
// collection's structure that rewrites documents in place (an attribute's default
// backfilled). A unique index's entries are also verified on use: a candidate counts only
// while it is still the collection's document and still holds the key, so an entry left
// behind can never refuse a write that the linear check would have accepted.

// uniqueIndexes are the built unique indexes of one collection.
type uniqueIndexes struct {
	by map[*index]map[string][]*document // index → key → documents holding it (one, unless stale)
	of map[*document][]uniqueEntry       // the keys each document is filed under
}

type uniqueEntry struct {
	idx *index
	key string
}

// uniqueDocs returns index i's documents by key, building it from the collection's
// documents when it is used for the first time (or after invalidateIndexes).
func (col *collection) uniqueDocs(i *index, p *profile) map[string][]*document {
	if col.uniq == nil {
		col.uniq = &uniqueIndexes{by: map[*index]map[string][]*document{}, of: map[*document][]uniqueEntry{}}
	}
	if m, ok := col.uniq.by[i]; ok {
		return m
	}
	m := make(map[string][]*document, len(col.Docs))
	col.uniq.by[i] = m
	for _, d := range col.Docs {
		if k, ok := col.uniqueKey(i, d, p); ok {
			m[k] = append(m[k], d)
			col.uniq.of[d] = append(col.uniq.of[d], uniqueEntry{i, k})
		}
	}
	return m
}

// valueIndexes are the built equality indexes of one collection's string attributes.
type valueIndexes struct {
	by map[string]map[string][]*document // attribute → value (folded) → documents
	of map[*document][]valueEntry        // the values each document is filed under
}

type valueEntry struct{ attr, key string }

// valueKey is what an equal filter on the string attribute attr compares of d: its value,
// folded where the engine's comparison folds (profile.compare); ok=false when d holds no
// string there.
func valueKey(attr string, d *document, p *profile) (string, bool) {
	v, ok := d.Data[attr].(string)
	if ok && p.foldStrings {
		v = fold(v)
	}
	return v, ok
}

// valueDocs returns the documents by value of the string attribute attr, building the
// index on first use.
func (col *collection) valueDocs(attr string, p *profile) map[string][]*document {
	if col.vals == nil {
		col.vals = &valueIndexes{by: map[string]map[string][]*document{}, of: map[*document][]valueEntry{}}
	}
	if m, ok := col.vals.by[attr]; ok {
		return m
	}
	m := make(map[string][]*document)
	col.vals.by[attr] = m
	for _, d := range col.Docs {
		if k, ok := valueKey(attr, d, p); ok {
			m[k] = append(m[k], d)
			col.vals.of[d] = append(col.vals.of[d], valueEntry{attr, k})
		}
	}
	return m
}

// equalCandidates returns the documents an equal filter over a non-array string
// attribute with string values can match (a superset: each is still matched), or ok=false
// when the filter is not one the indexes answer.
func (col *collection) equalCandidates(q appQuery, p *profile) ([]*document, bool) {
	if q.Method != "equal" || len(q.Values) == 0 {
		return nil, false
	}
	a := col.attr(q.Attribute)
	if a == nil || a.Type != "string" || a.Array || a.Status != "available" {
		return nil, false
	}
	keys := make([]string, 0, len(q.Values))
	for _, v := range q.Values {
		w, ok := v.(string)
		if !ok {
			return nil, false // a number compares with a string as text (compareValues)
		}
		if p.foldStrings {
			w = fold(w)
		}
		if !slices.Contains(keys, w) {
			keys = append(keys, w)
		}
	}
	m := col.valueDocs(q.Attribute, p)
	var out []*document
	for _, k := range keys {
		out = append(out, m[k]...)
	}
	return out, true
}

// indexDoc files d (just created, or just changed) under its current keys in every built
// unique index, in place of the keys it was filed under, and forgets its snapshot
// encoding. Every write that changes a document calls it once the document is final.
func (col *collection) indexDoc(d *document, p *profile) {
	col.unindexDoc(d)
	delete(col.enc, d)
	if col.uniq != nil {
		var entries []uniqueEntry
		for i, m := range col.uniq.by {
			if k, ok := col.uniqueKey(i, d, p); ok {
				m[k] = append(m[k], d)
				entries = append(entries, uniqueEntry{i, k})
			}
		}
		if len(entries) > 0 {
			col.uniq.of[d] = entries
		}
	}
	if col.vals != nil {
		var entries []valueEntry
		for attr, m := range col.vals.by {
			if k, ok := valueKey(attr, d, p); ok {
				m[k] = append(m[k], d)
				entries = append(entries, valueEntry{attr, k})
			}
		}
		if len(entries) > 0 {
			col.vals.of[d] = entries
		}
	}
	if col.ids != nil {
		col.ids.add(d.ID, d)
	}
}

// unindexDoc removes d's entries from the unique and value indexes (it was deleted, or is about to
// be filed again). Its id stays in ids unless it was deleted (forgetID).
func (col *collection) unindexDoc(d *document) {
	if col.uniq != nil {
		for _, e := range col.uniq.of[d] {
			m := col.uniq.by[e.idx]
			m[e.key] = removeDoc(m[e.key], d)
			if len(m[e.key]) == 0 {
				delete(m, e.key)
			}
		}
		delete(col.uniq.of, d)
	}
	if col.vals != nil {
		for _, e := range col.vals.of[d] {
			m := col.vals.by[e.attr]
			m[e.key] = removeDoc(m[e.key], d)
			if len(m[e.key]) == 0 {
				delete(m, e.key)
			}
		}
		delete(col.vals.of, d)
	}
}

// dropDoc is unindexDoc for a deleted document: its id is free again too.
func (col *collection) dropDoc(d *document) {
	col.unindexDoc(d)
	delete(col.enc, d)
	if col.ids != nil {
		col.ids.remove(d.ID, d)
	}
}

// invalidateIndexes drops the derived structures; they are rebuilt on next use. For
// changes that rewrite documents in place (not for per-document writes).
func (col *collection) invalidateIndexes() {
	col.uniq = nil
	col.vals = nil
	col.ids = nil
	col.enc = nil
}

func removeDoc(ds []*document, d *document) []*document { return removeOne(ds, d) }

// removeOne removes v from xs (order not kept).
func removeOne[T comparable](xs []T, v T) []T {
	for j, o := range xs {
		if o == v {
			var zero T
			xs[j] = xs[len(xs)-1]
			xs[len(xs)-1] = zero
			return xs[:len(xs)-1]
		}
	}
	return xs
}

// foldIDs files values (documents, files) by their id with case folded the way
// strings.EqualFold folds it: two ids are EqualFold exactly when their foldID is equal.
type foldIDs[T comparable] map[string][]T

func (f foldIDs[T]) add(id string, v T) {
	k := foldID(id)
	if !slices.Contains(f[k], v) {
		f[k] = append(f[k], v)
	}
}

func (f foldIDs[T]) remove(id string, v T) {
	k := foldID(id)
	f[k] = removeOne(f[k], v)
	if len(f[k]) == 0 {
		delete(f, k)
	}
}

// foldLookup finds id in m exactly, or (fold) any value whose id is EqualFold to it,
// through ids (built on first use) instead of a scan of m. idOf reads a value's id.
func foldLookup[T comparable](m map[string]T, ids *foldIDs[T], id string, fold bool, idOf func(T) string) (T, bool) {
	if v, ok := m[id]; ok {
		return v, true
	}
	var zero T
	if !fold {
		return zero, false
	}
	if *ids == nil {
		*ids = make(foldIDs[T], len(m))
		for k, v := range m {
			ids.add(k, v)
		}
	}
	for _, v := range (*ids)[foldID(id)] {
		if k := idOf(v); m[k] == v && strings.EqualFold(k, id) {
			return v, true
		}
	}
	return zero, false
}

// lookup finds a document by id exactly, or (fold) regardless of case.
func (col *collection) lookup(id string, fold bool) (*document, bool) {
	return foldLookup(col.Docs, &col.ids, id, fold, func(d *document) string { return d.ID })
}

// lookup finds a file by id exactly, or (fold) regardless of case.
func (b *bucket) lookup(id string, fold bool) (*file, bool) {
	return foldLookup(b.Files, &b.ids, id, fold, func(f *file) string { return f.ID })
}

// foldID maps every rune to the smallest rune of its unicode.SimpleFold orbit, the
// equivalence strings.EqualFold tests (invalid UTF-8 decodes to U+FFFD in both).
func foldID(s string) string {
	ascii := true
	for i := 0; i < len(s); i++ {
		if s[i] >= utf8.RuneSelf {
			ascii = false
			break
		}
	}
	if ascii {
		// The smallest of an ASCII letter's orbit is its upper case ('K' < 'k' < U+212A).
		return strings.ToUpper(s)
	}
	var b strings.Builder
	b.Grow(len(s))
	for _, r := range s {
		m := r
		for o := unicode.SimpleFold(r); o != r; o = unicode.SimpleFold(o) {
			if o < m {
				m = o
			}
		}
		b.WriteRune(m)
	}
	return b.String()
}
