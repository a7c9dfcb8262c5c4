package appwritetest

import (
	"encoding/json"
	"fmt"
	"reflect"
	"slices"
)

// CheckIndexes verifies that every collection's derived lookup structures
// (uniqueindex.go) hold what a fresh build from its documents holds: each document under
// its current key in each built unique index and nothing else, and each document under
// its folded id. For tests.
func (s *Server) CheckIndexes() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, db := range s.st.Databases {
		for _, col := range db.Collections {
			if err := col.checkIndexes(&s.prof); err != nil {
				return fmt.Errorf("%s/%s: %w", db.ID, col.ID, err)
			}
		}
	}
	return nil
}

// IndexesBuilt reports how many unique indexes of the collection are built.
func (s *Server) IndexesBuilt(dbID, collID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	col := s.st.Databases[dbID].Collections[collID]
	if col.uniq == nil {
		return 0
	}
	return len(col.uniq.by)
}

func (col *collection) checkIndexes(p *profile) error {
	if col.uniq != nil {
		for i, m := range col.uniq.by {
			want := map[string][]string{}
			for _, d := range col.Docs {
				if k, ok := col.uniqueKey(i, d, p); ok {
					want[k] = append(want[k], d.ID)
				}
			}
			got := map[string][]string{}
			for k, ds := range m {
				for _, d := range ds {
					got[k] = append(got[k], d.ID)
				}
			}
			for _, v := range want {
				slices.Sort(v)
			}
			for _, v := range got {
				slices.Sort(v)
			}
			if fmt.Sprint(want) != fmt.Sprint(got) {
				return fmt.Errorf("index %s: holds %v, documents hold %v", i.Key, got, want)
			}
		}
		n := 0
		for d, es := range col.uniq.of {
			if col.Docs[d.ID] != d {
				return fmt.Errorf("entries kept for %s, not a document of the collection", d.ID)
			}
			n += len(es)
		}
		total := 0
		for _, m := range col.uniq.by {
			for _, ds := range m {
				total += len(ds)
			}
		}
		if n != total {
			return fmt.Errorf("%d entries filed per document, %d in the indexes", n, total)
		}
	}
	if col.vals != nil {
		n := 0
		for attr, m := range col.vals.by {
			want := map[string][]string{}
			for _, d := range col.Docs {
				if k, ok := valueKey(attr, d, p); ok {
					want[k] = append(want[k], d.ID)
				}
			}
			got := map[string][]string{}
			for k, ds := range m {
				for _, d := range ds {
					got[k] = append(got[k], d.ID)
				}
				n += len(ds)
			}
			for _, v := range want {
				slices.Sort(v)
			}
			for _, v := range got {
				slices.Sort(v)
			}
			if fmt.Sprint(want) != fmt.Sprint(got) {
				return fmt.Errorf("value index %s: holds %v, documents hold %v", attr, got, want)
			}
		}
		filed := 0
		for d, es := range col.vals.of {
			if col.Docs[d.ID] != d {
				return fmt.Errorf("value entries kept for %s, not a document of the collection", d.ID)
			}
			filed += len(es)
		}
		if filed != n {
			return fmt.Errorf("%d values filed per document, %d in the indexes", filed, n)
		}
	}
	for d, e := range col.enc {
		if col.Docs[d.ID] != d {
			return fmt.Errorf("snapshot encoding kept for %s, not a document of the collection", d.ID)
		}
		k, _ := json.Marshal(d.ID)
		v, _ := json.Marshal(d)
		if want := string(k) + ":" + string(v); string(e) != want {
			return fmt.Errorf("snapshot encoding of %s is %s, the document is %s", d.ID, e, want)
		}
	}
	if col.ids != nil {
		n := 0
		for k, ds := range col.ids {
			for _, d := range ds {
				if col.Docs[d.ID] != d || foldID(d.ID) != k {
					return fmt.Errorf("folded id %q holds %s", k, d.ID)
				}
				n++
			}
		}
		if n != len(col.Docs) {
			return fmt.Errorf("folded ids hold %d documents, the collection %d", n, len(col.Docs))
		}
	}
	return nil
}

// FoldID is foldID, for tests.
var FoldID = foldID

// CheckSnapshot encodes a snapshot as the flusher does (keeping each document's encoding
// for the next) and checks that it decodes to what json.Marshal of the state decodes to.
func (s *Server) CheckSnapshot() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, err := s.encodeState()
	if err != nil {
		return err
	}
	got := snap.bytes()
	want, err := json.Marshal(s.st)
	if err != nil {
		return err
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		return fmt.Errorf("snapshot is not JSON: %w", err)
	}
	if err := json.Unmarshal(want, &w); err != nil {
		return err
	}
	if !reflect.DeepEqual(g, w) {
		return fmt.Errorf("snapshot %s\nstate     %s", got, want)
	}
	return nil
}
