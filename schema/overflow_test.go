package schema_test

import (
	"context"
	"testing"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/query"
	"github.com/stretchr/testify/require"

	"privateassistant/schema"
	"privateassistant/schema/appwritetest"
	"privateassistant/schema/schematest"
)

// big is n characters of mixed width (the limits count characters, as Appwrite's Text
// validator does), with line breaks.
func big(n int) string {
	alphabet := []rune("aé€𝄞\n")
	r := make([]rune, n)
	for i := range r {
		r[i] = alphabet[(i*7+i/5)%len(alphabet)]
	}
	return string(r)
}

// Content larger than its field is stored whole in a private file the record names, and
// every read through schema returns it whole — on each engine profile (issue 12: event
// payloads used to become {"truncated":true}, snapshots were cut, contextFileId was never
// written).
func TestOversizedContentIsKeptWhole(t *testing.T) {
	t.Parallel()
	for _, e := range []appwritetest.Engine{appwritetest.EngineMongoDB, appwritetest.EngineMariaDB, appwritetest.EngineIdeal} {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := schematest.NewOn(t, e)
			admin := appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey))
			raw := appwrite.NewDatabases(admin)
			files := appwrite.NewStorage(admin)

			// A message three times its field, and one exactly at it.
			msgs := schema.For[schema.Message](env.Store, schema.CollMessages)
			long, atLimit := big(3*schema.SizeMessageText), big(schema.SizeMessageText)
			got, err := msgs.Create(ctx, "mbig", "u1", &schema.Message{OwnerID: "u1", ConversationID: "c1", Sequence: 1, Role: "assistant", Text: &long})
			require.NoError(t, err)
			require.Equal(t, long, *got.Text, "the created record reads whole")
			require.NotNil(t, got.TextFileID)
			_, err = msgs.Create(ctx, "mfit", "u1", &schema.Message{OwnerID: "u1", ConversationID: "c1", Sequence: 2, Role: "user", Text: &atLimit})
			require.NoError(t, err)

			m, err := msgs.Get(ctx, "mbig")
			require.NoError(t, err)
			require.Equal(t, long, *m.Text)
			require.Equal(t, schema.OverflowFileID(schema.CollMessages, "mbig", "text"), *m.TextFileID)
			page, err := msgs.List(ctx, schema.ListQuery{Owner: "u1", Filters: []string{query.Equal("conversationId", "c1")}, Order: []string{query.OrderAsc("sequence")}})
			require.NoError(t, err)
			require.Len(t, page.Items, 2)
			require.Equal(t, long, *page.Items[0].Text)
			require.Equal(t, atLimit, *page.Items[1].Text)
			require.Nil(t, page.Items[1].TextFileID, "content that fits stays in the record")

			// In Appwrite: the record holds no text but the file id; the file holds it all and
			// only its owner may read it.
			doc, err := raw.GetDocument(env.Model.DatabaseID, schema.CollMessages, "mbig")
			require.NoError(t, err)
			var stored struct {
				Text       *string `json:"text"`
				TextFileID string  `json:"textFileId"`
			}
			require.NoError(t, doc.Decode(&stored))
			require.Nil(t, stored.Text)
			f, err := files.GetFile(schema.BucketArtifacts, stored.TextFileID)
			require.NoError(t, err)
			require.Equal(t, []string{`read("user:u1")`}, f.Permissions)
			b, err := files.GetFileDownload(schema.BucketArtifacts, stored.TextFileID)
			require.NoError(t, err)
			require.Equal(t, long, string(*b))

			// A retried create (same id) is the same conflict as before, not a file error.
			_, err = msgs.Create(ctx, "mbig", "u1", &schema.Message{OwnerID: "u1", ConversationID: "c1", Sequence: 1, Role: "assistant", Text: &long})
			require.ErrorIs(t, err, schema.ErrConflict)

			// An event payload far beyond its field.
			events := schema.For[schema.Event](env.Store, schema.CollEvents)
			data := `{"text":"` + big(5*schema.SizeEventData) + `"}`
			_, err = events.Create(ctx, schema.EventDocID("r1", 1), "u1", &schema.Event{OwnerID: "u1", RunID: "r1", Sequence: 1, Type: "message.delta", Data: &data})
			require.NoError(t, err)
			evs, err := events.All(ctx, schema.ListQuery{Owner: "u1", Filters: []string{query.Equal("runId", "r1")}})
			require.NoError(t, err)
			require.Len(t, evs, 1)
			require.Equal(t, data, *evs[0].Data)

			// A context snapshot beyond its field: server only, so the file has no grants.
			snaps := schema.For[schema.ContextSnapshot](env.Store, schema.CollContextSnapshots)
			ctxText := big(2*schema.SizeSnapshot + 17)
			_, err = snaps.Create(ctx, "s1", "", &schema.ContextSnapshot{OwnerID: "u1", ConversationID: "c1", ThroughSequence: 1, Context: &ctxText, Checksum: "x"})
			require.NoError(t, err)
			s, err := snaps.Get(ctx, "s1")
			require.NoError(t, err)
			require.Equal(t, ctxText, *s.Context)
			require.NotNil(t, s.ContextFileID)
			f, err = files.GetFile(schema.BucketArtifacts, *s.ContextFileID)
			require.NoError(t, err)
			require.Empty(t, f.Permissions)

			// Only a create overflows: an update beyond the field is refused before sending.
			_, err = msgs.Update(ctx, "mfit", map[string]any{"text": long})
			require.ErrorIs(t, err, schema.ErrInvalid)
		})
	}
}
