package admit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/admit"
	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// Admission encodes its records ahead of the writes, the message for the sequence its
// container expects and the run for the plan it saw last. Two warm containers taking
// turns in one conversation each expect a sequence the other took, and a plan moved to
// another device between two admissions: every message, binding and run is written for
// the sequence actually reserved and the plan actually used.
func TestRecordsEncodedAheadAreTheOnesWritten(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	owner, jwt := env.SignUp(t, "ahead@example.com", "password-ahead")
	conv := env.Conversation(t, jwt)
	rdb := redis.NewClient(&redis.Options{Addr: env.Redis.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	plans := &runconfig.Cache{RDB: rdb, PointerTTL: time.Hour}
	container := func() *admit.Admitter {
		return &admit.Admitter{RDB: rdb, Enq: queue.NewEnqueuer(asynq.NewClientFromRedisClient(rdb)), Plans: plans, RateLimit: 1000}
	}
	a, b := container(), container()
	st := env.Store
	check := func(r admit.Result, device string) {
		t.Helper()
		m, err := schema.For[schema.Message](st, schema.CollMessages).Get(ctx, r.MessageID)
		require.NoError(t, err)
		require.Equal(t, r.Sequence, m.Sequence)
		require.Equal(t, schema.SequenceKey(conv, r.Sequence), *m.SequenceKey)
		require.Equal(t, r.RunID, *m.RunID)
		bd, err := schema.For[schema.RunBinding](st, schema.CollRunBindings).Get(ctx, r.RunID)
		require.NoError(t, err)
		require.Equal(t, admit.SnapshotID(conv, r.Sequence), bd.ContextSnapshotID, "the binding names the stored sequence")
		run, err := schema.For[schema.Run](st, schema.CollRuns).Get(ctx, r.RunID)
		require.NoError(t, err)
		require.Equal(t, "waiting for the "+device+" queue", *run.QueueReason)
		require.Equal(t, r.MessageID, run.MessageID)
	}
	for i, ad := range []*admit.Admitter{a, a, b, a, b, b, a} {
		r, err := ad.Admit(ctx, st, admit.Request{Owner: owner, ConversationID: conv, RequestID: fmt.Sprint("t", i), Text: fmt.Sprint("hi ", i), Role: "chat"})
		require.NoError(t, err)
		require.EqualValues(t, i+1, r.Sequence)
		check(r, "arc")
	}

	// An admin commit moves the chat role to another device: a's next admission learns
	// it in its reservation and writes the run for the new plan.
	p, _, err := plans.Get(ctx, st, "chat")
	require.NoError(t, err)
	p.ReleaseFingerprint += "x"
	p.Device = "moved"
	require.NoError(t, plans.Store(ctx, 2, p))
	r, err := a.Admit(ctx, st, admit.Request{Owner: owner, ConversationID: conv, RequestID: "moved", Text: "hi", Role: "chat"})
	require.NoError(t, err)
	require.EqualValues(t, 8, r.Sequence)
	check(r, "moved")
}
