package executor_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/queue"
)

// redisCounter is a go-redis hook counting the commands a client sends (a pipeline's
// commands one by one).
type redisCounter struct {
	mu sync.Mutex
	n  int
}

func (c *redisCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *redisCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		c.add(1)
		return next(ctx, cmd)
	}
}

func (c *redisCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.add(len(cmds))
		return next(ctx, cmds)
	}
}

func (c *redisCounter) add(n int) {
	c.mu.Lock()
	c.n += n
	c.mu.Unlock()
}

func (c *redisCounter) take() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := c.n
	c.n = 0
	return n
}

// TestResumeScanCost seeds 1,000 queued runs, each with its pending task in asynq, and
// counts what one resume scan costs: Redis commands (a go-redis hook on the scanner's own
// client) and Appwrite requests (counted at the emulator's HTTP client). The figures per
// minute assume the default scan every 5 s (12 scans a minute). It prints them
// (docs/performance-log.md: `go test -run TestResumeScanCost -v ./agent/executor/`) and
// asserts the scan between backstops: one Redis command, no Appwrite request. Counts, not
// timings: the machine's load does not move them.
func TestResumeScanCost(t *testing.T) {
	if testing.Short() {
		t.Skip("seeds 1,000 runs")
	}
	const runs = 1000
	s := setup(t, newFake(func(string) []harness.Event { return nil }, 0))
	ctx := context.Background()
	enq := asynq.NewClientFromRedisClient(s.rdb)
	for i := 0; i < runs; i++ {
		id := s.newRun(t)
		_, err := enq.EnqueueContext(ctx, asynq.NewTask(queue.TypeRun, []byte(`{"runId":"`+id+`","ownerId":"u1","conversationId":"c"}`)), asynq.TaskID(id), asynq.Queue("q"))
		require.NoError(t, err)
	}
	rdb := redis.NewClient(s.rdb.Options())
	t.Cleanup(func() { _ = rdb.Close() })
	rc := &redisCounter{}
	rdb.AddHook(rc)
	store, ac := s.env.CountingStore()
	r := &executor.Resumer{RDB: rdb, Store: store, Enq: queue.NewEnqueuer(asynq.NewClientFromRedisClient(rdb)),
		Inspector: asynq.NewInspectorFromRedisClient(rdb), Queues: []string{"q"}}
	rc.take()
	ac.Reset()
	// The first scan of a process lists every unfinished run (the backstop), as every
	// DefaultBackstop does later.
	n, err := r.Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "queued runs with pending tasks are asynq's")
	backCmds, backCalls := rc.take(), ac.Reads()+ac.Writes()
	ac.Reset()
	const scans = 3
	for i := 0; i < scans; i++ {
		n, err := r.Once(ctx)
		require.NoError(t, err)
		require.Zero(t, n)
	}
	cmds, calls := rc.take()/scans, (ac.Reads()+ac.Writes())/scans
	require.Zero(t, calls, "a scan between backstops reads nothing from Appwrite")
	require.Equal(t, 1, cmds, "a scan between backstops is one Redis command per queue")
	perMin := int(time.Minute / (5 * time.Second))
	backPerMin := float64(time.Minute) / float64(executor.DefaultBackstop)
	t.Logf("resume scan, %d queued runs: %d Redis commands and %d Appwrite requests per scan; the backstop listing %d and %d every %s;"+
		" per minute (a scan every 5 s) %.0f Redis commands and %.0f Appwrite requests",
		runs, cmds, calls, backCmds, backCalls, executor.DefaultBackstop,
		float64(cmds*perMin)+float64(backCmds)*backPerMin, float64(calls*perMin)+float64(backCalls)*backPerMin)
}
