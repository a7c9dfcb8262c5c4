package service_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/admit"
	"privateassistant/agent/outbox"
	"privateassistant/functions/functionstest"
	"privateassistant/functions/service"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

type admitted struct {
	MessageID, RunID, Status string
	Sequence                 int64
}

func TestThousandConcurrentSubmissionsOfTwoHundredRequests(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	owner, jwt := env.SignUp(t, "load@example.com", "password-load")
	conv := env.Conversation(t, jwt)

	const distinct, copies = 200, 5
	var mu sync.Mutex
	byReq := map[string][]admitted{}
	var wg sync.WaitGroup
	sem := make(chan struct{}, 48)
	for i := 0; i < distinct*copies; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			req := fmt.Sprintf("req-%03d", i%distinct)
			res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": req, "text": "hello " + req})
			require.Equal(t, 202, res.Status, string(res.Body))
			var a admitted
			res.JSON(t, &a)
			mu.Lock()
			byReq[req] = append(byReq[req], a)
			mu.Unlock()
		}(i)
	}
	wg.Wait()

	// Every copy of a request got the same ids and sequence.
	require.Len(t, byReq, distinct)
	seqs := []int64{}
	for req, as := range byReq {
		require.Len(t, as, copies)
		for _, a := range as[1:] {
			require.Equal(t, as[0].RunID, a.RunID, req)
			require.Equal(t, as[0].MessageID, a.MessageID, req)
			require.Equal(t, as[0].Sequence, a.Sequence, req)
		}
		seqs = append(seqs, as[0].Sequence)
	}
	sort.Slice(seqs, func(i, j int) bool { return seqs[i] < seqs[j] })
	for i, s := range seqs {
		require.Equal(t, int64(i+1), s, "sequences are contiguous and unique")
	}

	// Exactly 200 messages, 200 runs, 200 bindings in Appwrite; 200 tasks in Redis.
	msgs, err := schema.For[schema.Message](env.Store, schema.CollMessages).All(ctx, schema.ListQuery{Owner: owner, Filters: []string{query.Equal("conversationId", conv)}})
	require.NoError(t, err)
	require.Len(t, msgs, distinct)
	for i, m := range sortBySeq(msgs) {
		require.Equal(t, int64(i+1), m.Sequence)
	}
	runs, err := schema.For[schema.Run](env.Store, schema.CollRuns).All(ctx, schema.ListQuery{Owner: owner})
	require.NoError(t, err)
	require.Len(t, runs, distinct)
	binds, err := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).All(ctx, schema.ListQuery{})
	require.NoError(t, err)
	require.Len(t, binds, distinct)
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: env.Redis.Addr})
	defer insp.Close()
	qi, err := insp.GetQueueInfo("gpu:arc")
	require.NoError(t, err)
	require.Equal(t, distinct, qi.Pending)
}

func sortBySeq(ms []schema.Message) []schema.Message {
	sort.Slice(ms, func(i, j int) bool { return ms[i].Sequence < ms[j].Sequence })
	return ms
}

func TestCrashBetweenWriteAndEnqueueIsHealed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "crash@example.com", "password-crash")
	conv := env.Conversation(t, jwt)
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: env.Redis.Addr})
	defer insp.Close()

	crash := errors.New("injected crash after writes")
	env.Svc.Admitter().AfterWrites = func(context.Context, admit.Result) error { return crash }
	res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "c1", "text": "one"})
	require.Equal(t, 500, res.Status)
	res = env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "c2", "text": "two"})
	require.Equal(t, 500, res.Status)
	env.Svc.Admitter().AfterWrites = nil

	_, err := insp.GetQueueInfo("gpu:arc")
	require.Error(t, err, "no task was enqueued")

	// Healed by re-submission: same ids, one task.
	first := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "c1", "text": "one"})
	require.Equal(t, 202, first.Status, string(first.Body))
	var a admitted
	first.JSON(t, &a)
	require.Equal(t, int64(1), a.Sequence)
	again := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "c1", "text": "one"})
	require.JSONEq(t, string(first.Body), string(again.Body))
	qi, err := insp.GetQueueInfo("gpu:arc")
	require.NoError(t, err)
	require.Equal(t, 1, qi.Pending)

	// Healed by the outbox: c2 was never re-submitted.
	ob := &outbox.Reconciler{Store: env.Store, Inspector: insp, Enq: queue.NewEnqueuer(asynq.NewClient(asynq.RedisClientOpt{Addr: env.Redis.Addr}))}
	n, err := ob.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	n, err = ob.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 0, n, "a second scan finds nothing to do")
	qi, err = insp.GetQueueInfo("gpu:arc")
	require.NoError(t, err)
	require.Equal(t, 2, qi.Pending)
}

func TestRedisDownAtAdmission(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	owner, jwt := env.SignUp(t, "redis@example.com", "password-redis")
	conv := env.Conversation(t, jwt)
	ok := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "warm", "text": "warm up"})
	require.Equal(t, 202, ok.Status)

	// Redis dies between the writes and the enqueue: the run is saved, the client gets 503
	// with a clear code, and the outbox picks the run up when Redis is back.
	env.Svc.Admitter().AfterWrites = func(context.Context, admit.Result) error { env.Redis.Stop(); return nil }
	res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "during", "text": "hi"})
	env.Svc.Admitter().AfterWrites = nil
	require.Equal(t, 503, res.Status, string(res.Body))
	require.Equal(t, "queue_unavailable", res.ErrorCode())
	require.NotEmpty(t, res.Header.Get("Retry-After"))
	var body struct {
		Error struct{ RunID string }
	}
	res.JSON(t, &body)
	require.NotEmpty(t, body.Error.RunID)

	// Redis entirely down: nothing is written, 503.
	res = env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "down", "text": "hi"})
	require.Equal(t, 503, res.Status)
	require.Equal(t, "queue_unavailable", res.ErrorCode())
	runs, err := schema.For[schema.Run](env.Store, schema.CollRuns).All(ctx, schema.ListQuery{Owner: owner})
	require.NoError(t, err)
	require.Len(t, runs, 2, "the refused request left no run")

	env.Redis.Restart()
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: env.Redis.Addr})
	defer insp.Close()
	ob := &outbox.Reconciler{Store: env.Store, Inspector: insp, Enq: queue.NewEnqueuer(asynq.NewClient(asynq.RedisClientOpt{Addr: env.Redis.Addr}))}
	// The restarted Redis has no data (no AOF in this test): both queued runs get a task,
	// never two.
	n, err := ob.Once(ctx)
	require.NoError(t, err)
	require.Equal(t, 2, n)
	qi, err := insp.GetQueueInfo("gpu:arc")
	require.NoError(t, err)
	require.Equal(t, 2, qi.Pending)

	// And admission works again, with the sequence counter rebuilt from Appwrite.
	res = env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "after", "text": "back"})
	require.Equal(t, 202, res.Status, string(res.Body))
	var a admitted
	res.JSON(t, &a)
	require.Equal(t, int64(3), a.Sequence)
}

func TestAppwriteDownIs503(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "aw@example.com", "password-awaw")
	down := functionstest.New(t, functionstest.Options{Mutate: func(c *service.Config) { c.Endpoint = "http://127.0.0.1:1/v1" }})
	res := down.Do(t, "GET", "/api/conversations", jwt, nil)
	require.Equal(t, 503, res.Status)
	require.Equal(t, "appwrite_unavailable", res.ErrorCode())
}

func TestRateLimitPerUser(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t, functionstest.Options{Mutate: func(c *service.Config) { c.AdmitRate = 3 }})
	_, jwt := env.SignUp(t, "rate@example.com", "password-rate")
	_, other := env.SignUp(t, "other@example.com", "password-other")
	conv := env.Conversation(t, jwt)
	for i := 0; i < 3; i++ {
		res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": fmt.Sprint(i), "text": "x"})
		require.Equal(t, 202, res.Status)
	}
	// Repeats do not count; a new request does.
	res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "0", "text": "x"})
	require.Equal(t, 202, res.Status)
	res = env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "new", "text": "x"})
	require.Equal(t, 429, res.Status)
	require.Equal(t, "rate_limited", res.ErrorCode())
	require.NotEmpty(t, res.Header.Get("Retry-After"))
	// Another user is not affected.
	oc := env.Conversation(t, other)
	res = env.Do(t, "POST", "/api/conversations/"+oc+"/messages", other, map[string]any{"requestId": "x", "text": "x"})
	require.Equal(t, 202, res.Status)
}

func TestRequestIDIsBoundToItsConversation(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	owner, jwt := env.SignUp(t, "reuse@example.com", "password-reuse")
	first, second := env.Conversation(t, jwt), env.Conversation(t, jwt)
	res := env.Do(t, "POST", "/api/conversations/"+first+"/messages", jwt, map[string]any{"requestId": "same", "text": "one"})
	require.Equal(t, 202, res.Status, string(res.Body))

	// The same request id in another conversation names the same message: refused, and
	// nothing is written to the other conversation.
	res = env.Do(t, "POST", "/api/conversations/"+second+"/messages", jwt, map[string]any{"requestId": "same", "text": "two"})
	require.Equal(t, 409, res.Status, string(res.Body))
	require.Equal(t, "request_id_reused", res.ErrorCode())
	msgs, err := schema.For[schema.Message](env.Store, schema.CollMessages).All(ctx, schema.ListQuery{Owner: owner, Filters: []string{query.Equal("conversationId", second)}})
	require.NoError(t, err)
	require.Empty(t, msgs)
	runs, err := schema.For[schema.Run](env.Store, schema.CollRuns).All(ctx, schema.ListQuery{Owner: owner})
	require.NoError(t, err)
	require.Len(t, runs, 1)
	b, err := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).Get(ctx, runs[0].ID)
	require.NoError(t, err)
	require.Equal(t, first, b.ConversationID, "the run's bindings still name its own conversation")
	// Nor was a sequence used up there.
	res = env.Do(t, "POST", "/api/conversations/"+second+"/messages", jwt, map[string]any{"requestId": "other", "text": "two"})
	require.Equal(t, 202, res.Status, string(res.Body))
	var a admitted
	res.JSON(t, &a)
	require.Equal(t, int64(1), a.Sequence)
}

// TestCounterBehindTheRecordTakesTheNextFreeSequence: when Redis's counter is behind the
// stored messages (restored from an old snapshot), the reservation collides with a stored
// (conversationId, sequence); admission raises the counter to the stored maximum and
// takes the next free sequence.
func TestCounterBehindTheRecordTakesTheNextFreeSequence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "behind@example.com", "password-behind")
	conv := env.Conversation(t, jwt)
	for _, req := range []string{"b1", "b2"} {
		res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": req, "text": req})
		require.Equal(t, 202, res.Status, string(res.Body))
	}
	rdb := redis.NewClient(&redis.Options{Addr: env.Redis.Addr})
	defer rdb.Close()
	require.NoError(t, rdb.Set(ctx, queue.ConvSeqKey(conv), 0, 0).Err())

	res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "b3", "text": "b3"})
	require.Equal(t, 202, res.Status, string(res.Body))
	var a admitted
	res.JSON(t, &a)
	require.Equal(t, int64(3), a.Sequence)
	n, err := rdb.Get(ctx, queue.ConvSeqKey(conv)).Int64()
	require.NoError(t, err)
	require.Equal(t, int64(3), n, "the counter caught up with the record")
	// The bindings, written while the message collided at sequence 1, name sequence 3.
	b, err := schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).Get(ctx, a.RunID)
	require.NoError(t, err)
	require.Equal(t, admit.SnapshotID(conv, 3), b.ContextSnapshotID)
	require.Equal(t, conv, b.ConversationID)
}

func TestRepeatOfAFinishedRunIsNotEnqueuedAgain(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	_, jwt := env.SignUp(t, "done@example.com", "password-done")
	conv := env.Conversation(t, jwt)
	res := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "d1", "text": "one"})
	require.Equal(t, 202, res.Status, string(res.Body))
	var a admitted
	res.JSON(t, &a)

	// The agent ran it: the task is gone and the run is completed.
	insp := asynq.NewInspector(asynq.RedisClientOpt{Addr: env.Redis.Addr})
	defer insp.Close()
	require.NoError(t, insp.DeleteTask("gpu:arc", a.RunID))
	schematest.SetRunStatus(t, env.Store, a.RunID, schema.RunCompleted, nil)

	again := env.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": "d1", "text": "one"})
	require.Equal(t, 202, again.Status, string(again.Body))
	var b admitted
	again.JSON(t, &b)
	require.Equal(t, a.RunID, b.RunID)
	require.Equal(t, a.Sequence, b.Sequence)
	require.Equal(t, "completed", b.Status, "a repeat reports the run as it is now")
	_, err := insp.GetTaskInfo("gpu:arc", a.RunID)
	require.ErrorIs(t, err, asynq.ErrTaskNotFound, "a finished run is never enqueued again")
}
