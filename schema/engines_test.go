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

// mariaDBRowWidth is utopia-php/database 6.0.0's estimate of a collection's row width on
// MariaDB (src/Database/Adapter/SQL.php:1159-1260, getAttributeWidth): 1,067 bytes of
// system columns; a string over getMaxVarcharLength() = 16,381 characters (SQL.php:2309-
// 2312) is a TEXT whose pointer takes 20 bytes, a shorter one VARCHAR at 4 bytes a
// character plus 1 or 2; integers over 32 bits and floats 8, booleans 1, datetimes 7.
// Enums are strings; 255 characters is assumed (more than any of ours needs).
func mariaDBRowWidth(c schema.Collection) int {
	total := 1067
	for _, a := range c.Attributes {
		switch a.Type {
		case schema.TypeString, schema.TypeEnum:
			size := a.Size
			if a.Type == schema.TypeEnum {
				size = 255
			}
			switch {
			case size > 16381:
				total += 20
			case size > 255:
				total += size*4 + 2
			default:
				total += size*4 + 1
			}
		case schema.TypeInteger, schema.TypeFloat:
			total += 8
		case schema.TypeBoolean:
			total += 1
		case schema.TypeDatetime:
			total += 7
		}
	}
	return total
}

// On MariaDB, Appwrite refuses an attribute once the collection's row width would reach
// 65,535 bytes (Database.php:3242-3259 checkAttribute with SQL.php:1145-1148
// getDocumentSizeLimit; MongoDB has no such limit, Mongo.php:3424-3427): provisioning
// would stop half-way there. Every collection keeps a margin for later attributes.
func TestModelFitsMariaDBRowWidth(t *testing.T) {
	t.Parallel()
	for _, c := range schema.Definition("").Collections {
		w := mariaDBRowWidth(c)
		require.Less(t, w, 65535-4096, "%s: row width %d bytes on MariaDB", c.ID, w)
	}
	big := schema.Collection{ID: "x", Attributes: []schema.Attribute{{Key: "a", Type: schema.TypeString, Size: 16000}}}
	require.Greater(t, mariaDBRowWidth(big), 64000, "the estimate counts a long VARCHAR at 4 bytes a character")
}
