package schema_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// InsertEncoded writes exactly what Create writes (sequence key, overflow file,
// permissions, validation), only without decoding the answer; a repeat is a conflict as
// with Create.
func TestInsertEncodedWritesWhatCreateWrites(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := schematest.New(t)
	msgs := schema.For[schema.Message](env.Store, schema.CollMessages)
	long := big(2 * schema.SizeMessageText)

	e, err := msgs.Encode(&schema.Message{OwnerID: "u1", ConversationID: "c1", Sequence: 1, Role: "user", Text: &long})
	require.NoError(t, err)
	require.NoError(t, msgs.InsertEncoded(ctx, "m1", "u1", e))
	require.ErrorIs(t, msgs.InsertEncoded(ctx, "m1", "u1", e), schema.ErrConflict)
	short := "hi"
	e2, err := msgs.Encode(&schema.Message{OwnerID: "u1", ConversationID: "c1", Sequence: 2, Role: "user", Text: &short})
	require.NoError(t, err)
	require.NoError(t, msgs.InsertEncoded(ctx, "m2", "u1", e2))
	require.ErrorIs(t, msgs.InsertEncoded(ctx, "m3", "u1", e2), schema.ErrConflict, "the sequence key is set and unique")

	m1, err := msgs.Get(ctx, "m1")
	require.NoError(t, err)
	require.Equal(t, long, *m1.Text, "the text is whole (its file was written)")
	require.Equal(t, schema.OverflowFileID(schema.CollMessages, "m1", "text"), *m1.TextFileID)
	require.Equal(t, schema.SequenceKey("c1", 1), *m1.SequenceKey)
	require.Equal(t, []string{`read("user:u1")`}, m1.Permissions)
	m2, err := msgs.Get(ctx, "m2")
	require.NoError(t, err)
	require.Equal(t, "hi", *m2.Text)
	require.Equal(t, schema.SequenceKey("c1", 2), *m2.SequenceKey)

	// Validation is the same as Create's.
	tooLong := big(schema.SizeLabel + 1)
	runs := schema.For[schema.Run](env.Store, schema.CollRuns)
	e3, err := runs.Encode(&schema.Run{OwnerID: "u1", ConversationID: "c1", MessageID: "m1", RequestID: "r", Role: "chat", Status: "queued", QueuedAt: now(), OwnerLabels: []string{tooLong}})
	require.NoError(t, err)
	var fe *schema.FieldError
	require.ErrorAs(t, runs.InsertEncoded(ctx, "r1", "u1", e3), &fe)
}
