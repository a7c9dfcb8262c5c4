package appwritetest

import "reflect"

// uniqueMemo remembers each document's key in each unique index, so checkUnique (which
// compares a new or changed document with every other document of the collection) does
// not rebuild and JSON-encode every other document's key on every write: that was half
// of the CPU of a load test against the emulator, and it made every write slower as the
// collection grew (H27, issue #15).
//
// An entry is valid while the document still holds the same data map with the same
// number of keys: an update replaces the map (documents.go), and the only in-place
// changes add keys (an attribute's default backfilled onto existing documents) or
// normalize values while state is loaded, before any check. Entries of deleted documents
// are dropped when the memo outgrows the collection.
type uniqueMemo struct {
	keys map[memoID]memoKey
}

type memoID struct {
	doc *document
	idx *index
}

type memoKey struct {
	data uintptr // identity of the document's data map when the key was built
	n    int     // its number of keys then
	key  string
	ok   bool
}

// memoUniqueKey is uniqueKey, remembered per (document, index).
func (col *collection) memoUniqueKey(i *index, d *document, p *profile) (string, bool) {
	if col.uniq == nil {
		col.uniq = &uniqueMemo{keys: map[memoID]memoKey{}}
	}
	m := col.uniq
	data := reflect.ValueOf(d.Data).Pointer()
	id := memoID{d, i}
	if k, hit := m.keys[id]; hit && k.data == data && k.n == len(d.Data) {
		return k.key, k.ok
	}
	if len(m.keys) > 2*len(col.Docs)*max(1, len(col.Indexes))+64 {
		clear(m.keys) // deleted documents' entries
	}
	key, ok := col.uniqueKey(i, d, p)
	m.keys[id] = memoKey{data: data, n: len(d.Data), key: key, ok: ok}
	return key, ok
}
