package gateway

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/queue/redistest"
)

// writerClient is a client of the writer's own (PoolSize 1) for s, as user (s's
// administrator when "").
func writerClient(s *redistest.Server, user, password string) *redis.Client {
	if user == "" {
		user, password = s.Username, s.Password
	}
	return redis.NewClient(&redis.Options{Addr: s.Addr, Username: user, Password: password,
		TLSConfig: s.TLSConfig(), PoolSize: 1})
}

// newWriter is a writer on a client of its own for s (as user: user, password), not yet
// started; the test's end stops it and closes the client.
func newWriter(t *testing.T, s *redistest.Server, user ...string) *UsageWriter {
	t.Helper()
	var c *redis.Client
	if len(user) == 2 {
		c = writerClient(s, user[0], user[1])
	} else {
		c = writerClient(s, "", "")
	}
	w, err := NewUsageWriter(c, nil)
	require.NoError(t, err)
	t.Cleanup(func() { w.Stop(); _ = c.Close() })
	return w
}

func startWriter(t *testing.T, s *redistest.Server, user ...string) *UsageWriter {
	t.Helper()
	w := newWriter(t, s, user...)
	require.NoError(t, w.Start(context.Background()))
	return w
}

// pauseWrites makes s hold every write command for d (CLIENT PAUSE WRITE: reads are
// answered meanwhile), so a record is sent but not acknowledged until d has passed.
func pauseWrites(t *testing.T, s *redistest.Server, d time.Duration) {
	t.Helper()
	c := s.Client()
	defer c.Close()
	require.NoError(t, c.Do(context.Background(), "CLIENT", "PAUSE", strconv.FormatInt(d.Milliseconds(), 10), "WRITE").Err())
}

// Record returns when the record has left for Redis, not when Redis has applied it; Settle
// returns when it has. Redis holds writes for 1.5 s here: right after Record the run's
// usage reads empty (a Record that waited for the acknowledgement would find it counted),
// after Settle it reads the record. Also over TLS as deploy/redis-users.acl's pa-agent
// user, as deploy/ runs Redis.
func TestUsageWriterRecordReturnsBeforeTheAcknowledgement(t *testing.T) {
	t.Parallel()
	for _, tlsOn := range []bool{false, true} {
		t.Run(fmt.Sprintf("tls=%v", tlsOn), func(t *testing.T) {
			ctx := context.Background()
			opts, user := redistest.Options{}, []string(nil)
			if tlsOn {
				opts = redistest.Options{TLS: true, ACL: []string{"user default off",
					"user pa-agent on >agent-password-0123456789 resetkeys resetchannels -@all +@all -@dangerous -@admin +info &asynq:cancel ~asynq:* ~pa:*"}}
				user = []string{"pa-agent", "agent-password-0123456789"}
			}
			s := redistest.Start(t, opts)
			w := startWriter(t, s, user...)
			rdb := s.Client()
			defer rdb.Close()
			w.Record(ctx, Usage{Run: "warm", Alias: "r", Device: "d"}) // the connection is up
			require.NoError(t, w.Settle(ctx, "warm"))

			pauseWrites(t, s, 1500*time.Millisecond)
			w.Record(ctx, Usage{Run: "run-1", Alias: "r", Device: "d", EffectiveModel: "m", PromptTokens: 12, CompletionTokens: 3})
			m, err := rdb.HGetAll(ctx, UsageKey("run-1")).Result()
			require.NoError(t, err)
			require.Empty(t, m, "Record waited for Redis to apply the record")
			require.NoError(t, w.Settle(ctx, "run-1"))
			m, err = rdb.HGetAll(ctx, UsageKey("run-1")).Result()
			require.NoError(t, err)
			require.Equal(t, map[string]string{"promptTokens": "12", "completionTokens": "3", "requests": "1",
				"alias": "r", "device": "d", "generation": "0", "effectiveModel": "m"}, m)
		})
	}
}

// Settle bounded by its context says the records are not yet acknowledged.
func TestUsageWriterSettleEndsWithItsContext(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	w := startWriter(t, s)
	ctx := context.Background()
	w.Record(ctx, Usage{Run: "warm"})
	pauseWrites(t, s, time.Second)
	w.Record(ctx, Usage{Run: "run-1"})
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	require.ErrorContains(t, w.Settle(short, "run-1"), "not yet acknowledged")
	require.NoError(t, w.Settle(ctx, "run-1"))
	require.NoError(t, w.Settle(ctx, "never-recorded"))
}

// Records from many requests at once are all counted, in batches (fewer transactions than
// records); those still queued when Stop comes are written before it returns; one after
// Stop is written by Record itself.
func TestUsageWriterCountsEveryRecordAndStopWritesTheQueue(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	w := newWriter(t, s)
	ctx := context.Background()
	require.NoError(t, w.Start(ctx))
	rdb := s.Client()
	defer rdb.Close()
	execs := func() int64 {
		info, err := rdb.InfoMap(ctx, "commandstats").Result()
		require.NoError(t, err)
		n, _ := strconv.ParseInt(parseCalls(info["Commandstats"]["cmdstat_exec"]), 10, 64)
		return n
	}
	e0 := execs()
	const runs, each = 20, 25
	var wg sync.WaitGroup
	for r := range runs {
		for range each {
			wg.Add(1)
			go func() {
				defer wg.Done()
				w.Record(ctx, Usage{Run: fmt.Sprintf("run-%d", r), PromptTokens: 2, CompletionTokens: 1})
			}()
		}
	}
	wg.Wait()
	w.Stop() // what is still unacknowledged is acknowledged before Stop returns
	for r := range runs {
		require.NoError(t, w.Settle(ctx, fmt.Sprintf("run-%d", r)))
		m, err := rdb.HGetAll(ctx, UsageKey(fmt.Sprintf("run-%d", r))).Result()
		require.NoError(t, err)
		require.Equal(t, strconv.Itoa(each), m["requests"])
		require.Equal(t, strconv.Itoa(2*each), m["promptTokens"])
	}
	n := execs() - e0
	require.Positive(t, n)
	require.Less(t, n, int64(runs*each), "records in flight together share a transaction")
	t.Logf("%d records in %d transactions", runs*each, n)

	w.Record(ctx, Usage{Run: "after-stop", CompletionTokens: 5})
	v, err := rdb.HGet(ctx, UsageKey("after-stop"), "completionTokens").Result()
	require.NoError(t, err)
	require.Equal(t, "5", v)
}

func parseCalls(stat string) string {
	// "calls=3,usec=…"
	var calls string
	if _, err := fmt.Sscanf(stat, "calls=%s", &calls); err != nil {
		return "0"
	}
	for i, c := range calls {
		if c == ',' {
			return calls[:i]
		}
	}
	return calls
}

// A client with a pool is refused: the hook must see one connection carry the batches.
func TestUsageWriterNeedsAClientOfItsOwn(t *testing.T) {
	c := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", PoolSize: 8})
	defer c.Close()
	_, err := NewUsageWriter(c, nil)
	require.ErrorContains(t, err, "PoolSize 1")
}

// A record is not lost when the agent dies the moment the answer has gone: the helper
// process records through a started writer and SIGKILLs itself as soon as Record
// returns; Redis still applies the record (its bytes were in the kernel). A writer that
// returned from Record before writing (a queue alone) fails here.
func TestUsageSurvivesTheAgentDyingRightAfterRecord(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	rdb := s.Client()
	defer rdb.Close()
	for i := range 5 {
		run := fmt.Sprintf("dying-%d", i)
		cmd := exec.Command(os.Args[0], "-test.run=^TestHelperRecordsAndDies$", "-test.count=1")
		cmd.Env = append(os.Environ(), "PA_TEST_USAGE_REDIS="+s.Addr, "PA_TEST_USAGE_RUN="+run)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		require.ErrorAs(t, err, &ee, "%s", out)
		require.Equal(t, syscall.SIGKILL, ee.Sys().(syscall.WaitStatus).Signal(), "%s", out)
		require.Eventually(t, func() bool {
			v, err := rdb.HGet(context.Background(), UsageKey(run), "completionTokens").Result()
			return err == nil && v == "7"
		}, 5*time.Second, 10*time.Millisecond, "the record of the dead helper never reached Redis")
	}
}

// TestHelperRecordsAndDies is the agent of TestUsageSurvivesTheAgentDyingRightAfterRecord.
func TestHelperRecordsAndDies(t *testing.T) {
	addr, run := os.Getenv("PA_TEST_USAGE_REDIS"), os.Getenv("PA_TEST_USAGE_RUN")
	if addr == "" {
		t.Skip("helper process only")
	}
	c := redis.NewClient(&redis.Options{Addr: addr, PoolSize: 1})
	w, err := NewUsageWriter(c, nil)
	require.NoError(t, err)
	require.NoError(t, w.Start(context.Background()))
	require.NoError(t, c.Ping(context.Background()).Err()) // the connection is up: Record is all that is timed
	w.Record(context.Background(), Usage{Run: run, CompletionTokens: 7})
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {}
}

// The writer outlives the context it was started with: the agent cancels that context
// before its gateway's listener has drained the requests in flight, and a record made
// then must still be written (not wait forever in a queue nobody reads). Only Stop ends it.
func TestUsageWriterOutlivesItsStartContext(t *testing.T) {
	t.Parallel()
	s := redistest.Start(t)
	w := newWriter(t, s)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, w.Start(ctx))
	w.Record(context.Background(), Usage{Run: "before"})
	cancel()
	// Give a writer that (wrongly) ends with its start context the time to end.
	w.mu.RLock()
	done := w.done
	w.mu.RUnlock()
	select {
	case <-done:
	case <-time.After(200 * time.Millisecond):
	}
	recorded := make(chan struct{})
	go func() {
		defer close(recorded)
		w.Record(context.Background(), Usage{Run: "after-cancel", CompletionTokens: 3})
	}()
	select {
	case <-recorded:
	case <-time.After(10 * time.Second):
		t.Fatal("a record made after the start context ended was never taken")
	}
	require.NoError(t, w.Settle(context.Background(), "after-cancel"))
	rdb := s.Client()
	defer rdb.Close()
	v, err := rdb.HGet(context.Background(), UsageKey("after-cancel"), "completionTokens").Result()
	require.NoError(t, err)
	require.Equal(t, "3", v)
}
