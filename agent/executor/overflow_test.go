package executor_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/schema"
)

// An answer longer than messages.text, a delta longer than events.data and a context
// longer than context_snapshots.context are all stored whole (issue 12): read back through
// schema they equal what the harness sent — no "(the full answer is attached)" cut, no
// {"truncated":true} event, no cut snapshot. Runs on the default engine (mongodb).
func TestLongAnswersAndContextsAreStoredWhole(t *testing.T) {
	long := strings.Repeat("A long answer — with ünïcödé — line after line.\n", 2*schema.SizeSnapshot/48)
	require.Greater(t, len([]rune(long)), schema.SizeSnapshot)
	fake := newFake(func(string) []harness.Event { return deltas(long) }, 0)
	s := setup(t, fake)
	ctx := context.Background()
	conv := "c-long"

	r1 := s.newTurn(t, conv, "fake")
	require.NoError(t, s.exec.Execute(ctx, r1))
	m, err := schema.For[schema.Message](s.store, schema.CollMessages).Get(ctx, executor.AssistantMessageID(r1))
	require.NoError(t, err)
	require.Equal(t, long, *m.Text)
	require.NotNil(t, m.TextFileID)

	evs, err := schema.For[schema.Event](s.store, schema.CollEvents).All(ctx, schema.ListQuery{Owner: owner,
		Filters: []string{query.Equal("runId", r1)}, Order: []string{query.OrderAsc("sequence")}})
	require.NoError(t, err)
	var text strings.Builder
	for _, e := range evs {
		require.NotContains(t, *e.Data, `"truncated"`)
		if e.Type == "message.delta" {
			var d struct{ Text string }
			require.NoError(t, json.Unmarshal([]byte(*e.Data), &d))
			text.WriteString(d.Text)
		}
	}
	require.Equal(t, long, text.String())

	// The next turn's context holds the whole first answer.
	r2 := s.newTurn(t, conv, "fake")
	require.NoError(t, s.exec.Execute(ctx, r2))
	b, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Get(ctx, r2)
	require.NoError(t, err)
	snap, err := schema.For[schema.ContextSnapshot](s.store, schema.CollContextSnapshots).Get(ctx, b.ContextSnapshotID)
	require.NoError(t, err)
	require.NotNil(t, snap.ContextFileID, "the context is beyond its field")
	var msgs []harness.Message
	require.NoError(t, json.Unmarshal([]byte(*snap.Context), &msgs))
	require.Len(t, msgs, 3)
	require.Equal(t, long, msgs[1].Content)
}
