package release

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/backup"
	"privateassistant/schema"
	"privateassistant/schema/provision"
	"privateassistant/schema/runstate"
	"privateassistant/schema/schematest"
)

// nextModel is the data model of a hypothetical next release: what an additive schema
// change looks like (an optional attribute on runs, a new collection).
func nextModel(m schema.Model) schema.Model {
	next := m
	next.Collections = slices.Clone(m.Collections)
	for i, c := range next.Collections {
		if c.ID == schema.CollRuns {
			c.Attributes = append(slices.Clone(c.Attributes), schema.Attribute{Key: "priority", Type: schema.TypeInteger})
			next.Collections[i] = c
		}
	}
	next.Collections = append(next.Collections, schema.Collection{ID: "notes", Name: "Notes", DocumentSecurity: true,
		Attributes: []schema.Attribute{{Key: "ownerId", Type: schema.TypeString, Size: schema.SizeID, Required: true}}})
	return next
}

// TestUpgradeOrderSchemaFirst is the skew test for README's upgrade order (schema →
// agent → functions → web): once the next release's schema is applied, the running
// (older) agent and functions keep working on it, the next release's code reads what the
// older code wrote and the other way round, the older code's plan shows no drift, a
// backup taken before restores into the newer schema, and a rollback of functions and
// agent to the older release needs no schema change (the reverse, an older schema under
// newer code, is what the order avoids and what restore and rollback refuse).
func TestUpgradeOrderSchemaFirst(t *testing.T) {
	env := schematest.New(t)
	ctx := context.Background()
	cur, next := env.Model, nextModel(env.Model)
	cfg := provision.Config{Endpoint: env.TS.URL, ProjectID: env.TS.Project, APIKey: "bootstrap-key-0123456789abcdef",
		WaitTimeout: 10 * time.Second, PollInterval: 2 * time.Millisecond}

	// 1. Schema: the next release's model, applied while the current code runs.
	plan, err := provision.Compare(ctx, cfg, next)
	require.NoError(t, err)
	require.Empty(t, plan.Drift)
	require.NotEmpty(t, plan.Actions, "only additions")
	_, err = provision.Apply(ctx, cfg, next)
	require.NoError(t, err)
	plan, err = provision.Compare(ctx, cfg, cur)
	require.NoError(t, err)
	require.True(t, plan.Clean(), "the older code's plan shows no drift on the newer schema: %+v", plan)

	// 2. The older agent and functions (today's code, today's model) still work on it.
	old := schema.NewStore(env.Client, cur)
	runs := schema.For[schema.Run](old, schema.CollRuns)
	_, err = runs.Create(ctx, "run-old", "u1", &schema.Run{OwnerID: "u1", ConversationID: "c1", MessageID: "m1", RequestID: "r1",
		Role: "chat", Status: runstate.Initial, QueuedAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	r, err := runs.Get(ctx, "run-old")
	require.NoError(t, err)
	require.NoError(t, runstate.Track(runs, r, nil).Change(ctx, schema.RunRunning, runstate.Patch{}))

	// 3. The next release's code reads it (the new attribute is null), and writes what the
	// older code reads (it ignores the field it does not know).
	newer := schema.NewStore(env.Client, next)
	nr, err := schema.For[map[string]any](newer, schema.CollRuns).Get(ctx, "run-old")
	require.NoError(t, err)
	require.Nil(t, (*nr)["priority"])
	require.Equal(t, "running", (*nr)["status"])
	_, err = schema.For[map[string]any](newer, schema.CollRuns).Update(ctx, "run-old", map[string]any{"priority": 2})
	require.NoError(t, err)
	r, err = runs.Get(ctx, "run-old")
	require.NoError(t, err)
	require.NoError(t, runstate.Track(runs, r, nil).Change(ctx, schema.RunCompleted, runstate.Patch{}))

	// 4. Backups: an archive of the older schema restores under the newer one; a rollback
	// of code to the older release needs no schema change.
	require.Empty(t, backup.Schema(next).Covers(backup.Schema(cur)))
	require.NotEmpty(t, backup.Schema(cur).Covers(backup.Schema(next)), "newer data under older code is refused")
	older := &Manifest{Version: "v1", Schema: backup.Schema(cur), Agent: Agent{Install: AgentRoot + "/releases/v1"}}
	newest := &Manifest{Version: "v2", Schema: backup.Schema(next)}
	require.NoError(t, Rollback(nil, &Plan{From: newest, To: older}, backup.Schema(next), discard{}, true))
	require.ErrorIs(t, Rollback(nil, &Plan{From: older, To: newest}, backup.Schema(cur), discard{}, true), ErrSchema,
		"code of a newer schema on an older one: the order forbids it")
}

type discard struct{}

func (discard) Write(p []byte) (int, error) { return len(p), nil }
