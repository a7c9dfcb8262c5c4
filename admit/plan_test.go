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
)

// A warm admission checks the caller against the plan it saw last and confirms, inside
// the reservation, that the cache still holds that plan. When an admin commit moved the
// plan to one that refuses the caller, the admission is refused with nothing reserved
// (no sequence, no idempotency key), exactly as a cold one; when the new plan still
// allows the caller, the admission uses it. Warm, it takes two Redis round trips.
func TestWarmAdmissionSeesAMovedPlan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	owner, jwt := env.SignUp(t, "plan@example.com", "password-plan")
	conv := env.Conversation(t, jwt)
	rt := &roundTrips{}
	rdb := redis.NewClient(&redis.Options{Addr: env.Redis.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	rdb.AddHook(rt)
	aq := asynq.NewClientFromRedisClient(rdb)
	plans := &runconfig.Cache{RDB: rdb, PointerTTL: time.Hour}
	a := &admit.Admitter{RDB: rdb, Enq: queue.NewEnqueuer(aq), Plans: plans, RateLimit: 1000}
	st := env.Store
	admitOne := func(id string) (admit.Result, error) {
		return a.Admit(ctx, st, admit.Request{Owner: owner, ConversationID: conv, RequestID: id, Text: "hi", Role: "chat", Labels: []string{"member"}})
	}
	_, err := admitOne("r1")
	require.NoError(t, err)
	n0 := rt.n.Load()
	r2, err := admitOne("r2")
	require.NoError(t, err)
	require.EqualValues(t, 2, rt.n.Load()-n0, "warm: the reservation (with the plan check) and the enqueue")
	require.EqualValues(t, 2, r2.Sequence)

	// An admin commit: the chat role now only for "coder".
	p, _, err := plans.Get(ctx, st, "chat")
	require.NoError(t, err)
	p.ReleaseFingerprint += "x"
	p.Labels = []string{"coder"}
	require.NoError(t, plans.Store(ctx, 2, p))
	r3, err := admitOne("r3")
	require.ErrorIs(t, err, admit.ErrRoleNotAllowed)
	seq, err := rdb.Get(ctx, queue.ConvSeqKey(conv)).Int64()
	require.NoError(t, err)
	require.EqualValues(t, 2, seq, "no sequence used")
	require.Zero(t, rdb.Exists(ctx, queue.AdmitKey(r3.RunID)).Val(), "nothing reserved")

	// The next commit lets members in again, on another queue: the admission uses it.
	p.ReleaseFingerprint += "x"
	p.Labels = []string{"member"}
	p.Queue = "chat-moved"
	require.NoError(t, plans.Store(ctx, 3, p))
	r4, err := admitOne("r4")
	require.NoError(t, err)
	require.EqualValues(t, 3, r4.Sequence)
	info, err := asynq.NewInspectorFromRedisClient(rdb).GetTaskInfo("chat-moved", r4.RunID)
	require.NoError(t, err, "enqueued on the new plan's queue")
	require.Equal(t, r4.RunID, info.ID)

	// The pointer expired (no commit): the plan is read again, nothing else changes.
	require.NoError(t, rdb.Del(ctx, queue.PlanPointerKey()).Err())
	r5, err := admitOne("r5")
	require.NoError(t, err, fmt.Sprint(r5))
	require.EqualValues(t, 4, r5.Sequence)
}
