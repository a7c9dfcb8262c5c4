package backup

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"slices"
	"sort"
	"strings"

	"privateassistant/schema"
)

// FormatVersion is the archive layout this package writes. Restore reads archives of this
// version and older; a newer one is refused (ErrNewerFormat).
//
//   - 1: one bucket (Manifest.Bucket, the artifacts), files.jsonl and files/<file id>.
//   - 2: every bucket of the model (Manifest.Buckets), each under buckets/<bucket id>/:
//     files.jsonl and files/<file id>.
const FormatVersion = 2

// Archive member names.
const (
	manifestName = "manifest.json"
	docsDir      = "documents/"
	bucketsDir   = "buckets/"
	// filesIndex and blobsDir are a bucket's index and bytes, under bucketsDir+<id>/ (at
	// the archive's root in format 1).
	filesIndex = "files.jsonl"
	blobsDir   = "files/"
)

// bucketDir is where format 2 keeps a bucket's members.
func bucketDir(bucket string) string { return bucketsDir + bucket + "/" }

// BucketCounts are what an archive holds of one bucket.
type BucketCounts struct {
	ID        string `json:"id"`
	Files     int    `json:"files"`
	FileBytes int64  `json:"fileBytes"`
}

// bucketPart is one bucket's members in an archive.
type bucketPart struct {
	ID    string
	Index string // the files index member
	Blobs string // the prefix of the file members
	Files int
}

// parts lists the buckets an archive holds, with their members: format 1 holds one
// (Bucket, the artifacts bucket when unnamed) at the root, format 2 each of Buckets under
// buckets/<id>/.
func (m *Manifest) parts() []bucketPart {
	if m.Format < 2 {
		id := m.Bucket
		if id == "" {
			id = schema.BucketArtifacts
		}
		return []bucketPart{{ID: id, Index: filesIndex, Blobs: blobsDir, Files: m.Counts.Files}}
	}
	out := make([]bucketPart, 0, len(m.Buckets))
	for _, b := range m.Buckets {
		out = append(out, bucketPart{ID: b.ID, Index: bucketDir(b.ID) + filesIndex, Blobs: bucketDir(b.ID) + blobsDir, Files: b.Files})
	}
	return out
}

// Manifest describes an archive. It names where the data came from and the key
// reference used, never a key.
type Manifest struct {
	Format             int        `json:"format"`
	CreatedAt          string     `json:"createdAt"`
	ApplicationVersion string     `json:"applicationVersion"`
	Schema             SchemaInfo `json:"schema"`
	Endpoint           string     `json:"endpoint"`
	Project            string     `json:"project"`
	Database           string     `json:"database"`
	// Bucket is the one bucket of a format 1 archive (empty in format 2).
	Bucket string `json:"bucket,omitempty"`
	// Buckets are the buckets of a format 2 archive, in the model's order.
	Buckets []BucketCounts `json:"buckets,omitempty"`
	KeyRef  string         `json:"keyRef"` // e.g. env:APPWRITE_API_KEY
	Counts  Counts         `json:"counts"`
	Entries []Entry        `json:"entries"` // every other member of the archive
}

// Counts are what the archive holds.
type Counts struct {
	Documents map[string]int `json:"documents"` // per collection
	Files     int            `json:"files"`     // in every bucket
	FileBytes int64          `json:"fileBytes"` // in every bucket
}

// Entry is one archive member with its size and SHA-256.
type Entry struct {
	Path   string `json:"path"`
	Size   int64  `json:"size"`
	SHA256 string `json:"sha256"`
}

// SchemaInfo is the data model an archive was written under: its version (a fingerprint
// of the definition) and each collection's attributes, so a restore can tell whether the
// target's model holds everything the archive does (the schema only grows).
type SchemaInfo struct {
	Version     string              `json:"version"`
	Collections map[string][]string `json:"collections"`
	// Buckets are the model's bucket ids (absent from manifests written before format 2).
	Buckets []string `json:"buckets,omitempty"`
}

// Schema describes m.
func Schema(m schema.Model) SchemaInfo {
	info := SchemaInfo{Version: SchemaVersion(m), Collections: map[string][]string{}}
	for _, c := range m.Collections {
		keys := make([]string, 0, len(c.Attributes))
		for _, a := range c.Attributes {
			keys = append(keys, a.Key)
		}
		sort.Strings(keys)
		info.Collections[c.ID] = keys
	}
	for _, b := range m.Buckets {
		info.Buckets = append(info.Buckets, b.ID)
	}
	return info
}

// SchemaVersion is a fingerprint of the data model's definition ("s-" and 16 hex digits):
// two builds with the same collections, attributes, indexes and bucket have the same one.
// The schema is additive and forward-only, so versions are compared by content
// (Covers), not by order.
func SchemaVersion(m schema.Model) string {
	b, _ := json.Marshal(m)
	sum := sha256.Sum256(b)
	return "s-" + hex.EncodeToString(sum[:8])
}

// Covers reports what of older is missing from s ("collection", "collection.attribute" or
// "bucket:id"): nil when s holds every collection, attribute and bucket older does, i.e. s
// is the same schema or an additive successor of it.
func (s SchemaInfo) Covers(older SchemaInfo) []string {
	var missing []string
	for c, attrs := range older.Collections {
		have, ok := s.Collections[c]
		if !ok {
			missing = append(missing, c)
			continue
		}
		for _, a := range attrs {
			if !slices.Contains(have, a) {
				missing = append(missing, c+"."+a)
			}
		}
	}
	for _, b := range older.Buckets {
		if !slices.Contains(s.Buckets, b) {
			missing = append(missing, "bucket:"+b)
		}
	}
	sort.Strings(missing)
	return missing
}

// check validates a manifest read from an archive.
func (m *Manifest) check() error {
	switch {
	case m.Format < 1:
		return fmt.Errorf("backup: manifest has no format version")
	case m.Format > FormatVersion:
		return fmt.Errorf("%w: archive format %d, this build reads up to %d", ErrNewerFormat, m.Format, FormatVersion)
	}
	for _, e := range m.Entries {
		if !safeName(e.Path) {
			return fmt.Errorf("backup: manifest names an unsafe path %q", e.Path)
		}
	}
	seen := map[string]bool{}
	for _, b := range m.Buckets {
		if !safeName(bucketDir(b.ID)+filesIndex) || strings.Contains(b.ID, "/") || seen[b.ID] {
			return fmt.Errorf("backup: manifest names an unsafe or repeated bucket %q", b.ID)
		}
		seen[b.ID] = true
	}
	return nil
}

// safeName accepts the relative member names this package writes.
func safeName(p string) bool {
	if p == "" || strings.HasPrefix(p, "/") || strings.Contains(p, "\\") {
		return false
	}
	for _, part := range strings.Split(p, "/") {
		if part == "" || part == "." || part == ".." {
			return false
		}
	}
	return true
}
