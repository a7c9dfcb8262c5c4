package executor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// A run first submitted longer ago than the harness keeps idempotency records is never
// submitted again (the harness may have forgotten the key and would run it twice): the
// executor follows the native run it knows, and when the harness no longer knows it
// either, the run ends interrupted and says why.
func TestPastRetentionNeverResubmits(t *testing.T) {
	fake := newFake(func(string) []harness.Event { return deltas("a", "b") }, 0)
	fake.retention = time.Hour
	s := setup(t, fake)
	id := s.newRun(t)
	ctx := context.Background()
	_, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Update(ctx, id,
		map[string]any{"nativeRunId": "native-forgotten", "nativeSessionId": "pa-" + id})
	require.NoError(t, err)
	schematest.SetRunStatus(t, s.store, id, schema.RunRunning, map[string]any{
		"startedAt": time.Now().Add(-2 * time.Hour).UTC().Format(time.RFC3339Nano)})

	require.NoError(t, s.exec.Execute(ctx, id))
	require.Zero(t, fake.submits, "never resubmitted")
	rec := s.record(t, id)
	require.Equal(t, schema.RunInterrupted, rec.Status)
	require.NotNil(t, rec.ErrorSummary)
	require.Contains(t, *rec.ErrorSummary, "past the harness's idempotency retention (1h0m0s)")
	evs := s.requireLog(t, id)
	var end queue.RunEndData
	require.NoError(t, json.Unmarshal(evs[len(evs)-1].Data, &end))
	require.Contains(t, end.Error, "not submitted again")
}

// Inside the retention a re-attaching attempt resubmits with the same key (replayed).
func TestInsideRetentionResubmits(t *testing.T) {
	fake := newFake(func(string) []harness.Event { return deltas("a", "b") }, 0)
	fake.retention = time.Hour
	s := setup(t, fake)
	id := s.newRun(t)
	ctx := context.Background()
	_, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Update(ctx, id,
		map[string]any{"nativeRunId": "native-" + id, "nativeSessionId": "pa-" + id})
	require.NoError(t, err)
	schematest.SetRunStatus(t, s.store, id, schema.RunRunning, map[string]any{
		"startedAt": time.Now().Add(-10 * time.Minute).UTC().Format(time.RFC3339Nano)})
	require.NoError(t, s.exec.Execute(ctx, id))
	require.Equal(t, 1, fake.submits)
	require.Equal(t, schema.RunCompleted, s.record(t, id).Status)
}

// A harness that reports a retention of 0 (or less) keeps no idempotency record that a
// resubmission could rely on: a run it already started is never submitted again, however
// recent (the executor follows the native run it knows).
func TestZeroRetentionNeverResubmits(t *testing.T) {
	for _, ret := range []time.Duration{0, -time.Second} {
		fake := newFake(func(string) []harness.Event { return deltas("a", "b") }, 0)
		fake.retention = ret
		s := setup(t, fake)
		id := s.newRun(t)
		ctx := context.Background()
		_, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Update(ctx, id,
			map[string]any{"nativeRunId": "native-forgotten", "nativeSessionId": "pa-" + id})
		require.NoError(t, err)
		schematest.SetRunStatus(t, s.store, id, schema.RunRunning, map[string]any{
			"startedAt": time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)})

		require.NoError(t, s.exec.Execute(ctx, id))
		require.Zero(t, fake.submits, "retention %s: never resubmitted", ret)
		rec := s.record(t, id)
		require.Equal(t, schema.RunInterrupted, rec.Status)
		require.NotNil(t, rec.ErrorSummary)
		require.Contains(t, *rec.ErrorSummary, "reports no idempotency retention")
	}
}
