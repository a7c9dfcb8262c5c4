package appwritetest_test

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/stretchr/testify/require"

	"privateassistant/schema/appwritetest"
)

// The unique check looks keys up in documents-by-key maps (uniqueindex.go): a document
// whose key changed, or that was deleted, must not keep its old key in the index, and its
// new key must be enforced.
func TestUniqueKeysFollowUpdatesAndDeletes(t *testing.T) {
	t.Parallel()
	for _, e := range realEngines {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			db := engineFixture(t, engineServer(t, e, appwritetest.Options{}), nil)
			for i, title := range []string{"alpha", "beta", "gamma"} {
				_, err := db.CreateDocument("main", "c", "k"+title, map[string]any{"conv": "c1", "seq": 10 + i, "title": title})
				require.NoError(t, err)
			}
			_, err := db.CreateDocument("main", "c", "dup", map[string]any{"conv": "c1", "seq": 20, "title": "alpha"})
			requireErr(t, err, 409, "document_already_exists")

			// alpha → delta: "alpha" is free again, "delta" is taken.
			_, err = db.UpdateDocument("main", "c", "kalpha", db.WithUpdateDocumentData(map[string]any{"title": "delta"}))
			require.NoError(t, err)
			_, err = db.CreateDocument("main", "c", "n1", map[string]any{"conv": "c1", "seq": 21, "title": "alpha"})
			require.NoError(t, err)
			_, err = db.CreateDocument("main", "c", "n2", map[string]any{"conv": "c1", "seq": 22, "title": "delta"})
			requireErr(t, err, 409, "document_already_exists")

			// A deleted document's key is free.
			_, err = db.DeleteDocument("main", "c", "kbeta")
			require.NoError(t, err)
			_, err = db.CreateDocument("main", "c", "n3", map[string]any{"conv": "c1", "seq": 23, "title": "beta"})
			require.NoError(t, err)
			_, err = db.UpdateDocument("main", "c", "kgamma", db.WithUpdateDocumentData(map[string]any{"title": "beta"}))
			requireErr(t, err, 409, "document_already_exists")
		})
	}
}

// foldID is EqualFold's equivalence: two ids fold alike exactly when EqualFold says they
// are equal (Kelvin sign, long s, final sigma, invalid UTF-8 and U+FFFD included).
func TestFoldIDIsEqualFold(t *testing.T) {
	t.Parallel()
	atoms := []string{"", "k", "K", "\u212a", "s", "S", "\u017f", "ß", "ẞ", "σ", "Σ", "ς", "a", "A", "é", "É",
		"\xff", "\xfe", "\ufffd", "1", "-", "ǅ", "ǆ", "Ǆ", "İ", "i", "ı", "I"}
	var xs []string
	for _, a := range atoms {
		for _, b := range atoms {
			xs = append(xs, a+b)
		}
	}
	folded := make([]string, len(xs))
	for i, x := range xs {
		folded[i] = appwritetest.FoldID(x)
	}
	for i, a := range xs {
		for j, b := range xs {
			if strings.EqualFold(a, b) != (folded[i] == folded[j]) {
				t.Fatalf("EqualFold(%q, %q) = %v, foldID %q %q", a, b, strings.EqualFold(a, b), folded[i], folded[j])
			}
		}
	}
}

// After many creates, updates, deletes and lists, each answer is what a model of the
// unique indexes says (and a list filtered with equal on a string attribute returns what
// the model holds) (a key freed by an update or a delete is free; a taken one is refused on
// create and on update; a null part keeps a document out of the index; ids are unique
// regardless of case on mongodb and mariadb, titles compare ignoring case on mariadb),
// and the emulator's documents-by-key maps hold exactly what its documents hold, and its
// snapshot (with each document's encoding kept between snapshots) what its state holds.
func TestUniqueIndexesFollowManyWrites(t *testing.T) {
	t.Parallel()
	for _, e := range append([]appwritetest.Engine{appwritetest.EngineIdeal}, realEngines...) {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ts := engineServer(t, e, appwritetest.Options{RateLimits: appwritetest.NoRateLimits()})
			engineFixture(t, ts, nil) // conv (string), seq (integer), title (string); unique (conv, seq), (conv, title)
			path := "/databases/main/collections/c/documents"
			type doc struct {
				conv, title string // "" is null
				seq         int    // 0 is null
			}
			docs := map[string]doc{} // the model
			foldTitle := e == appwritetest.EngineMariaDB
			foldIDs := e != appwritetest.EngineIdeal
			mongo := e == appwritetest.EngineMongoDB
			// clash reports whether d's keys collide with another document's.
			clash := func(id string, d doc) bool {
				for oid, o := range docs {
					if oid == id || d.conv == "" || o.conv != d.conv {
						continue
					}
					// (conv, seq): on mongodb an integer part keeps the document out.
					if !mongo && d.seq != 0 && o.seq == d.seq {
						return true
					}
					if d.title != "" && o.title != "" && (o.title == d.title || foldTitle && strings.EqualFold(o.title, d.title)) {
						return true
					}
				}
				return false
			}
			idTaken := func(id string) bool {
				for oid := range docs {
					if oid == id || foldIDs && strings.EqualFold(oid, id) {
						return true
					}
				}
				return false
			}
			data := func(d doc) map[string]any {
				m := map[string]any{"conv": nil, "title": nil, "seq": nil}
				if d.conv != "" {
					m["conv"] = d.conv
				}
				if d.title != "" {
					m["title"] = d.title
				}
				if d.seq != 0 {
					m["seq"] = d.seq
				}
				return m
			}
			rng := rand.New(rand.NewPCG(15, uint64(len(e))))
			titles := []string{"", "alpha", "Alpha", "beta", "BETA", "gamma", "delta"}
			randDoc := func() doc {
				d := doc{conv: []string{"", "c1", "c2"}[rng.IntN(3)], title: titles[rng.IntN(len(titles))], seq: rng.IntN(6)}
				if d.conv == "" && rng.IntN(2) == 0 {
					d.conv = "c1"
				}
				return d
			}
			// freed counts writes that took a key another document had held and gave up.
			var refusedCreate, refusedUpdate, reusedAfterUpdate, reusedAfterDelete, lists int
			given := map[string]string{} // key → how its last holder gave it up ("update", "delete")
			keysOf := func(d doc) []string {
				var ks []string
				if d.conv != "" && d.title != "" {
					tl := d.title
					if foldTitle {
						tl = strings.ToLower(tl)
					}
					ks = append(ks, "t|"+d.conv+"|"+tl)
				}
				if !mongo && d.conv != "" && d.seq != 0 {
					ks = append(ks, fmt.Sprintf("s|%s|%d", d.conv, d.seq))
				}
				return ks
			}
			took := func(d doc) {
				for _, k := range keysOf(d) {
					switch given[k] {
					case "update":
						reusedAfterUpdate++
					case "delete":
						reusedAfterDelete++
					}
					delete(given, k)
				}
			}
			gave := func(d doc, how string) {
				for _, k := range keysOf(d) {
					given[k] = how
				}
			}
			for n := 0; n < 1000; n++ {
				if n == 500 {
					// An attribute with a default is backfilled onto every document in place.
					require.NoError(t, ts.CheckSnapshot())
					mustCall(t, ts, 202, "POST", "/databases/main/collections/c/attributes/string",
						map[string]any{"key": "note", "size": 10, "required": false, "default": "x"})
					require.NoError(t, ts.CheckIndexes())
					require.NoError(t, ts.CheckSnapshot())
				}
				id := fmt.Sprintf("d%02d", rng.IntN(25))
				switch op := rng.IntN(12); {
				case op >= 10: // list: equal on a string attribute reads an index (uniqueindex.go)
					ws := []string{titles[1+rng.IntN(len(titles)-1)]}
					if rng.IntN(3) == 0 {
						ws = append(ws, titles[1+rng.IntN(len(titles)-1)])
					}
					qs := []string{mustJSON(t, map[string]any{"method": "equal", "attribute": "title", "values": ws}),
						`{"method":"limit","values":[100]}`}
					conv := ""
					if rng.IntN(2) == 0 {
						conv = "c1"
						qs = append(qs, `{"method":"equal","attribute":"conv","values":["c1"]}`)
					}
					var want []string
					for oid, o := range docs {
						for _, w := range ws {
							if o.title != "" && (o.title == w || foldTitle && strings.EqualFold(o.title, w)) && (conv == "" || o.conv == conv) {
								want = append(want, oid)
								break
							}
						}
					}
					code, out := rawCall(ts, "GET", path+"?"+url.Values{"queries[]": qs}.Encode(), nil)
					require.Equal(t, 200, code, "list %v: %s", qs, out)
					var l struct {
						Documents []struct {
							ID string `json:"$id"`
						} `json:"documents"`
					}
					require.NoError(t, json.Unmarshal(out, &l))
					var got []string
					for _, d := range l.Documents {
						got = append(got, d.ID)
					}
					require.ElementsMatch(t, want, got, "list %v", qs)
					lists++
				case op < 4: // create
					if _, ok := docs[id]; ok && rng.IntN(2) == 0 {
						id = strings.ToUpper(id) // the same id in another case
					}
					d := randDoc()
					code, out := rawCall(ts, "POST", path, map[string]any{"documentId": id, "data": data(d)})
					if idTaken(id) || clash(id, d) {
						require.Equal(t, 409, code, "create %s %+v: %s", id, d, out)
						require.Contains(t, string(out), "document_already_exists")
						if !idTaken(id) {
							refusedCreate++
						}
						break
					}
					require.Equal(t, 201, code, "create %s %+v: %s", id, d, out)
					took(d)
					docs[id] = d
				case op < 8: // update
					old, ok := docs[id]
					d := randDoc()
					code, out := rawCall(ts, "PATCH", path+"/"+id, map[string]any{"data": data(d)})
					if !ok {
						require.Equal(t, 404, code, "update %s: %s", id, out)
						break
					}
					if clash(id, d) {
						require.Equal(t, 409, code, "update %s %+v: %s", id, d, out)
						require.Contains(t, string(out), "document_already_exists")
						refusedUpdate++
						break
					}
					require.Equal(t, 200, code, "update %s %+v: %s", id, d, out)
					gave(old, "update")
					took(d)
					docs[id] = d
				default: // delete
					old, ok := docs[id]
					code, out := rawCall(ts, "DELETE", path+"/"+id, nil)
					if !ok {
						require.Equal(t, 404, code, "delete %s: %s", id, out)
						break
					}
					require.Equal(t, 204, code, "delete %s: %s", id, out)
					gave(old, "delete")
					delete(docs, id)
				}
				require.NoError(t, ts.CheckIndexes(), "after write %d", n)
				if n%25 == 0 {
					require.NoError(t, ts.CheckSnapshot(), "after write %d", n)
				}
			}
			// Both unique indexes were used (on mongodb (conv, seq) holds no document: its
			// integer part keeps every document out of the partial index).
			built := 2
			if mongo {
				built = 1
			}
			require.Equal(t, built, ts.IndexesBuilt("main", "c"))
			// Each case happened, more than once.
			require.Greater(t, refusedCreate, 5, "creates refused for a taken key")
			require.Greater(t, refusedUpdate, 5, "updates refused for a taken key")
			require.Greater(t, reusedAfterUpdate, 5, "keys taken after an update freed them")
			require.Greater(t, reusedAfterDelete, 5, "keys taken after a delete freed them")
			require.Greater(t, lists, 50)
			t.Logf("%d documents; refused: %d creates, %d updates; keys reused after an update %d, after a delete %d",
				len(docs), refusedCreate, refusedUpdate, reusedAfterUpdate, reusedAfterDelete)
		})
	}
}

// A restarted emulator enforces the unique indexes over the documents it loaded, and its
// snapshot holds the writes made after documents' encodings were kept (snapshot.go).
func TestUniqueIndexesAfterRestart(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	start := func() *appwritetest.TestServer {
		s, err := appwritetest.New(appwritetest.Options{ProjectID: "p", DataDir: dir, Engine: appwritetest.EngineMongoDB,
			Keys: map[string][]string{"admin-key-0123456789abcdef": appwritetest.AllScopes}, ProcessingDelay: time.Millisecond})
		require.NoError(t, err)
		return &appwritetest.TestServer{Server: s, URL: serve(t, s), Project: "p", AdminKey: "admin-key-0123456789abcdef"}
	}
	ts := start()
	db := engineFixture(t, ts, nil)
	for i, title := range []string{"alpha", "beta", "gamma"} {
		_, err := db.CreateDocument("main", "c", "k"+title, map[string]any{"conv": "c1", "seq": 10 + i, "title": title})
		require.NoError(t, err)
	}
	require.NoError(t, ts.CheckSnapshot()) // every document's encoding is kept now
	_, err := db.UpdateDocument("main", "c", "kalpha", db.WithUpdateDocumentData(map[string]any{"title": "delta"}))
	require.NoError(t, err)
	_, err = db.DeleteDocument("main", "c", "kbeta")
	require.NoError(t, err)
	require.NoError(t, ts.Close())

	ts = start()
	t.Cleanup(func() { _ = ts.Close() })
	db = appwrite.NewDatabases(keyClient(ts, ts.AdminKey))
	_, err = db.CreateDocument("main", "c", "n1", map[string]any{"conv": "c1", "seq": 21, "title": "delta"})
	requireErr(t, err, 409, "document_already_exists")
	_, err = db.CreateDocument("main", "c", "n2", map[string]any{"conv": "c1", "seq": 22, "title": "alpha"})
	require.NoError(t, err)
	_, err = db.CreateDocument("main", "c", "n3", map[string]any{"conv": "c1", "seq": 23, "title": "beta"})
	require.NoError(t, err)
	_, err = db.UpdateDocument("main", "c", "kgamma", db.WithUpdateDocumentData(map[string]any{"title": "delta"}))
	requireErr(t, err, 409, "document_already_exists")
	_, err = db.CreateDocument("main", "c", "KGAMMA", map[string]any{"conv": "c2", "seq": 1, "title": "x"})
	requireErr(t, err, 409, "document_already_exists") // ids are unique regardless of case
	require.NoError(t, ts.CheckIndexes())
	require.NoError(t, ts.CheckSnapshot())
}

func mustJSON(t *testing.T, v any) string {
	t.Helper()
	b, err := json.Marshal(v)
	require.NoError(t, err)
	return string(b)
}
