package schema_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/appwritetest"
	"privateassistant/schema/schematest"
)

// The uniqueness the project relies on holds on every engine profile (issue 12): a
// message's (conversation, sequence) by its string key, an event's (run, sequence) and a
// revision's (id, revision) by their document ids, case variants included.
func TestUniquenessHoldsOnEveryEngine(t *testing.T) {
	t.Parallel()
	for _, e := range appwritetest.Engines {
		t.Run(string(e), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env := schematest.NewOn(t, e)

			msgs := schema.For[schema.Message](env.Store, schema.CollMessages)
			got, err := msgs.Create(ctx, "m1", "u", &schema.Message{OwnerID: "u", ConversationID: "c1", Sequence: 7, Role: "user"})
			require.NoError(t, err)
			require.NotNil(t, got.SequenceKey)
			require.Equal(t, "c1.7", *got.SequenceKey)
			_, err = msgs.Create(ctx, "m2", "u", &schema.Message{OwnerID: "u", ConversationID: "c1", Sequence: 7, Role: "assistant"})
			require.ErrorIs(t, err, schema.ErrConflict, "(conversation, sequence) taken")
			_, err = msgs.Create(ctx, "m2", "u", &schema.Message{OwnerID: "u", ConversationID: "c1", Sequence: 8, Role: "assistant"})
			require.NoError(t, err)
			_, err = msgs.Create(ctx, "m3", "u", &schema.Message{OwnerID: "u", ConversationID: "c2", Sequence: 7, Role: "user"})
			require.NoError(t, err, "another conversation's sequence 7 is free")

			events := schema.For[schema.Event](env.Store, schema.CollEvents)
			ev := &schema.Event{OwnerID: "u", RunID: "r0123", Sequence: 1, Type: "run.started"}
			_, err = events.Create(ctx, schema.EventDocID("r0123", 1), "u", ev)
			require.NoError(t, err)
			_, err = events.Create(ctx, schema.EventDocID("R0123", 1), "u", ev)
			require.ErrorIs(t, err, schema.ErrConflict, "(run, sequence) taken, whatever the case")

			hp := schema.For[schema.HarnessProfile](env.Store, schema.CollHarnessProfiles)
			rec := &schema.HarnessProfile{ProfileID: "Local", Revision: 1, Kind: schema.HarnessKinds[0], BaseURL: "http://127.0.0.1:1"}
			_, err = hp.Create(ctx, runconfig.RevisionDocID("Local", 1), "", rec)
			require.NoError(t, err)
			rec.ProfileID = "local"
			_, err = hp.Create(ctx, runconfig.RevisionDocID("local", 1), "", rec)
			require.ErrorIs(t, err, schema.ErrConflict, "two profile ids that differ only in case are one profile")
			_, err = hp.Create(ctx, runconfig.RevisionDocID("local", 2), "", rec)
			require.NoError(t, err)
		})
	}
}
