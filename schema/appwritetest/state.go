package appwritetest

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// timeFormat is how Appwrite renders datetimes: millisecond precision with a numeric offset.
const timeFormat = "2006-01-02T15:04:05.000-07:00"

func fmtTime(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format(timeFormat)
}

// state is everything the emulator holds. It is serialised whole to the data directory.
type state struct {
	Users     map[string]*user     `json:"users"`
	Sessions  map[string]*session  `json:"sessions"`
	Databases map[string]*database `json:"databases"`
	Buckets   map[string]*bucket   `json:"buckets"`
}

func newState() *state {
	return &state{
		Users:     map[string]*user{},
		Sessions:  map[string]*session{},
		Databases: map[string]*database{},
		Buckets:   map[string]*bucket{},
	}
}

type user struct {
	ID                string         `json:"id"`
	Email             string         `json:"email"`
	Name              string         `json:"name"`
	PasswordHash      string         `json:"passwordHash"`
	Salt              string         `json:"salt"`
	Labels            []string       `json:"labels"`
	Status            bool           `json:"status"`
	EmailVerification bool           `json:"emailVerification"`
	Prefs             map[string]any `json:"prefs"`
	CreatedAt         time.Time      `json:"createdAt"`
	UpdatedAt         time.Time      `json:"updatedAt"`
	PasswordUpdate    time.Time      `json:"passwordUpdate"`
	AccessedAt        time.Time      `json:"accessedAt"`
}

type session struct {
	ID        string    `json:"id"`
	UserID    string    `json:"userId"`
	Secret    string    `json:"secret"`
	Provider  string    `json:"provider"`
	CreatedAt time.Time `json:"createdAt"`
	Expire    time.Time `json:"expire"`
}

type database struct {
	ID          string                 `json:"id"`
	Name        string                 `json:"name"`
	Enabled     bool                   `json:"enabled"`
	CreatedAt   time.Time              `json:"createdAt"`
	UpdatedAt   time.Time              `json:"updatedAt"`
	Collections map[string]*collection `json:"collections"`
}

type collection struct {
	ID               string               `json:"id"`
	DatabaseID       string               `json:"databaseId"`
	Name             string               `json:"name"`
	Permissions      []string             `json:"permissions"`
	DocumentSecurity bool                 `json:"documentSecurity"`
	Enabled          bool                 `json:"enabled"`
	Attributes       []*attribute         `json:"attributes"`
	Indexes          []*index             `json:"indexes"`
	Docs             map[string]*document `json:"docs"`
	Seq              int64                `json:"seq"`
	CreatedAt        time.Time            `json:"createdAt"`
	UpdatedAt        time.Time            `json:"updatedAt"`
	uniq             *uniqueIndexes       // documents by unique-index key (uniqueindex.go)
	vals             *valueIndexes        // documents by string value (uniqueindex.go)
	ids              foldIDs[*document]   // documents by case-folded id (uniqueindex.go)
	enc              map[*document][]byte // each document's snapshot encoding (snapshot.go)
}

type attribute struct {
	Key       string    `json:"key"`
	Type      string    `json:"type"`   // string, integer, double, boolean, datetime
	Format    string    `json:"format"` // "", enum, email, url, ip, datetime
	Size      int       `json:"size"`
	Required  bool      `json:"required"`
	Array     bool      `json:"array"`
	Default   any       `json:"default"`
	MinInt    *int64    `json:"minInt,omitempty"`
	MaxInt    *int64    `json:"maxInt,omitempty"`
	MinFloat  *float64  `json:"minFloat,omitempty"`
	MaxFloat  *float64  `json:"maxFloat,omitempty"`
	Elements  []string  `json:"elements,omitempty"`
	Encrypt   bool      `json:"encrypt"`
	Status    string    `json:"status"`
	Error     string    `json:"error"`
	ReadyAt   time.Time `json:"readyAt"`
	CreatedAt time.Time `json:"createdAt"`
	UpdatedAt time.Time `json:"updatedAt"`
}

type index struct {
	Key        string    `json:"key"`
	Type       string    `json:"type"`
	Attributes []string  `json:"attributes"`
	Orders     []string  `json:"orders"`
	Lengths    []int     `json:"lengths"`
	Status     string    `json:"status"`
	Error      string    `json:"error"`
	ReadyAt    time.Time `json:"readyAt"`
	CreatedAt  time.Time `json:"createdAt"`
	UpdatedAt  time.Time `json:"updatedAt"`
}

type document struct {
	ID  string `json:"id"`
	Seq int64  `json:"seq"`
	// UUID is $sequence on the mongodb engine: a UUIDv7 (empty on other engines).
	UUID        string         `json:"uuid,omitempty"`
	CreatedAt   time.Time      `json:"createdAt"`
	UpdatedAt   time.Time      `json:"updatedAt"`
	Permissions []string       `json:"permissions"`
	Data        map[string]any `json:"data"`
}

type bucket struct {
	ID                    string           `json:"id"`
	Name                  string           `json:"name"`
	Permissions           []string         `json:"permissions"`
	FileSecurity          bool             `json:"fileSecurity"`
	Enabled               bool             `json:"enabled"`
	MaximumFileSize       int64            `json:"maximumFileSize"`
	AllowedFileExtensions []string         `json:"allowedFileExtensions"`
	Compression           string           `json:"compression"`
	Encryption            bool             `json:"encryption"`
	Antivirus             bool             `json:"antivirus"`
	Transformations       bool             `json:"transformations"`
	CreatedAt             time.Time        `json:"createdAt"`
	UpdatedAt             time.Time        `json:"updatedAt"`
	Files                 map[string]*file `json:"files"`
	ids                   foldIDs[*file]   // files by case-folded id (uniqueindex.go)
}

type file struct {
	ID             string    `json:"id"`
	Name           string    `json:"name"`
	MimeType       string    `json:"mimeType"`
	Signature      string    `json:"signature"`
	Permissions    []string  `json:"permissions"`
	Size           int64     `json:"size"`
	ChunksTotal    int       `json:"chunksTotal"`
	ChunksUploaded int       `json:"chunksUploaded"`
	CreatedAt      time.Time `json:"createdAt"`
	UpdatedAt      time.Time `json:"updatedAt"`
	// chunks holds an upload in progress (index → bytes); data the complete content.
	// Neither is part of the snapshot: complete content lives in its own blob file.
	chunks map[int][]byte
	data   []byte
}

// snapshot file handling --------------------------------------------------------------

func (s *Server) snapshotPath() string { return filepath.Join(s.opts.DataDir, "state.json") }

func (s *Server) blobPath(bucketID, fileID string) string {
	return filepath.Join(s.opts.DataDir, "files", bucketID, fileID)
}

func (s *Server) load() error {
	b, err := os.ReadFile(s.snapshotPath())
	if os.IsNotExist(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read snapshot: %w", err)
	}
	st := newState()
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber()
	if err := dec.Decode(st); err != nil {
		return fmt.Errorf("decode snapshot: %w", err)
	}
	for _, db := range st.Databases {
		for _, c := range db.Collections {
			// $sequence follows the engine this emulator now models.
			for _, d := range c.sortedDocs() {
				switch {
				case s.prof.uuidSequence && d.UUID == "":
					d.UUID = newUUIDv7(d.CreatedAt)
				case !s.prof.uuidSequence:
					d.UUID = ""
				}
			}
			for _, a := range c.Attributes {
				a.Default = normalizeLoaded(a, a.Default)
			}
			for _, d := range c.Docs {
				for _, a := range c.Attributes {
					if v, ok := d.Data[a.Key]; ok {
						d.Data[a.Key] = normalizeLoaded(a, v)
					}
				}
			}
		}
	}
	for _, bk := range st.Buckets {
		for _, f := range bk.Files {
			if f.ChunksUploaded < f.ChunksTotal {
				// In-progress chunks are not persisted; the upload restarts from zero.
				f.ChunksUploaded = 0
				continue
			}
			data, err := os.ReadFile(s.blobPath(bk.ID, f.ID))
			if err != nil {
				return fmt.Errorf("read blob %s/%s: %w", bk.ID, f.ID, err)
			}
			f.data = data
		}
	}
	s.st = st
	return nil
}

// normalizeLoaded turns json.Number values from a snapshot back into the Go types the
// emulator computes with (int64 for integers, float64 for doubles).
func normalizeLoaded(a *attribute, v any) any {
	switch x := v.(type) {
	case json.Number:
		if a.Type == "integer" {
			n, err := x.Int64()
			if err == nil {
				return n
			}
		}
		f, _ := x.Float64()
		return f
	case []any:
		out := make([]any, len(x))
		for i, e := range x {
			out[i] = normalizeLoaded(a, e)
		}
		return out
	}
	return v
}

func (s *Server) flushLocked() error {
	snap, err := s.snapshotLocked()
	if err != nil || snap == nil {
		return err
	}
	return s.writeSnapshot(snap)
}

// snapshotLocked encodes the state for the data directory (nil without one); call with
// s.mu held.
func (s *Server) snapshotLocked() (snapshot, error) {
	if s.opts.DataDir == "" {
		return nil, nil
	}
	snap, err := s.encodeState()
	if err != nil {
		return nil, fmt.Errorf("encode snapshot: %w", err)
	}
	return snap, nil
}

// writeSnapshot replaces the snapshot file with snap. It needs no lock: only the flusher
// writes while it runs, and Close writes after it stopped; snap's pieces are not changed
// by later writes (snapshot.go).
func (s *Server) writeSnapshot(snap snapshot) error {
	if err := os.MkdirAll(s.opts.DataDir, 0o700); err != nil {
		return err
	}
	tmp := s.snapshotPath() + ".tmp"
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		return err
	}
	w := bufio.NewWriterSize(f, 1<<16)
	_, err = snap.WriteTo(w)
	if err == nil {
		err = w.Flush()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	return os.Rename(tmp, s.snapshotPath())
}

func (s *Server) writeBlob(bucketID, fileID string, data []byte) error {
	if s.opts.DataDir == "" {
		return nil
	}
	p := s.blobPath(bucketID, fileID)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		return err
	}
	return os.WriteFile(p, data, 0o600)
}

func (s *Server) removeBlob(bucketID, fileID string) {
	if s.opts.DataDir != "" {
		_ = os.Remove(s.blobPath(bucketID, fileID))
	}
}

// newUUIDv7 makes an RFC 9562 version 7 UUID: 48 bits of Unix milliseconds, then random
// bits. Like ramsey/uuid's across Appwrite's worker processes, two made in the same
// millisecond are in random order.
func newUUIDv7(t time.Time) string {
	var b [16]byte
	_, _ = rand.Read(b[6:])
	ms := uint64(t.UnixMilli())
	for i := 0; i < 6; i++ {
		b[i] = byte(ms >> (40 - 8*i))
	}
	b[6] = 0x70 | b[6]&0x0f
	b[8] = 0x80 | b[8]&0x3f
	h := hex.EncodeToString(b[:])
	return h[0:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:32]
}
