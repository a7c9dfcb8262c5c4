package appwritetest_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"net/url"
	"slices"
	"testing"
	"time"

	"privateassistant/schema/appwritetest"
)

// benchColl is a collection shaped like messages and runs (schema/model.go): a unique
// index over one string (sequence_key) and one over two strings (owner_request).
type benchColl struct {
	ts   *appwritetest.TestServer
	coll string
	n    int // documents it holds
}

// rawCall sends one request through the emulator's handler in-process (no network), so
// the figure is the emulator's own work per request.
func rawCall(ts *appwritetest.TestServer, method, path string, body any) (int, []byte) {
	var rd *bytes.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	} else {
		rd = bytes.NewReader(nil)
	}
	req := httptest.NewRequest(method, "/v1"+path, rd)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("X-Appwrite-Project", ts.Project)
	req.Header.Set("X-Appwrite-Key", ts.AdminKey)
	rec := httptest.NewRecorder()
	ts.Server.ServeHTTP(rec, req)
	return rec.Code, rec.Body.Bytes()
}

func mustCall(tb testing.TB, ts *appwritetest.TestServer, want int, method, path string, body any) []byte {
	tb.Helper()
	code, out := rawCall(ts, method, path, body)
	if code != want {
		tb.Fatalf("%s %s: %d %s (want %d)", method, path, code, out, want)
	}
	return out
}

// newBenchColl makes collection coll in database "main" (created when absent) and fills
// it with n documents through the API.
func newBenchColl(tb testing.TB, ts *appwritetest.TestServer, coll string, n int) *benchColl {
	tb.Helper()
	if code, _ := rawCall(ts, "GET", "/databases/main", nil); code == 404 {
		mustCall(tb, ts, 201, "POST", "/databases", map[string]any{"databaseId": "main", "name": "Main"})
	}
	base := "/databases/main/collections"
	mustCall(tb, ts, 201, "POST", base, map[string]any{"collectionId": coll, "name": coll, "documentSecurity": true,
		"permissions": []string{}})
	for _, a := range []struct {
		key  string
		size int
	}{{"ownerId", 36}, {"conversationId", 36}, {"requestId", 64}, {"sequenceKey", 48}, {"text", 4096}} {
		mustCall(tb, ts, 202, "POST", base+"/"+coll+"/attributes/string", map[string]any{"key": a.key, "size": a.size, "required": false})
	}
	mustCall(tb, ts, 202, "POST", base+"/"+coll+"/attributes/integer", map[string]any{"key": "sequence", "required": false, "min": 1})
	waitCollAvailable(tb, ts, coll)
	mustCall(tb, ts, 202, "POST", base+"/"+coll+"/indexes", map[string]any{"key": "sequence_key", "type": "unique", "attributes": []string{"sequenceKey"}})
	mustCall(tb, ts, 202, "POST", base+"/"+coll+"/indexes", map[string]any{"key": "owner_request", "type": "unique", "attributes": []string{"ownerId", "requestId"}})
	mustCall(tb, ts, 202, "POST", base+"/"+coll+"/indexes", map[string]any{"key": "conversation_order", "type": "key", "attributes": []string{"conversationId", "sequence"}})
	waitCollAvailable(tb, ts, coll)
	c := &benchColl{ts: ts, coll: coll}
	for i := 0; i < n; i++ {
		mustCall(tb, ts, 201, "POST", c.docsPath(""), c.doc(fmt.Sprintf("d%06d", i), i))
	}
	c.n = n
	return c
}

func waitCollAvailable(tb testing.TB, ts *appwritetest.TestServer, coll string) {
	tb.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for {
		var c struct {
			Attributes []struct{ Status string } `json:"attributes"`
			Indexes    []struct{ Status string } `json:"indexes"`
		}
		_ = json.Unmarshal(mustCall(tb, ts, 200, "GET", "/databases/main/collections/"+coll, nil), &c)
		ready := true
		for _, a := range c.Attributes {
			ready = ready && a.Status == "available"
		}
		for _, i := range c.Indexes {
			ready = ready && i.Status == "available"
		}
		if ready {
			return
		}
		if time.Now().After(deadline) {
			tb.Fatalf("collection %s not available after 5 s", coll)
		}
		time.Sleep(time.Millisecond) // polling the worker's clock, not proving anything
	}
}

func (c *benchColl) docsPath(id string) string {
	p := "/databases/main/collections/" + c.coll + "/documents"
	if id != "" {
		p += "/" + id
	}
	return p
}

// doc is document i: its own conversation position, request and sequence key.
func (c *benchColl) doc(id string, i int) map[string]any {
	owner := fmt.Sprintf("user%03d", i%100)
	conv := fmt.Sprintf("conv%05d", i/10)
	return map[string]any{"documentId": id, "data": map[string]any{
		"ownerId": owner, "conversationId": conv, "requestId": "req-" + id,
		"sequence": i%10 + 1, "sequenceKey": fmt.Sprintf("%s.%d", conv, i%10+1),
		"text": "a message of ordinary length, as admission writes it",
	}, "permissions": []string{`read("user:` + owner + `")`}}
}

// writeOnce times one create, one update that moves the document's unique keys, and one
// delete, so the collection keeps its size. It returns the three durations.
func (c *benchColl) writeOnce(tb testing.TB, k int) (create, update, del time.Duration) {
	id := fmt.Sprintf("x%08d", k)
	body := c.doc(id, c.n+k)
	t0 := time.Now()
	code, out := rawCall(c.ts, "POST", c.docsPath(""), body)
	t1 := time.Now()
	if code != 201 {
		tb.Fatalf("create: %d %s", code, out)
	}
	up := map[string]any{"data": map[string]any{"sequenceKey": fmt.Sprintf("moved.%d", k), "requestId": "moved-" + id}}
	t2 := time.Now()
	code, out = rawCall(c.ts, "PATCH", c.docsPath(id), up)
	t3 := time.Now()
	if code != 200 {
		tb.Fatalf("update: %d %s", code, out)
	}
	t4 := time.Now()
	code, out = rawCall(c.ts, "DELETE", c.docsPath(id), nil)
	t5 := time.Now()
	if code != 204 {
		tb.Fatalf("delete: %d %s", code, out)
	}
	return t1.Sub(t0), t3.Sub(t2), t5.Sub(t4)
}

func medianDur(xs []time.Duration) time.Duration {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func medianF(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func usOf(d time.Duration) float64 { return float64(d) / float64(time.Microsecond) }

// BenchmarkUniqueWrites: the cost of a write into a collection with unique indexes must
// not grow with the collection (issue 15: make load's admissions slowed from 3 to 16 ms
// as the emulator's linear unique check went over every document on every write).
//
// Two collections of the same shape, one holding 1,000 and one 20,000 documents; every
// iteration creates, updates (moving its unique keys) and deletes one document in each,
// in alternating order, timing each request through the emulator's handler. It reports
// the median µs of each write at each size and the median over iterations of the
// 20k/1k ratio (goal ~1.0). Sub-benchmarks docs=1000 and docs=20000 write into one size
// only, for a CPU profile of each. Before the documents-by-key maps (commit 09fa79f,
// mongodb, the same benchmark): create 565 µs at 1k and 21,851 µs at 20k, median ratio
// 37; update ratio 77 (filling the 20k collection took 7 minutes).
//
//	flock /tmp/pa-bench.lock go test -run '^$' -bench BenchmarkUniqueWrites -benchtime 2000x ./schema/appwritetest/
func BenchmarkUniqueWrites(b *testing.B) {
	for _, v := range []struct {
		e       appwritetest.Engine
		persist bool
	}{{appwritetest.EngineMongoDB, false}, {appwritetest.EngineMariaDB, false}, {appwritetest.EngineMongoDB, true}} {
		name := string(v.e)
		if v.persist {
			name += "+datadir"
		}
		e := name
		b.Run(name, func(b *testing.B) {
			// One emulator per size, so that each holds (and, with a data directory,
			// snapshots) only its own collection.
			server := func() *appwritetest.TestServer {
				o := appwritetest.Options{Engine: v.e, ProcessingDelay: time.Nanosecond, RateLimits: appwritetest.NoRateLimits()}
				if v.persist {
					o.DataDir = b.TempDir()
				}
				return appwritetest.NewTestServer(b, o)
			}
			small := newBenchColl(b, server(), "small", 1000)
			large := newBenchColl(b, server(), "large", 20000)
			k := 0
			for _, c := range []*benchColl{small, large} {
				b.Run(fmt.Sprintf("docs=%d", c.n), func(b *testing.B) {
					var cr, up, de []time.Duration
					for i := 0; i < b.N; i++ {
						k++
						x, y, z := c.writeOnce(b, k)
						cr, up, de = append(cr, x), append(up, y), append(de, z)
					}
					b.ReportMetric(usOf(medianDur(cr)), "create-µs")
					b.ReportMetric(usOf(medianDur(up)), "update-µs")
					b.ReportMetric(usOf(medianDur(de)), "delete-µs")
				})
			}
			// A list like admission's maxSequence (equal + orderDesc + limit 1): its equal
			// filter reads candidates from a value index (uniqueindex.go). Before: every
			// document sorted, then scanned: 1.7 ms at 1k, 80 ms at 20k.
			b.Run("list", func(b *testing.B) {
				var ls, ll []time.Duration
				for i := 0; i < b.N; i++ {
					for _, c := range []*benchColl{small, large} {
						q := url.Values{"queries[]": {
							fmt.Sprintf(`{"method":"equal","attribute":"conversationId","values":["conv%05d"]}`, i%(c.n/10)),
							`{"method":"orderDesc","attribute":"sequence"}`, `{"method":"limit","values":[1]}`}}
						t0 := time.Now()
						code, out := rawCall(c.ts, "GET", c.docsPath("")+"?"+q.Encode(), nil)
						d := time.Since(t0)
						if code != 200 || !bytes.Contains(out, []byte(`"total":10`)) {
							b.Fatalf("list: %d %s", code, out)
						}
						if c == small {
							ls = append(ls, d)
						} else {
							ll = append(ll, d)
						}
					}
				}
				b.ReportMetric(usOf(medianDur(ls)), "list-µs@1k")
				b.ReportMetric(usOf(medianDur(ll)), "list-µs@20k")
				b.ReportMetric(usOf(medianDur(ll))/usOf(medianDur(ls)), "list-20k/1k")
			})
			b.Run("ratio", func(b *testing.B) {
				var cs, cl, us, ul, ds, dl []time.Duration
				var rc, ru, rd []float64
				var ws, wl time.Duration // wall time of each size's writes, waits included
				for i := 0; i < b.N; i++ {
					var a, z [3]time.Duration
					k++
					if i%2 == 0 {
						a[0], a[1], a[2] = small.writeOnce(b, k)
						z[0], z[1], z[2] = large.writeOnce(b, k)
					} else {
						z[0], z[1], z[2] = large.writeOnce(b, k)
						a[0], a[1], a[2] = small.writeOnce(b, k)
					}
					ws += a[0] + a[1] + a[2]
					wl += z[0] + z[1] + z[2]
					cs, cl = append(cs, a[0]), append(cl, z[0])
					us, ul = append(us, a[1]), append(ul, z[1])
					ds, dl = append(ds, a[2]), append(dl, z[2])
					rc = append(rc, float64(z[0])/float64(a[0]))
					ru = append(ru, float64(z[1])/float64(a[1]))
					rd = append(rd, float64(z[2])/float64(a[2]))
				}
				b.ReportMetric(usOf(medianDur(cs)), "create-µs@1k")
				b.ReportMetric(usOf(medianDur(cl)), "create-µs@20k")
				b.ReportMetric(medianF(rc), "create-20k/1k")
				b.ReportMetric(medianF(ru), "update-20k/1k")
				b.ReportMetric(medianF(rd), "delete-20k/1k")
				b.ReportMetric(float64(wl)/float64(ws), "mean-20k/1k")
				if b.N >= 100 {
					b.Logf("%s: create %.0f µs at 1k docs, %.0f µs at 20k (median ratio %.2f); update %.0f / %.0f µs (%.2f); delete %.0f / %.0f µs (%.2f); mean of all writes %.0f / %.0f µs (%.2f); before the documents-by-key maps (09fa79f, mongodb): create 565 / 21,851 µs (37)",
						e, usOf(medianDur(cs)), usOf(medianDur(cl)), medianF(rc), usOf(medianDur(us)), usOf(medianDur(ul)), medianF(ru),
						usOf(medianDur(ds)), usOf(medianDur(dl)), medianF(rd),
						usOf(ws)/float64(3*b.N), usOf(wl)/float64(3*b.N), float64(wl)/float64(ws))
				}
			})
		})
	}
}
