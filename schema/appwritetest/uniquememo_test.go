package appwritetest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/schema/appwritetest"
)

// The unique check remembers each document's key (uniquememo.go): a document whose key
// changed, or that was deleted, must not keep its old key in the index, and its new key
// must be enforced.
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
