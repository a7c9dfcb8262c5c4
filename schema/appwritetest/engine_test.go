package appwritetest_test

// Conformance tests of the engine profiles (mongodb, mariadb) through sdk-for-go v1.0.0.
// Each test names the upstream source it follows; doc.go has the full citations.
// Upstream: appwrite/appwrite tag 1.9.6 (9f8423e2f6), utopia-php/database 6.0.0
// (fff9f0effb), utopia-php/mongo 1.1.0, utopia-php/storage 2.0.5, utopia-php/abuse 1.4.1.

import (
	"bytes"
	"crypto/md5"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/databases"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/id"
	"github.com/appwrite/sdk-for-go/permission"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/appwrite/sdk-for-go/role"
	"github.com/stretchr/testify/require"

	"privateassistant/schema/appwritetest"
)

var realEngines = []appwritetest.Engine{appwritetest.EngineMongoDB, appwritetest.EngineMariaDB}

// fakeClock is an injectable clock (Options.Now) that tests move by hand.
type fakeClock struct {
	mu   sync.Mutex
	t    time.Time
	step time.Duration // added after every reading (0: frozen)
}

func newFakeClock(step time.Duration) *fakeClock {
	return &fakeClock{t: time.Date(2026, 12, 1, 12, 0, 0, 0, time.UTC), step: step}
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	t := c.t
	c.t = c.t.Add(c.step)
	return t
}

func (c *fakeClock) SetStep(d time.Duration) {
	c.mu.Lock()
	c.step = d
	c.mu.Unlock()
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func engineServer(t *testing.T, e appwritetest.Engine, opts appwritetest.Options) *appwritetest.TestServer {
	t.Helper()
	opts.Engine = e
	ts := appwritetest.NewTestServer(t, opts)
	require.Equal(t, e, ts.Engine())
	return ts
}

// engineFixture makes collection "c": conv (string), seq (integer), title (string), with
// a mixed unique index (conv, seq) shaped like messages.conversation_sequence and a
// string-only unique index (conv, title).
func engineFixture(t *testing.T, ts *appwritetest.TestServer, perms []string) *databases.Databases {
	t.Helper()
	db := appwrite.NewDatabases(keyClient(ts, ts.AdminKey))
	_, err := db.Create("main", "Main")
	require.NoError(t, err)
	_, err = db.CreateCollection("main", "c", "C", db.WithCreateCollectionPermissions(perms), db.WithCreateCollectionDocumentSecurity(true))
	require.NoError(t, err)
	_, err = db.CreateStringAttribute("main", "c", "conv", 36, false)
	require.NoError(t, err)
	_, err = db.CreateIntegerAttribute("main", "c", "seq", false)
	require.NoError(t, err)
	_, err = db.CreateStringAttribute("main", "c", "title", 64, false)
	require.NoError(t, err)
	waitAvailable(t, db, "c")
	_, err = db.CreateIndex("main", "c", "conv_seq", "unique", []string{"conv", "seq"})
	require.NoError(t, err)
	_, err = db.CreateIndex("main", "c", "conv_title", "unique", []string{"conv", "title"})
	require.NoError(t, err)
	waitAvailable(t, db, "c")
	return db
}

func listIDs(t *testing.T, db *databases.Databases, qs ...string) []string {
	t.Helper()
	l, err := db.ListDocuments("main", "c", db.WithListDocumentsQueries(append(qs, query.Limit(500))))
	require.NoError(t, err)
	out := []string{}
	for _, d := range l.Documents {
		out = append(out, d.Id)
	}
	return out
}

// Mongo.php:1081-1091 (createIndex) builds the partial filter of a unique index from
// $indexAttributeTypes[$i], a positional lookup in the map Database.php:4574 keys by
// attribute name, so every attribute defaults to $type "string": a document whose
// integer is set is never in the index. MariaDB enforces the composite index, comparing
// strings under the _ci collation (MariaDB.php:40; mariadb:10.11 in docker-compose.yml).
func TestEngineUniqueIndexes(t *testing.T) {
	t.Parallel()
	for _, e := range realEngines {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ts := engineServer(t, e, appwritetest.Options{})
			db := engineFixture(t, ts, nil)
			_, err := db.CreateDocument("main", "c", "d1", map[string]any{"conv": "c1", "seq": 1, "title": "Hello"})
			require.NoError(t, err)

			// Same (conv, seq): the mixed index.
			_, err = db.CreateDocument("main", "c", "d2", map[string]any{"conv": "c1", "seq": 1, "title": "other"})
			if e == appwritetest.EngineMongoDB {
				require.NoError(t, err, "mongodb does not enforce a unique index over string+integer")
			} else {
				requireErr(t, err, 409, "document_already_exists")
			}
			// Same title up to case: the string index.
			_, err = db.CreateDocument("main", "c", "d3", map[string]any{"conv": "c1", "seq": 3, "title": "hello"})
			if e == appwritetest.EngineMongoDB {
				require.NoError(t, err, "mongodb unique indexes over strings are case-sensitive")
			} else {
				requireErr(t, err, 409, "document_already_exists")
			}
			// Exactly the same strings: enforced on both.
			_, err = db.CreateDocument("main", "c", "d4", map[string]any{"conv": "c1", "seq": 4, "title": "Hello"})
			requireErr(t, err, 409, "document_already_exists")
			// An update into a duplicate is refused the same way.
			_, err = db.CreateDocument("main", "c", "d5", map[string]any{"conv": "c1", "seq": 5, "title": "five"})
			require.NoError(t, err)
			_, err = db.UpdateDocument("main", "c", "d5", db.WithUpdateDocumentData(map[string]any{"title": "Hello"}))
			requireErr(t, err, 409, "document_already_exists")
			_, err = db.UpdateDocument("main", "c", "d5", db.WithUpdateDocumentData(map[string]any{"seq": 1}))
			if e == appwritetest.EngineMongoDB {
				require.NoError(t, err)
			} else {
				requireErr(t, err, 409, "document_already_exists")
			}

			// A unique index over an integer alone is not enforced on mongodb either, and
			// building it over duplicate data does not fail there.
			_, err = db.CreateIndex("main", "c", "seq_only", "unique", []string{"seq"})
			require.NoError(t, err)
			require.Eventually(t, func() bool {
				i, err := db.GetIndex("main", "c", "seq_only")
				return err == nil && i.Status != "processing"
			}, 5*time.Second, 5*time.Millisecond)
			i, err := db.GetIndex("main", "c", "seq_only")
			require.NoError(t, err)
			if e == appwritetest.EngineMongoDB {
				require.Equal(t, "available", i.Status, "d1, d2 and d5 share seq 1")
				_, err = db.CreateDocument("main", "c", "d6", map[string]any{"seq": 1})
				require.NoError(t, err)
			} else {
				require.Equal(t, "available", i.Status, "seq values are distinct on mariadb")
				_, err = db.CreateDocument("main", "c", "d6", map[string]any{"seq": 1})
				requireErr(t, err, 409, "document_already_exists")
			}
		})
	}
}

// Ids: Mongo.php:494-503 creates _uid unique with collation {locale en, strength 1} but
// getDocument (Mongo.php:1240) filters {_uid: id} without one, so a case variant collides
// on create and is not found on read. MariaDB: _uid VARCHAR(255) UNIQUE (MariaDB.php:163,
// 182) and WHERE _uid = :_uid (SQL.php:396) under a _ci collation: both ignore case.
func TestEngineCaseInsensitiveIDs(t *testing.T) {
	t.Parallel()
	for _, e := range realEngines {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ts := engineServer(t, e, appwritetest.Options{})
			db := engineFixture(t, ts, nil)
			_, err := db.CreateDocument("main", "c", "Note1", map[string]any{"title": "a"})
			require.NoError(t, err)
			_, err = db.CreateDocument("main", "c", "note1", map[string]any{"title": "b"})
			requireErr(t, err, 409, "document_already_exists")

			g, err := db.GetDocument("main", "c", "NOTE1")
			if e == appwritetest.EngineMongoDB {
				requireErr(t, err, 404, "document_not_found")
				require.Empty(t, listIDs(t, db, query.Equal("$id", "note1")))
			} else {
				require.NoError(t, err)
				require.Equal(t, "Note1", g.Id)
				require.Equal(t, []string{"Note1"}, listIDs(t, db, query.Equal("$id", "note1")))
				_, err = db.UpdateDocument("main", "c", "NOTE1", db.WithUpdateDocumentData(map[string]any{"title": "c"}))
				require.NoError(t, err)
			}

			st := appwrite.NewStorage(keyClient(ts, ts.AdminKey))
			_, err = st.CreateBucket("b", "B")
			require.NoError(t, err)
			path := filepath.Join(t.TempDir(), "a.txt")
			require.NoError(t, os.WriteFile(path, []byte("hello"), 0o600))
			_, err = st.CreateFile("b", "File1", file.NewInputFile(path, "a.txt"))
			require.NoError(t, err)
			// (Raw HTTP: on mariadb the SDK's resume GET finds File1 and sdk-for-go v1.0.0
			// panics on that path.)
			code, body := postChunk(t, ts, "b", "file1", "", []byte("hello"), -1, 5)
			require.Equal(t, 409, code)
			require.Equal(t, "storage_file_already_exists", body["type"])
			_, err = st.GetFile("b", "FILE1")
			if e == appwritetest.EngineMongoDB {
				requireErr(t, err, 404, "storage_file_not_found")
			} else {
				require.NoError(t, err)
			}
			// A deleted file's id is free in any case again (the folded-id map forgets it).
			_, err = st.DeleteFile("b", "File1")
			require.NoError(t, err)
			code, _ = postChunk(t, ts, "b", "file1", "", []byte("hello"), -1, 5)
			require.Equal(t, 201, code)
			code, body = postChunk(t, ts, "b", "FILE1", "", []byte("hello"), -1, 5)
			require.Equal(t, 409, code)
			require.Equal(t, "storage_file_already_exists", body["type"])
		})
	}
}

// Strings in queries. MariaDB: = and LIKE (MariaDB.php:1555-1581, getSQLCondition) under
// a _ci collation. Mongo: contains is createSafeRegex('.*%s.*') with the default 'i' flag
// (Mongo.php:2807, 344); startsWith/endsWith are the unanchored strings "v.*" and ".*v"
// (Mongo.php:2985, 2990), so both match anywhere, case-sensitively; equality and sort
// use the default (binary) collation.
func TestEngineStringComparison(t *testing.T) {
	t.Parallel()
	type want struct{ mongo, maria []string }
	cases := []struct {
		name string
		q    string
		want want
	}{
		{"equal folds case on mariadb", query.Equal("title", "hello world"), want{[]string{}, []string{"s1"}}},
		{"equal exact", query.Equal("title", "Hello World"), want{[]string{"s1"}, []string{"s1"}}},
		{"contains ignores case on both", query.Contains("title", "WORLD"), want{[]string{"s1"}, []string{"s1"}}},
		{"startsWith is unanchored on mongodb", query.StartsWith("title", "World"), want{[]string{"s1"}, []string{}}},
		{"startsWith is case-sensitive on mongodb", query.StartsWith("title", "hello"), want{[]string{}, []string{"s1"}}},
		{"endsWith is unanchored on mongodb", query.EndsWith("title", "Hello"), want{[]string{"s1"}, []string{}}},
	}
	for _, e := range realEngines {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ts := engineServer(t, e, appwritetest.Options{})
			db := engineFixture(t, ts, nil)
			for i, title := range []string{"Hello World", "a", "B", "c"} {
				_, err := db.CreateDocument("main", "c", fmt.Sprintf("s%d", i+1), map[string]any{"title": title})
				require.NoError(t, err)
			}
			for _, tc := range cases {
				w := tc.want.mongo
				if e == appwritetest.EngineMariaDB {
					w = tc.want.maria
				}
				require.Equal(t, w, listIDs(t, db, tc.q), tc.name)
			}
			order := listIDs(t, db, query.NotEqual("title", "Hello World"), query.OrderAsc("title"))
			if e == appwritetest.EngineMongoDB {
				require.Equal(t, []string{"s3", "s2", "s4"}, order, "binary order: B < a < c")
			} else {
				require.Equal(t, []string{"s2", "s3", "s4"}, order, "_ci order: a < B < c")
			}
		})
	}
}

// $sequence on MongoDB: Mongo.php:3684-3687 (getIdAttributeType = uuid7), the UUIDv7 the
// utopia-php/mongo 1.1.0 client makes on insert (Client.php:684-685, 246-248,
// ramsey/uuid uuid7: 48-bit ms + random, ordered within one process only); the 1.8
// response filter V21::castSequence (src/Appwrite/Utopia/Response/Filters/V21.php:103-109)
// turns the non-numeric value into 0. MariaDB: _id BIGINT AUTO_INCREMENT (MariaDB.php:162).
// Ordering by $sequence is accepted on every adapter: the documents query validator adds
// $sequence to the attributes orders may name (src/Database/Validator/Queries/
// Documents.php:44-49, checked by Validator/Query/Order.php isValidAttribute), and
// Database::find appends it as the tie-break of every other order (Database.php:8473-8481)
// — so upstream refuses nothing here; what it does not give on MongoDB is creation order
// within a millisecond, which is why the project orders by its own attributes.
func TestEngineSequence(t *testing.T) {
	t.Parallel()
	for _, e := range realEngines {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock(time.Millisecond)
			ts := engineServer(t, e, appwritetest.Options{Now: clock.Now, ProcessingDelay: time.Nanosecond})
			db := engineFixture(t, ts, nil)
			clock.SetStep(0) // from now on every write is in the same millisecond
			var created []string
			for i := 0; i < 40; i++ {
				d, err := db.CreateDocument("main", "c", fmt.Sprintf("q%02d", i), map[string]any{"seq": i})
				require.NoError(t, err)
				if e == appwritetest.EngineMongoDB {
					require.Equal(t, 0, d.Sequence, "a UUIDv7 through the 1.8 response format")
				} else {
					require.Equal(t, i+1, d.Sequence)
				}
				created = append(created, d.Id)
			}
			byDefault := listIDs(t, db)
			bySequence := listIDs(t, db, query.OrderAsc("$sequence"))
			require.Equal(t, byDefault, bySequence, "the default order is $sequence")
			if e == appwritetest.EngineMongoDB {
				// 40 writes in one millisecond come back in UUIDv7 order, which is random
				// within the millisecond (chance of creation order: 1/40!).
				require.NotEqual(t, created, byDefault)
				require.ElementsMatch(t, created, byDefault)
			} else {
				require.Equal(t, created, byDefault)
			}
		})
	}
	t.Run("mongodb orders by millisecond", func(t *testing.T) {
		t.Parallel()
		ticking := newFakeClock(time.Millisecond)
		ts := engineServer(t, appwritetest.EngineMongoDB, appwritetest.Options{Now: ticking.Now, ProcessingDelay: time.Nanosecond})
		db := engineFixture(t, ts, nil)
		var created []string
		for i := 0; i < 20; i++ {
			d, err := db.CreateDocument("main", "c", fmt.Sprintf("q%02d", i), map[string]any{"seq": i})
			require.NoError(t, err)
			created = append(created, d.Id)
		}
		require.Equal(t, created, listIDs(t, db))
		// The raw body carries "$sequence":0.
		resp := rawGet(t, ts, "/databases/main/collections/c/documents/q00")
		require.Contains(t, resp, `"$sequence":0`)
	})
}

func rawGet(t *testing.T, ts *appwritetest.TestServer, path string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", ts.URL+path, nil)
	req.Header.Set("X-Appwrite-Project", ts.Project)
	req.Header.Set("X-Appwrite-Key", ts.AdminKey)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	require.Equal(t, 200, resp.StatusCode, string(b))
	return string(b)
}

// postChunk sends one chunk like the SDK does, with the form's fileId and, when xid is
// set, the x-appwrite-id header; start < 0 sends no Content-Range.
func postChunk(t *testing.T, ts *appwritetest.TestServer, bucket, formID, xid string, data []byte, start, total int) (int, map[string]any) {
	t.Helper()
	var buf bytes.Buffer
	w := newMultipart(&buf)
	fw, err := w.CreateFormFile("file", "blob.bin")
	require.NoError(t, err)
	_, _ = fw.Write(data)
	require.NoError(t, w.WriteField("fileId", formID))
	require.NoError(t, w.Close())
	req, _ := http.NewRequest("POST", ts.URL+"/storage/buckets/"+bucket+"/files", &buf)
	req.Header.Set("Content-Type", w.FormDataContentType())
	req.Header.Set("X-Appwrite-Project", ts.Project)
	req.Header.Set("X-Appwrite-Key", ts.AdminKey)
	if start >= 0 { // start < 0: a plain upload without Content-Range
		req.Header.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", start, start+len(data)-1, total))
	}
	if xid != "" {
		req.Header.Set("X-Appwrite-Id", xid)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var m map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&m))
	return resp.StatusCode, m
}

func pattern(n int) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*13 + i/5000)
	}
	return b
}

// Files/Create.php (src/Appwrite/Platform/Modules/Storage/Http/Buckets/Files/Create.php;
// app/controllers/api/storage.php no longer exists at 1.9.6): line 199 takes the id from
// x-appwrite-id with the form's fileId as the default; lines 270-281 answer a chunk of a
// completed file with 200 and the file (409 only without Content-Range).
func TestEngineChunkedUploads(t *testing.T) {
	t.Parallel()
	for _, e := range append([]appwritetest.Engine{appwritetest.EngineIdeal}, realEngines...) {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ts := engineServer(t, e, appwritetest.Options{})
			st := appwrite.NewStorage(keyClient(ts, ts.AdminKey))
			_, err := st.CreateBucket("b", "B", st.WithCreateBucketMaximumFileSize(20*1024*1024))
			require.NoError(t, err)
			const cs = appwritetest.ChunkSize
			data := pattern(2*cs + 100)
			path := filepath.Join(t.TempDir(), "big.bin")
			require.NoError(t, os.WriteFile(path, data, 0o600))
			f, err := st.CreateFile("b", "big", file.NewInputFile(path, "big.bin"))
			require.NoError(t, err)
			require.Equal(t, 3, f.ChunksUploaded)

			// A chunk of the completed upload sent again.
			code, body := postChunk(t, ts, "b", "big", "big", data[:cs], 0, len(data))
			if e == appwritetest.EngineIdeal {
				require.Equal(t, 409, code)
				require.Equal(t, "storage_file_already_exists", body["type"])
			} else {
				require.Equal(t, 200, code, "the file, not a conflict")
				require.Equal(t, "big", body["$id"])
				require.EqualValues(t, 3, body["chunksUploaded"])
			}

			// Later chunks without x-appwrite-id.
			small := pattern(cs + 10)
			code, body = postChunk(t, ts, "b", "manual", "", small[:cs], 0, len(small))
			require.Equal(t, 201, code)
			require.EqualValues(t, 1, body["chunksUploaded"])
			code, body = postChunk(t, ts, "b", "manual", "", small[cs:], cs, len(small))
			if e == appwritetest.EngineIdeal {
				require.Equal(t, 400, code)
				require.Equal(t, "storage_invalid_appwrite_id", body["type"])
				return
			}
			require.Equal(t, 201, code, "the form's fileId is used")
			require.Equal(t, "manual", body["$id"])
			require.EqualValues(t, 2, body["chunksUploaded"])
			got, err := st.GetFileDownload("b", "manual")
			require.NoError(t, err)
			require.Equal(t, small, *got)
		})
	}
}

// Signature: Files/Create.php:369 stores $deviceForFiles->getFileHash($path); the local
// device returns md5_file (utopia-php/storage 2.0.5 Local.php:464-467), an S3-type device
// the object's ETag (S3.php:580-585), and a chunked upload is an S3 multipart upload
// (S3.php:181-192, 204-228), whose ETag is md5(concat(part md5s))-<parts>.
func TestEngineS3Signature(t *testing.T) {
	t.Parallel()
	for _, dev := range []appwritetest.StorageDevice{appwritetest.DeviceLocal, appwritetest.DeviceS3} {
		t.Run(string(dev), func(t *testing.T) {
			t.Parallel()
			ts := engineServer(t, appwritetest.EngineMongoDB, appwritetest.Options{StorageDevice: dev})
			st := appwrite.NewStorage(keyClient(ts, ts.AdminKey))
			_, err := st.CreateBucket("b", "B", st.WithCreateBucketMaximumFileSize(20*1024*1024))
			require.NoError(t, err)
			const cs = appwritetest.ChunkSize
			data := pattern(2*cs + 7)
			dir := t.TempDir()
			require.NoError(t, os.WriteFile(filepath.Join(dir, "big.bin"), data, 0o600))
			require.NoError(t, os.WriteFile(filepath.Join(dir, "small.bin"), data[:100], 0o600))
			big, err := st.CreateFile("b", "big", file.NewInputFile(filepath.Join(dir, "big.bin"), "big.bin"))
			require.NoError(t, err)
			small, err := st.CreateFile("b", "small", file.NewInputFile(filepath.Join(dir, "small.bin"), "small.bin"))
			require.NoError(t, err)

			md5hex := func(b []byte) string { s := md5.Sum(b); return hex.EncodeToString(s[:]) }
			require.Equal(t, md5hex(data[:100]), small.Signature, "one part: the ETag is the MD5")
			if dev == appwritetest.DeviceLocal {
				require.Equal(t, md5hex(data), big.Signature)
				return
			}
			var parts []byte
			for off := 0; off < len(data); off += cs {
				s := md5.Sum(data[off:min(off+cs, len(data))])
				parts = append(parts, s[:]...)
			}
			require.Equal(t, md5hex(parts)+"-3", big.Signature)
			require.NotEqual(t, md5hex(data), big.Signature, "not the content's MD5")
		})
	}
}

// Documents/Create.php:155-165 (getSupportForEmptyDocument false → document_missing_data),
// Documents/Update.php:100-102 (no data and no permissions → document_missing_payload),
// Update.php:124-131 and Delete.php:131 (the document is read with authorization
// skipped), Database.php:6301-6320 (update permission when something changes, read
// permission when nothing does; $updatedAt only set when something changes),
// Database.php:7744-7750 (delete permission).
func TestEngineDocumentWrites(t *testing.T) {
	t.Parallel()
	for _, e := range append([]appwritetest.Engine{appwritetest.EngineIdeal}, realEngines...) {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ts := engineServer(t, e, appwritetest.Options{})
			db := engineFixture(t, ts, nil)
			real := e != appwritetest.EngineIdeal

			_, err := db.CreateDocument("main", "c", "empty", map[string]any{})
			if real {
				requireErr(t, err, 400, "document_missing_data")
			} else {
				require.NoError(t, err)
			}
			_, err = db.CreateDocument("main", "c", "d1", map[string]any{"title": "t"})
			require.NoError(t, err)
			_, err = db.UpdateDocument("main", "c", "d1")
			if real {
				requireErr(t, err, 400, "document_missing_payload")
			} else {
				require.NoError(t, err)
			}

			// A user with update and delete on a document but no read.
			uid, jwt, _ := signUp(t, ts, "w@example.com")
			u := "user:" + uid
			_, err = db.CreateDocument("main", "c", "wo", map[string]any{"title": "before"},
				db.WithCreateDocumentPermissions([]string{`update("` + u + `")`, `delete("` + u + `")`}))
			require.NoError(t, err)
			as := appwrite.NewDatabases(jwtClient(ts, jwt))
			_, err = as.GetDocument("main", "c", "wo")
			requireErr(t, err, 404, "document_not_found")
			up, err := as.UpdateDocument("main", "c", "wo", as.WithUpdateDocumentData(map[string]any{"title": "after"}))
			if !real {
				requireErr(t, err, 404, "document_not_found")
				return
			}
			require.NoError(t, err, "update needs no read permission")
			var upd struct{ Title string }
			require.NoError(t, up.Decode(&upd))
			require.Equal(t, "after", upd.Title)
			// Nothing changes: the read permission is what is checked.
			_, err = as.UpdateDocument("main", "c", "wo", as.WithUpdateDocumentData(map[string]any{"title": "after"}))
			requireErr(t, err, 401, "user_unauthorized")
			same, err := db.UpdateDocument("main", "c", "wo", db.WithUpdateDocumentData(map[string]any{"title": "after"}))
			require.NoError(t, err)
			require.Equal(t, up.UpdatedAt, same.UpdatedAt, "a no-op keeps $updatedAt")
			_, err = as.DeleteDocument("main", "c", "wo")
			require.NoError(t, err, "delete needs no read permission")

			// Read-only: update refused with 401, not hidden behind 404.
			_, err = db.CreateDocument("main", "c", "ro", map[string]any{"title": "x"},
				db.WithCreateDocumentPermissions([]string{permission.Read(role.User(uid, ""))}))
			require.NoError(t, err)
			_, err = as.UpdateDocument("main", "c", "ro", as.WithUpdateDocumentData(map[string]any{"title": "y"}))
			requireErr(t, err, 401, "user_unauthorized")
			_, err = as.DeleteDocument("main", "c", "ro")
			requireErr(t, err, 401, "user_unauthorized")
		})
	}
}

// Abuse limits, app/controllers/api/account.php at 1.9.6: createJWT l.3113-3115
// (APP_LIMIT_WRITE_RATE_DEFAULT*2 = 120 per APP_LIMIT_WRITE_RATE_PERIOD_DEFAULT = 60 s,
// app/init/constants.php:42-43, key url+userId); sign-up l.258 (10, default key url+ip
// and time 3600 s, app/controllers/shared/api.php:495, 505); email sessions l.902-904
// (10 per hour, key url+email, reset by a 201, shared/api.php:863-895). Counting:
// utopia-php/abuse 1.4.1 TimeLimit.php:51-66 (a refused request does not count) and
// TimeLimit/Redis.php:27 (fixed window aligned to the epoch). API keys are exempt
// (shared/api.php:490-493).
func TestEngineRateLimits(t *testing.T) {
	t.Parallel()
	for _, e := range realEngines {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock(0)
			ts := engineServer(t, e, appwritetest.Options{Now: clock.Now})

			t.Run("createJWT per user", func(t *testing.T) {
				acc := appwrite.NewAccount(anonClient(ts))
				_, err := acc.Create(id.Unique(), "jwt@example.com", "correct horse battery")
				require.NoError(t, err)
				_, err = acc.CreateEmailPasswordSession("jwt@example.com", "correct horse battery")
				require.NoError(t, err)
				for i := 0; i < 120; i++ {
					_, err := acc.CreateJWT()
					require.NoError(t, err, "jwt %d", i+1)
				}
				_, err = acc.CreateJWT()
				requireErr(t, err, 429, "general_rate_limit_exceeded")
				_, err = acc.CreateJWT()
				requireErr(t, err, 429, "general_rate_limit_exceeded")
				clock.Advance(60 * time.Second)
				_, err = acc.CreateJWT()
				require.NoError(t, err, "a new 60 s window")
			})

			t.Run("sign-up per IP", func(t *testing.T) {
				c := anonClient(ts)
				c.AddHeader("X-Forwarded-For", "203.0.113.7")
				acc := appwrite.NewAccount(c)
				for i := 0; i < 10; i++ {
					_, err := acc.Create(id.Unique(), fmt.Sprintf("ip%d@example.com", i), "correct horse battery")
					require.NoError(t, err)
				}
				_, err := acc.Create(id.Unique(), "ip10@example.com", "correct horse battery")
				requireErr(t, err, 429, "general_rate_limit_exceeded")
				other := anonClient(ts)
				other.AddHeader("X-Forwarded-For", "203.0.113.8")
				_, err = appwrite.NewAccount(other).Create(id.Unique(), "ip10@example.com", "correct horse battery")
				require.NoError(t, err, "another IP has its own count")
				// A server key is exempt.
				_, err = appwrite.NewUsers(keyClient(ts, ts.AdminKey)).Create(id.Unique(), appwrite.NewUsers(keyClient(ts, ts.AdminKey)).WithCreateEmail("key@example.com"))
				require.NoError(t, err)
			})

			t.Run("failed email logins per email", func(t *testing.T) {
				users := appwrite.NewUsers(keyClient(ts, ts.AdminKey))
				_, err := users.Create(id.Unique(), users.WithCreateEmail("login@example.com"), users.WithCreatePassword("correct horse battery"))
				require.NoError(t, err)
				login := func(pw string) error {
					_, err := appwrite.NewAccount(anonClient(ts)).CreateEmailPasswordSession("login@example.com", pw)
					return err
				}
				for i := 0; i < 9; i++ {
					requireErr(t, login("wrong password!"), 401, "user_invalid_credentials")
				}
				require.NoError(t, login("correct horse battery"), "the 10th attempt succeeds and resets the count")
				for i := 0; i < 10; i++ {
					requireErr(t, login("wrong password!"), 401, "user_invalid_credentials")
				}
				requireErr(t, login("correct horse battery"), 429, "general_rate_limit_exceeded")
				// Another email is counted apart.
				_, err = appwrite.NewAccount(anonClient(ts)).CreateEmailPasswordSession("other@example.com", "wrong password!")
				requireErr(t, err, 401, "user_invalid_credentials")
				clock.Advance(time.Hour)
				require.NoError(t, login("correct horse battery"), "a new hour")
			})
		})
	}
}

// Tests that need more than upstream allows raise the limits explicitly.
func TestRateLimitsRaisedAndOff(t *testing.T) {
	t.Parallel()
	raised := appwritetest.UpstreamRateLimits().Scaled(2)
	for name, opts := range map[string]appwritetest.Options{
		"raised": {Engine: appwritetest.EngineMongoDB, RateLimits: &raised},
		"ideal":  {Engine: appwritetest.EngineIdeal},
		"off":    {Engine: appwritetest.EngineMariaDB, RateLimits: appwritetest.NoRateLimits()},
	} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			ts := appwritetest.NewTestServer(t, opts)
			_, _, c := signUp(t, ts, "many@example.com")
			acc := appwrite.NewAccount(c)
			for i := 0; i < 121; i++ {
				_, err := acc.CreateJWT()
				require.NoError(t, err, "jwt %d", i+1)
			}
		})
	}
}

// The rate-limit headers Appwrite sets (shared/api.php:525-530).
func TestRateLimitHeaders(t *testing.T) {
	t.Parallel()
	clock := newFakeClock(0)
	ts := engineServer(t, appwritetest.EngineMongoDB, appwritetest.Options{Now: clock.Now})
	req, _ := http.NewRequest("POST", ts.URL+"/account", strings.NewReader(`{"userId":"unique()","email":"h@example.com","password":"correct horse battery"}`))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Appwrite-Project", ts.Project)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, 201, resp.StatusCode)
	require.Equal(t, "10", resp.Header.Get("X-RateLimit-Limit"))
	require.Equal(t, "9", resp.Header.Get("X-RateLimit-Remaining"))
	reset := clock.Now().Unix()
	reset = reset - reset%3600 + 3600
	require.Equal(t, fmt.Sprint(reset), resp.Header.Get("X-RateLimit-Reset"))
}

// The environment variable switches the engine of every NewTestServer (and New: make dev,
// make emulator) that does not choose one; unset, it is mongodb, Appwrite 1.9.6's default
// (.env:37 _APP_DB_ADAPTER=mongodb, app/init/registers.php:155).
func TestEngineFromEnv(t *testing.T) {
	t.Setenv(appwritetest.EngineEnv, "MariaDB")
	ts := appwritetest.NewTestServer(t, appwritetest.Options{})
	require.Equal(t, appwritetest.EngineMariaDB, ts.Engine())
	s, err := appwritetest.New(appwritetest.Options{ProjectID: "p"})
	require.NoError(t, err)
	require.Equal(t, appwritetest.EngineMariaDB, s.Engine())
	require.NoError(t, s.Close())
	ts = appwritetest.NewTestServer(t, appwritetest.Options{Engine: appwritetest.EngineMongoDB})
	require.Equal(t, appwritetest.EngineMongoDB, ts.Engine())
	_, err = appwritetest.ParseEngine("postgres")
	require.Error(t, err)
	_, err = appwritetest.New(appwritetest.Options{ProjectID: "p", Engine: "nope"})
	require.Error(t, err)
	t.Setenv(appwritetest.EngineEnv, "")
	require.Equal(t, appwritetest.EngineMongoDB, appwritetest.NewTestServer(t, appwritetest.Options{}).Engine())
	s, err = appwritetest.New(appwritetest.Options{ProjectID: "p"})
	require.NoError(t, err)
	require.Equal(t, appwritetest.EngineMongoDB, s.Engine(), "the default is Appwrite 1.9.6's")
	require.NoError(t, s.Close())
	names := []string{}
	for _, e := range appwritetest.Engines {
		names = append(names, string(e))
	}
	sort.Strings(names)
	require.Equal(t, []string{"ideal", "mariadb", "mongodb"}, names)
}

// MariaDB refuses an attribute once the collection's row width would reach 65,535 bytes
// (utopia-php/database 6.0.0 Database.php:3242-3259 checkAttribute, SQL.php:1145-1148
// getDocumentSizeLimit and 1159-1260 getAttributeWidth: VARCHAR at 4 bytes a character
// up to 16,381 characters, a TEXT pointer of 20 beyond); Appwrite answers 400
// attribute_limit_exceeded. MongoDB has no such limit (Mongo.php:3424-3427).
func TestEngineRowWidth(t *testing.T) {
	t.Parallel()
	for _, e := range realEngines {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ts := engineServer(t, e, appwritetest.Options{ProcessingDelay: time.Nanosecond})
			// conv 36, seq, title 64: 1,067+145+8+257 = 1,477 bytes.
			db := engineFixture(t, ts, nil)
			_, err := db.CreateStringAttribute("main", "c", "big1", 16000, false) // 64,002: 65,479 in all
			require.NoError(t, err)
			_, err = db.CreateStringAttribute("main", "c", "long", 100000, false) // TEXT: 20 more
			require.NoError(t, err)
			_, err = db.CreateStringAttribute("main", "c", "small", 10, false) // 41 more: 65,540
			if e == appwritetest.EngineMariaDB {
				requireErr(t, err, 400, "attribute_limit_exceeded")
			} else {
				require.NoError(t, err)
			}
			_, err = db.CreateBooleanAttribute("main", "c", "flag", false) // 1 more: 65,500
			require.NoError(t, err)
		})
	}
}
