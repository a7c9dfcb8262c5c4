package appwritetest

import (
	"testing"
	"time"
)

// FuzzQueries feeds arbitrary queries[] strings to the parser and evaluator: they must
// answer with an Appwrite error or a result, never panic.
func FuzzQueries(f *testing.F) {
	for _, s := range []string{
		`{"method":"equal","attribute":"n","values":[1]}`,
		`{"method":"or","values":[{"method":"equal","attribute":"s","values":["a"]},{"method":"isNull","attribute":"n"}]}`,
		`{"method":"cursorAfter","values":["d1"]}`, `{"method":"limit","values":[-1]}`,
		`{"method":"between","attribute":"n","values":[1]}`, `{"method":"select","values":[["x"]]}`,
	} {
		f.Add(s)
	}
	now := time.Now()
	lo, hi := int64(-10), int64(10)
	col := &collection{ID: "c", Docs: map[string]*document{}, Attributes: []*attribute{
		{Key: "n", Type: "integer", Status: "available", MinInt: &lo, MaxInt: &hi},
		{Key: "s", Type: "string", Size: 10, Status: "available"},
	}}
	for i, id := range []string{"d1", "d2", "d3"} {
		col.Docs[id] = &document{ID: id, Seq: int64(i + 1), CreatedAt: now, UpdatedAt: now, Data: map[string]any{"n": int64(i), "s": id}}
	}
	f.Fuzz(func(t *testing.T, s string) {
		q, err := parseQuery(s)
		if err != nil {
			return
		}
		for _, e := range Engines {
			p := profileFor(e)
			_, _ = runQueries(col, []appQuery{q}, func(*document) bool { return true }, &p)
		}
	})
}
