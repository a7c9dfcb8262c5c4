package outbox_test

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/outbox"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// A file no message names is deleted once it is older than Age; a file a message names
// (its uploader's, even another user's message naming it does not count), and a file
// younger than Age, stay.
func TestUploadSweepDeletesOnlyOldUnsentFiles(t *testing.T) {
	ctx := context.Background()
	st := schematest.New(t).Store
	for _, f := range []struct{ id, owner string }{{"sent", "alice"}, {"unsent", "alice"}, {"bobs-unsent", "bob"},
		{"named-by-other", "alice"}} {
		require.NoError(t, st.CreateUpload(ctx, f.id, f.owner, f.id+".txt", []byte(f.id)))
	}
	msgs := schema.For[schema.Message](st, schema.CollMessages)
	text := "see attached"
	_, err := msgs.Create(ctx, "m1", "alice", &schema.Message{OwnerID: "alice", ConversationID: "c1", Sequence: 1,
		Role: "user", Text: &text, Attachments: []string{"sent"}})
	require.NoError(t, err)
	// Another user's message naming alice's file (admission would refuse it): not hers.
	_, err = msgs.Create(ctx, "m2", "bob", &schema.Message{OwnerID: "bob", ConversationID: "c2", Sequence: 1,
		Role: "user", Text: &text, Attachments: []string{"named-by-other"}})
	require.NoError(t, err)

	old, _, err := st.UploadsCreatedBefore(ctx, time.Now().Add(time.Hour), "", 0)
	require.NoError(t, err)
	require.Len(t, old, 4)
	cut := old[len(old)-1].CreatedAt.Add(time.Millisecond)
	// A file uploaded after the cut is younger than Age when the sweep runs.
	require.Eventually(t, func() bool { return time.Now().After(cut.Add(2 * time.Millisecond)) }, time.Second, time.Millisecond)
	require.NoError(t, st.CreateUpload(ctx, "fresh", "alice", "fresh.txt", []byte("fresh")))

	sw := &outbox.UploadSweeper{Store: st, Age: 24 * time.Hour, Now: func() time.Time { return cut.Add(24 * time.Hour) },
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	got, err := sw.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.UploadSweep{Checked: 4, Deleted: 3}, got)
	left, _, err := st.UploadsCreatedBefore(ctx, time.Now().Add(time.Hour), "", 0)
	require.NoError(t, err)
	var ids []string
	for _, f := range left {
		ids = append(ids, f.ID)
	}
	require.Equal(t, []string{"sent", "fresh"}, ids)

	// A second sweep (another agent's, or the next one) finds nothing more to delete.
	got, err = sw.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, outbox.UploadSweep{Checked: 1, Deleted: 0}, got)
	// Deleting a file already gone is not an error.
	require.NoError(t, st.DeleteUpload(ctx, "unsent"))
}

// The listing pages by cursor and stops at the first file younger than the cut.
func TestUploadsCreatedBeforePages(t *testing.T) {
	ctx := context.Background()
	st := schematest.New(t).Store
	for _, id := range []string{"f1", "f2", "f3", "f4", "f5"} {
		require.NoError(t, st.CreateUpload(ctx, id, "alice", id+".txt", []byte(id)))
	}
	var ids []string
	cursor := ""
	for pages := 0; ; pages++ {
		require.Less(t, pages, 4)
		files, next, err := st.UploadsCreatedBefore(ctx, time.Now().Add(time.Hour), cursor, 2)
		require.NoError(t, err)
		for _, f := range files {
			require.Equal(t, "alice", f.Owner)
			ids = append(ids, f.ID)
		}
		if next == "" {
			break
		}
		cursor = next
	}
	require.Equal(t, []string{"f1", "f2", "f3", "f4", "f5"}, ids)
	files, next, err := st.UploadsCreatedBefore(ctx, time.Now().Add(-time.Hour), "", 2)
	require.NoError(t, err)
	require.Empty(t, files)
	require.Empty(t, next)
}
