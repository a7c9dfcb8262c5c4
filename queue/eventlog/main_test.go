package eventlog_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type suite struct {
	rdb   *redis.Client
	store *schema.Store
}

var runN atomic.Int64

func setup(t *testing.T) *suite {
	t.Helper()
	env := schematest.New(t)
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	return &suite{rdb: rdb, store: env.Store}
}

// newRun creates a run record (the events collection needs nothing else).
func (s *suite) newRun(t *testing.T) *schema.Run {
	t.Helper()
	id := fmt.Sprintf("r%d", runN.Add(1))
	run, err := schema.For[schema.Run](s.store, schema.CollRuns).Create(context.Background(), id, "u1", &schema.Run{
		OwnerID: "u1", ConversationID: "c1", MessageID: "m" + id, RequestID: "q" + id, Role: "chat",
		Status: schema.RunRunning, QueuedAt: "2026-01-01T00:00:00Z"})
	require.NoError(t, err)
	return run
}

// requireLog checks that the stream and Appwrite both hold exactly events 1..n, in order,
// with the same types (0 lost, 0 duplicated).
func (s *suite) requireLog(t *testing.T, run *schema.Run, n int) []queue.Event {
	t.Helper()
	ctx := context.Background()
	evs, _, err := queue.ReadEvents(ctx, s.rdb, run.ID, 0, 0)
	require.NoError(t, err)
	require.Len(t, evs, n, "stream")
	for i, ev := range evs {
		require.Equal(t, int64(i+1), ev.Sequence)
	}
	stored, err := schema.For[schema.Event](s.store, schema.CollEvents).All(ctx, schema.ListQuery{Owner: run.OwnerID,
		Filters: []string{`{"method":"equal","attribute":"runId","values":["` + run.ID + `"]}`}, Limit: 100})
	require.NoError(t, err)
	require.Len(t, stored, n, "appwrite")
	seen := map[int64]string{}
	for _, e := range stored {
		seen[e.Sequence] = e.Type
	}
	for _, ev := range evs {
		require.Equal(t, ev.Type, seen[ev.Sequence], "appwrite event %d", ev.Sequence)
	}
	return evs
}
