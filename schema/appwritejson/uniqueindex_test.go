package appwritejson_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/schema/appwritejson"
)

func TestMixedTypeUniqueIndexes(t *testing.T) {
	t.Parallel()
	mixed := []byte(`{"collections":[
	  {"$id":"messages","attributes":[
	     {"key":"conversationId","type":"string","size":36},
	     {"key":"sequence","type":"integer"},
	     {"key":"role","type":"string","format":"enum","elements":["user"]},
	     {"key":"body","type":"text"},
	     {"key":"at","type":"datetime"}],
	   "indexes":[
	     {"key":"conversation_sequence","type":"unique","attributes":["conversationId","sequence"]},
	     {"key":"conversation_role","type":"unique","attributes":["conversationId","role","body"]},
	     {"key":"by_sequence","type":"key","attributes":["conversationId","sequence"]},
	     {"key":"id_created","type":"unique","attributes":["$id","$createdAt"]},
	     {"key":"role_id","type":"unique","attributes":["role","$id"]},
	     {"key":"seq_only","type":"unique","attributes":["sequence"]}]}]}`)
	got, err := appwritejson.MixedTypeUniqueIndexes(mixed)
	require.NoError(t, err)
	require.Equal(t, []appwritejson.MixedTypeIndex{
		{Collection: "messages", Index: "conversation_sequence", Attributes: []string{"conversationId", "sequence"}, Types: []string{"string", "integer"}},
		{Collection: "messages", Index: "id_created", Attributes: []string{"$id", "$createdAt"}, Types: []string{"string", "datetime"}},
	}, got, "key indexes, all-string and single-attribute unique indexes pass")
	require.Equal(t, "messages.conversation_sequence(conversationId:string, sequence:integer)", got[0].String())

	clean := []byte(`{"collections":[{"$id":"runs","attributes":[
	     {"key":"ownerId","type":"string","size":36},{"key":"requestId","type":"string","size":64},{"key":"n","type":"integer"}],
	   "indexes":[{"key":"owner_request","type":"unique","attributes":["ownerId","requestId"]},
	              {"key":"owner_n","type":"key","attributes":["ownerId","n"]}]}]}`)
	got, err = appwritejson.MixedTypeUniqueIndexes(clean)
	require.NoError(t, err)
	require.Empty(t, got)

	_, err = appwritejson.MixedTypeUniqueIndexes([]byte(`{"collections":[{"$id":"x","attributes":[],"indexes":[{"key":"u","type":"unique","attributes":["nope"]}]}]}`))
	require.ErrorContains(t, err, `unknown attribute "nope"`)
	_, err = appwritejson.MixedTypeUniqueIndexes([]byte(`{`))
	require.Error(t, err)
}

// The committed appwrite.json must declare no unique index over attributes of different
// types (issue 12): on MongoDB such an index enforces nothing.
func TestCommittedAppwriteJSONHasNoMixedTypeUniqueIndex(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile(filepath.Join("..", "..", "appwrite.json"))
	require.NoError(t, err)
	got, err := appwritejson.MixedTypeUniqueIndexes(b)
	require.NoError(t, err)
	var offenders []string
	for _, m := range got {
		offenders = append(offenders, m.String())
	}
	require.Empty(t, offenders, "unique indexes over mixed types (unenforced on MongoDB)")
}
