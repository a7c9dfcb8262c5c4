package appwritetest

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestSearchPerEngine: what Query.search matches on each engine (fulltext.go).
func TestSearchPerEngine(t *testing.T) {
	const text = "You said: the Porto trip, by train. Café on day 2."
	cases := []struct {
		value               string
		ideal, maria, mongo bool
	}{
		{"porto", true, true, true},
		{"PORT", true, true, false},      // a prefix: MariaDB's last word, never Mongo
		{"port trip", true, true, true},  // any word; only the last is a prefix on MariaDB
		{"port zzz", true, false, false}, // "port" not last: a whole word on MariaDB
		{"said", true, true, true},
		{"by", true, false, true},           // shorter than 3: never indexed by InnoDB
		{"the", true, false, true},          // an InnoDB stopword; Mongo's "none" keeps it
		{"cafe", false, false, true},        // diacritic-insensitive on Mongo only
		{`"porto trip"`, false, true, true}, // a phrase
		{`"trip porto"`, false, false, false},
		{"trip -train", true, true, false}, // MariaDB drops '-': "trip" or "train*"; Mongo excludes
		{"***", false, false, false},
	}
	for _, c := range cases {
		for e, want := range map[Engine]bool{EngineIdeal: c.ideal, EngineMariaDB: c.maria, EngineMongoDB: c.mongo} {
			p := profileFor(e)
			require.Equal(t, want, p.search(text, c.value), "%s on %s", c.value, e)
		}
	}
}
