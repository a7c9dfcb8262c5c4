package appwritetest

import (
	"encoding/json"
	"sort"
	"strings"
)

// This file holds what the engine profiles change about comparing and finding values.

// fold is the emulator's model of MariaDB's utf8mb4_general_ci: case-insensitive.
// (general_ci also ignores trailing spaces and most Latin accents; not modelled.)
func fold(s string) string { return strings.ToLower(s) }

// compare orders two values the way the engine's queries do.
func (p *profile) compare(a, b any) int {
	if p.foldStrings {
		if as, ok := a.(string); ok {
			if bs, ok := b.(string); ok {
				return strings.Compare(fold(as), fold(bs))
			}
		}
	}
	return compareValues(a, b)
}

// getDoc reads a document by id as the engine does.
func (s *Server) getDoc(col *collection, id string) *document {
	d, _ := col.lookup(id, s.prof.idFoldLookup)
	return d
}

// docIDTaken reports whether creating id would collide with the unique _uid index.
func (s *Server) docIDTaken(col *collection, id string) bool {
	_, ok := col.lookup(id, s.prof.idFoldUnique)
	return ok
}

// getFile reads a file by id as the engine does.
func (s *Server) getFile(b *bucket, id string) *file {
	f, _ := b.lookup(id, s.prof.idFoldLookup)
	return f
}

// seqKey is what $sequence orders by: the UUIDv7 on mongodb, the integer elsewhere.
func (d *document) seqKey() any {
	if d.UUID != "" {
		return d.UUID
	}
	return d.Seq
}

func (c *collection) sortedDocs() []*document {
	out := make([]*document, 0, len(c.Docs))
	for _, d := range c.Docs {
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return compareValues(out[i].seqKey(), out[j].seqKey()) < 0 })
	return out
}

// isStringAttr reports whether key holds strings ($id or a string attribute).
func (c *collection) isStringAttr(key string) bool {
	if key == "$id" {
		return true
	}
	a := c.attr(key)
	return a != nil && a.Type == "string"
}

// storedAsBSONString reports whether the Mongo adapter stores v (the value of key) as a
// BSON string: $id (_uid) and $sequence (_id, a UUIDv7) are strings; $createdAt,
// $updatedAt and datetime attributes are UTCDateTime; integers, doubles and booleans
// are numbers and bools. A string array counts when it holds a string ($type matches
// any element).
func (c *collection) storedAsBSONString(key string, v any) bool {
	switch key {
	case "$id", "$sequence":
		_, ok := v.(string)
		return ok
	case "$createdAt", "$updatedAt":
		return false
	}
	a := c.attr(key)
	if a == nil || a.Type != "string" {
		return false
	}
	if arr, ok := v.([]any); ok {
		for _, e := range arr {
			if _, ok := e.(string); ok {
				return true
			}
		}
		return false
	}
	_, ok := v.(string)
	return ok
}

// uniqueKey builds the tuple a unique index covers; ok=false when the document is not in
// the index:
//   - any part null (MariaDB unique indexes do not compare NULLs; Mongo stores no null
//     fields and the partial filter requires $exists);
//   - mongodb: any part not stored as a BSON string (the partial filter requires
//     $type "string" for every attribute, see doc.go);
//   - mariadb: string parts compare case-insensitively.
func (c *collection) uniqueKey(i *index, d *document, p *profile) (string, bool) {
	parts := make([]any, 0, len(i.Attributes))
	for _, ak := range i.Attributes {
		v := d.get(ak)
		if v == nil {
			return "", false
		}
		if p.mongoPartialUnique && !c.storedAsBSONString(ak, v) {
			return "", false
		}
		if s, ok := v.(string); ok && p.foldStrings && c.isStringAttr(ak) {
			v = fold(s)
		}
		parts = append(parts, v)
	}
	b, _ := json.Marshal(parts)
	return string(b), true
}

// like evaluates contains (isContains) / startsWith / endsWith (match) on one string:
//   - mariadb: LIKE under a _ci collation, case-insensitive;
//   - mongodb: contains is a case-insensitive regex .*v.*; startsWith and endsWith are
//     the unanchored, case-sensitive regexes "v.*" and ".*v", i.e. substring matches;
//   - ideal: exact prefix/suffix/substring.
func (p *profile) like(s, v string, match func(string, string) bool, isContains bool) bool {
	switch {
	case p.foldStrings:
		return match(fold(s), fold(v))
	case p.mongoRegex && isContains:
		return strings.Contains(fold(s), fold(v))
	case p.mongoRegex:
		return strings.Contains(s, v)
	}
	return match(s, v)
}
