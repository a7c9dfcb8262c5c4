package hermestest_test

// The double's behaviour that clients see is tested, beside real Hermes, by the suite in
// hermes/hermesreal. These tests cover what that suite cannot reach on the real server in
// reasonable time or at all: the startup guard, an in-memory store, the stream buffer's
// TTL and 1000-event limit, and the DropStream test hook.

import (
	"context"
	"errors"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/hermes"
	"privateassistant/hermes/hermestest"
	"privateassistant/modeltest"
)

const key = "test-key-0123456789abcdef0123456789"

type fixture struct {
	model  *modeltest.Backend
	double *hermestest.Server
	c      *hermes.Client
}

func start(t *testing.T, opts hermestest.Options) *fixture {
	t.Helper()
	m := modeltest.New("demo")
	m.TokenDelay = time.Millisecond
	ms := httptest.NewServer(m)
	opts.APIKey, opts.ModelURL, opts.Model = key, ms.URL+"/v1", "demo"
	d, err := hermestest.New(opts)
	require.NoError(t, err)
	s := httptest.NewServer(d)
	t.Cleanup(func() { s.CloseClientConnections(); s.Close(); d.Close(); ms.Close() })
	return &fixture{model: m, double: d, c: &hermes.Client{BaseURL: s.URL, APIKey: key}}
}

func (f *fixture) finish(t *testing.T, input string) (string, []hermes.Event) {
	t.Helper()
	ctx := context.Background()
	a, err := f.c.SubmitRun(ctx, "k-"+strings.ReplaceAll(input, " ", "-"), hermes.RunRequest{Input: input})
	require.NoError(t, err)
	st, err := f.c.Events(ctx, a.RunID)
	require.NoError(t, err)
	defer st.Close()
	var evs []hermes.Event
	for {
		ev, err := st.Next()
		if err != nil {
			require.ErrorIs(t, err, hermes.ErrStreamClosed)
			return a.RunID, evs
		}
		evs = append(evs, ev)
	}
}

func TestKeyGuard(t *testing.T) {
	t.Parallel()
	for _, k := range []string{"", "short", "changeme", "  fifteen-chars  "} {
		_, err := hermestest.New(hermestest.Options{APIKey: k})
		require.ErrorIs(t, err, hermestest.ErrKeyInvalid, k)
	}
}

func TestInMemoryStoreIsNotDurable(t *testing.T) {
	t.Parallel()
	f := start(t, hermestest.Options{}) // no DataDir: runs_idempotency.db fell back to :memory:
	caps, err := f.c.Capabilities(context.Background())
	require.NoError(t, err)
	require.False(t, caps.Idempotency().Durable)
	require.ErrorIs(t, caps.CheckRunnable(), hermes.ErrNoDurableIdempotency)
}

func TestUnknownRunStreamIs404AfterTheWait(t *testing.T) {
	t.Parallel()
	f := start(t, hermestest.Options{SubscribeWait: 200 * time.Millisecond})
	began := time.Now()
	_, err := f.c.Events(context.Background(), "run_unknown")
	require.ErrorIs(t, err, hermes.ErrNotFound)
	require.GreaterOrEqual(t, time.Since(began), 200*time.Millisecond, "the server polls for the stream before 404")
}

func TestStreamBufferIsSweptAfterTTL(t *testing.T) {
	t.Parallel()
	f := start(t, hermestest.Options{StreamTTL: 300 * time.Millisecond, SubscribeWait: 50 * time.Millisecond})
	id, evs := f.finish(t, "sweep me")
	require.NotEmpty(t, evs)
	require.Eventually(t, func() bool {
		st, err := f.c.Events(context.Background(), id)
		if err == nil {
			st.Close()
		}
		return errors.Is(err, hermes.ErrNotFound)
	}, 5*time.Second, 50*time.Millisecond, "an unwatched buffer goes after StreamTTL")
	rs, err := f.c.GetRun(context.Background(), id)
	require.NoError(t, err, "the run's status outlives its stream")
	require.Equal(t, hermes.StatusCompleted, rs.Status)
}

func TestBacklogKeepsTheLast1000Events(t *testing.T) {
	t.Parallel()
	f := start(t, hermestest.Options{})
	tokens := make([]string, 1100)
	for i := range tokens {
		tokens[i] = "t"
	}
	f.model.SetScript("#many", modeltest.Script{Turns: []modeltest.Turn{{Tokens: tokens, TokenDelay: time.Microsecond}}})
	id, evs := f.finish(t, "a lot #many")
	require.Len(t, evs, 1102, "1100 deltas, reasoning.available, run.completed")
	// A late subscriber from the start: the oldest events are gone, and it is told so.
	st, err := f.c.EventsAfter(context.Background(), id, 5)
	require.NoError(t, err)
	defer st.Close()
	first, err := st.Next()
	require.NoError(t, err)
	require.Equal(t, "replay.truncated", first.Type)
	// 1102 events and the close sentinel took seqs 0..1102; the last BacklogLimit remain.
	require.Equal(t, float64(1103-hermestest.BacklogLimit), first.Float("oldest_retained_seq"))
	require.Equal(t, float64(5), first.Float("requested_seq"))
}

func TestDropStreamKeepsTheBufferForAResume(t *testing.T) {
	t.Parallel()
	f := start(t, hermestest.Options{})
	ctx := context.Background()
	f.model.SetScript("#slow", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("w ", 30)), TokenDelay: 20 * time.Millisecond}}})
	a, err := f.c.SubmitRun(ctx, "k-drop", hermes.RunRequest{Input: "slowly #slow"})
	require.NoError(t, err)
	st, err := f.c.Events(ctx, a.RunID)
	require.NoError(t, err)
	defer st.Close()
	_, err = st.Next()
	require.NoError(t, err)
	require.Equal(t, 1, f.double.Subscribers(a.RunID))
	f.double.DropStream(a.RunID)
	n := 1
	for {
		_, err := st.Next()
		if err != nil {
			require.ErrorIs(t, err, hermes.ErrStreamClosed)
			break
		}
		n++
	}
	require.Equal(t, 32, n, "30 deltas, reasoning.available, run.completed: each once")
	require.Equal(t, 1, st.Resumes())
}

func TestRetentionPrunesOnlySettledRecords(t *testing.T) {
	t.Parallel()
	f := start(t, hermestest.Options{Retention: time.Second})
	ctx := context.Background()
	caps, err := f.c.Capabilities(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, caps.Idempotency().RetentionSeconds)
	done, _ := f.finish(t, "settled")
	long, err := f.c.SubmitRun(ctx, "k-long", hermes.RunRequest{Input: "busy #long"})
	require.NoError(t, err)
	defer func() { _, _ = f.c.StopRun(ctx, long.RunID) }()
	var fresh hermes.RunAccepted
	require.Eventually(t, func() bool {
		fresh, err = f.c.SubmitRun(ctx, "k-settled", hermes.RunRequest{Input: "settled"})
		return err == nil && !fresh.Replayed
	}, 10*time.Second, 100*time.Millisecond, "past retention the same key and body start a new run")
	require.NotEqual(t, done, fresh.RunID)
	again, err := f.c.SubmitRun(ctx, "k-long", hermes.RunRequest{Input: "busy #long"})
	require.NoError(t, err)
	require.True(t, again.Replayed, "a run still in flight keeps its record past retention")
	require.Equal(t, long.RunID, again.RunID)
	require.Equal(t, 3, f.double.RunsCreated())
}
