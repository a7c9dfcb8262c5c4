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
//     lookups ignore case (lookupID's linear EqualFold scan, on every create of a new id);
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
		col.ids.add(d)
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
		col.ids.remove(d)
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

func removeDoc(ds []*document, d *document) []*document {
	for j, o := range ds {
		if o == d {
			ds[j] = ds[len(ds)-1]
			ds[len(ds)-1] = nil
			return ds[:len(ds)-1]
		}
	}
	return ds
}

// foldIDs files the collection's documents by their id with case folded the way
// strings.EqualFold folds it: two ids are EqualFold exactly when their foldID is equal.
type foldIDs map[string][]*document

func (f foldIDs) add(d *document) {
	k := foldID(d.ID)
	for _, o := range f[k] {
		if o == d {
			return
		}
	}
	f[k] = append(f[k], d)
}

func (f foldIDs) remove(d *document) {
	k := foldID(d.ID)
	f[k] = removeDoc(f[k], d)
	if len(f[k]) == 0 {
		delete(f, k)
	}
}

// lookup finds id exactly, or (fold) any document whose id is EqualFold to it: what
// lookupID does over col.Docs, without its linear scan.
func (col *collection) lookup(id string, fold bool) (*document, bool) {
	if d, ok := col.Docs[id]; ok {
		return d, true
	}
	if !fold {
		return nil, false
	}
	if col.ids == nil {
		col.ids = make(foldIDs, len(col.Docs))
		for _, d := range col.Docs {
			col.ids.add(d)
		}
	}
	for _, d := range col.ids[foldID(id)] {
		if col.Docs[d.ID] == d && strings.EqualFold(d.ID, id) {
			return d, true
		}
	}
	return nil, false
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
