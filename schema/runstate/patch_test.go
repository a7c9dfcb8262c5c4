package runstate_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// full sets every field of a Patch.
func full() runstate.Patch {
	at := time.Date(2026, 12, 7, 18, 0, 0, 5, time.FixedZone("x", 3600))
	return runstate.Patch{
		Phase: runstate.Set("p"), HeartbeatAt: runstate.Set(at), StartedAt: runstate.Set(at), FinishedAt: runstate.Set(at),
		ErrorSummary: runstate.Set("e"), QueueReason: runstate.Set("r"), QueuePosition: runstate.Set(int64(2)),
		ProgressCompleted: runstate.Set(int64(1)), ProgressTotal: runstate.Set(int64(3)), LastSequence: runstate.Set(int64(9)),
		Checkpoint: runstate.Set("c"), AssistantMessageID: runstate.Set("m"), Usage: runstate.Set("{}"),
	}
}

// TestPatchFieldsAreRunAttributes (issue 31 item 4): every field a Patch writes is an
// attribute of the runs collection, of the type its Go field has (a string for text, an
// integer for counts, a datetime for times, which go out as RFC 3339 in UTC).
func TestPatchFieldsAreRunAttributes(t *testing.T) {
	attrs := map[string]schema.Attribute{}
	for _, a := range schema.Definition("db").Collection(schema.CollRuns).Attributes {
		attrs[a.Key] = a
	}
	fields := full().Fields()
	require.Len(t, fields, 13, "every field of Patch is in Fields")
	for name, v := range fields {
		a, ok := attrs[name]
		require.True(t, ok, "%s is not an attribute of runs", name)
		switch v.(type) {
		case string:
			if a.Type == schema.TypeDatetime {
				_, err := time.Parse(time.RFC3339Nano, v.(string))
				require.NoError(t, err, name)
				continue
			}
			require.Contains(t, []schema.AttrType{schema.TypeString, schema.TypeEnum}, a.Type, name)
		case int64:
			require.Equal(t, schema.TypeInteger, a.Type, name)
		default:
			t.Fatalf("%s: %T on the wire", name, v)
		}
	}
	require.Equal(t, "2026-12-07T17:00:00.000000005Z", fields["finishedAt"], "times go out in UTC")
}

// TestPatchSetsClearsAndMerges: an unset field is not written, a cleared one is written as
// null, Merge takes what the later patch sets or clears, Without drops one field.
func TestPatchSetsClearsAndMerges(t *testing.T) {
	require.True(t, runstate.Patch{}.Empty())
	require.Empty(t, runstate.Patch{}.Fields())

	clr := runstate.ClearQueue()
	require.Equal(t, map[string]any{"queueReason": nil, "queuePosition": nil}, clr.Fields())
	require.False(t, clr.Empty(), "clearing writes")

	waiting := runstate.Patch{QueueReason: runstate.Set("behind run r1"), QueuePosition: runstate.Set(int64(1))}
	p := waiting.Merge(runstate.Patch{Phase: runstate.Set("thinking")})
	require.Equal(t, map[string]any{"queueReason": "behind run r1", "queuePosition": int64(1), "phase": "thinking"}, p.Fields())
	p = p.Merge(clr)
	require.Equal(t, map[string]any{"queueReason": nil, "queuePosition": nil, "phase": "thinking"}, p.Fields())
	n, ok := waiting.QueuePosition.Get()
	require.True(t, ok)
	require.Equal(t, int64(1), n, "Merge leaves its receiver's copy as it was")

	p, had := p.Without("queueReason")
	require.True(t, had)
	require.Equal(t, map[string]any{"queuePosition": nil, "phase": "thinking"}, p.Fields())
	_, had = p.Without("queueReason")
	require.False(t, had, "a field the patch does not write")

	for name := range full().Fields() {
		rest, had := full().Without(name)
		require.True(t, had, name)
		require.NotContains(t, rest.Fields(), name)
		require.Len(t, rest.Fields(), 12, name)
	}
}
