package daemon_test

import (
	"context"
	"fmt"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/stretchr/testify/require"

	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// checkExactlyOnce asserts the invariants every run must keep whatever happened to the
// agent: one native run, contiguous events in Redis and in Appwrite alike (none lost,
// none doubled), one terminal event, one final message.
func checkExactlyOnce(t *testing.T, env *stacktest.Env, owner, jwt string, runIDs []string) {
	t.Helper()
	ctx := context.Background()
	for _, id := range runIDs {
		evs, status := env.Follow(t, jwt, id, 2*time.Minute, nil) // asserts contiguity
		require.Equal(t, "completed", status, id)
		terminal := 0
		for _, e := range evs {
			if queue.IsTerminalEvent(e.Type) {
				terminal++
			}
		}
		require.Equal(t, 1, terminal, "one terminal event")
		// Followers see the terminal event before the executor has flushed the log to
		// Appwrite and settled the record (by design): read Appwrite once it settled.
		run := settledRun(t, env, id)
		require.Equal(t, int64(len(evs)), *run.LastSequence)
		stored, err := schema.For[schema.Event](env.Store, schema.CollEvents).All(ctx, schema.ListQuery{Owner: owner,
			Filters: []string{query.Equal("runId", id)}, Order: []string{query.OrderAsc("sequence")}})
		require.NoError(t, err)
		require.Len(t, stored, len(evs), "Appwrite holds every event once")
		for i, e := range stored {
			require.Equal(t, int64(i+1), e.Sequence)
			require.Equal(t, evs[i].Type, e.Type)
		}
		require.Len(t, answers(t, env, owner, id), 1, "one final message")
	}
	// Counted once every run completed: a run still queued behind the others (a loaded
	// box, the last one admitted just before the last kill) has not created its native
	// run yet, which is not a duplicate or a loss.
	require.Equal(t, len(runIDs), env.Hermes.RunsCreated(), "one native run per run")
}

// chaosSeed is the random seed of a chaos test: PA_CHAOS_SEED when set (to rerun a
// failure), otherwise the clock. It is printed either way, so a failing run can be
// repeated with PA_CHAOS_SEED=<seed> go test -run <name> ./agent/daemon/.
func chaosSeed(t *testing.T) int64 {
	t.Helper()
	seed := time.Now().UnixNano()
	if v := os.Getenv("PA_CHAOS_SEED"); v != "" {
		n, err := strconv.ParseInt(v, 10, 64)
		require.NoError(t, err, "PA_CHAOS_SEED must be an integer")
		seed = n
	}
	t.Logf("chaos seed %d (rerun with PA_CHAOS_SEED=%d)", seed, seed)
	fmt.Fprintf(os.Stderr, "%s: chaos seed %d\n", t.Name(), seed)
	return seed
}

func buildAgent(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "agent")
	cmd := exec.Command("go", "build", "-o", bin, ".")
	cmd.Dir = filepath.Join("..")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	return bin
}

func agentEnv(env *stacktest.Env) []string {
	s := env.Settings
	return append(os.Environ(),
		"APPWRITE_ENDPOINT="+s.AppwriteEndpoint, "APPWRITE_PROJECT_ID="+s.AppwriteProject, "APPWRITE_API_KEY="+s.AppwriteKey,
		"APPWRITE_DATABASE_ID="+s.DatabaseID, "PA_REDIS_ADDR="+s.RedisAddr, "PA_AGENT_ID=child",
		"PA_AGENT_DEVICES="+s.Devices, "PA_AGENT_OPS_ADDR=127.0.0.1:0", "PA_AGENT_ARTIFACT_ROOT="+s.ArtifactRoot,
		"PA_AGENT_LEASE_TTL=1s", "PA_AGENT_HEARTBEAT=250ms", "PA_AGENT_RESUME_EVERY=200ms", "PA_AGENT_OUTBOX_EVERY=1s",
		"PA_AGENT_DELTA_WINDOW=50ms", "PA_AGENT_SHUTDOWN_GRACE=1s")
}

// chaosTrials is how many SIGKILL trials TestSIGKILLAtTwentyRandomPoints runs: 20 in
// `make test`, PA_CHAOS_TRIALS (100 in `make chaos`) when set.
func chaosTrials(t *testing.T) int {
	t.Helper()
	v := os.Getenv("PA_CHAOS_TRIALS")
	if v == "" {
		return 20
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "PA_CHAOS_TRIALS must be an integer")
	require.Positive(t, n)
	return n
}

// TestSIGKILLAtTwentyRandomPoints kills the agent (a child process) with SIGKILL at 20
// random moments (PA_CHAOS_TRIALS to change it) while runs are in flight, restarting it
// each time. Every fifth trial admits a further run, so kills land at every stage of a
// run (queued, claiming, streaming, finishing) across the trials.
func TestSIGKILLAtTwentyRandomPoints(t *testing.T) {
	t.Parallel()
	trials := chaosTrials(t)
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.Model.SetScript("#marathon", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: strings.Fields(strings.Repeat("step ", 40)), TokenDelay: 40 * time.Millisecond,
			ToolCalls: []modeltest.ToolCall{{Name: "write_file", Arguments: `{"path":"notes.txt","content":"kept"}`}}},
		{Tokens: strings.Fields(strings.Repeat("more ", 40)), TokenDelay: 40 * time.Millisecond},
	}})
	bin := buildAgent(t)
	owner, jwt := env.SignUp(t, "kill@example.com", "password-kill")
	conv := env.Conversation(t, jwt)
	a := env.Admit(t, jwt, conv, "k1", "a #marathon please", "")
	b := env.Admit(t, jwt, conv, "k2", "another #marathon", "research")
	runs := []string{a.RunID, b.RunID}

	var mu sync.Mutex
	var cur *exec.Cmd
	start := func() {
		cmd := exec.Command(bin)
		cmd.Env = agentEnv(env)
		cmd.Dir = t.TempDir()
		require.NoError(t, cmd.Start())
		mu.Lock()
		cur = cmd
		mu.Unlock()
	}
	t.Cleanup(func() {
		mu.Lock()
		defer mu.Unlock()
		if cur != nil && cur.Process != nil {
			_ = cur.Process.Kill()
			_ = cur.Wait()
		}
	})
	rng := rand.New(rand.NewSource(chaosSeed(t)))
	start()
	for i := 0; i < trials; i++ {
		if i > 0 && i%20 == 0 { // longer runs: keep work in flight for every trial
			role := ""
			if i%40 == 0 {
				role = "research"
			}
			runs = append(runs, env.Admit(t, jwt, conv, fmt.Sprintf("k%d", i), "more #marathon", role).RunID)
		}
		time.Sleep(time.Duration(rng.Intn(600)+50) * time.Millisecond)
		mu.Lock()
		require.NoError(t, cur.Process.Kill()) // SIGKILL: no cleanup at all
		_ = cur.Wait()
		mu.Unlock()
		start()
	}
	t.Logf("%d SIGKILL trials over %d runs", trials, len(runs))
	checkExactlyOnce(t, env, owner, jwt, runs)
}

// TestRedisPausedFortySeconds freezes Redis for 40 s mid-run (asynq then cancels every
// in-flight handler): the run re-attaches and completes exactly once.
func TestRedisPausedFortySeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 40 s")
	}
	t.Parallel()
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.Model.SetScript("#steady", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 100)), TokenDelay: 30 * time.Millisecond}}})
	env.StartAgent(t)
	owner, jwt := env.SignUp(t, "pause@example.com", "password-pause")
	conv := env.Conversation(t, jwt)
	a := env.Admit(t, jwt, conv, "p1", "go #steady", "")
	paused := false
	env.Follow(t, jwt, a.RunID, 30*time.Second, func(ev queue.Event) bool {
		if ev.Type == queue.EventMessageDelta && !paused {
			paused = true
			require.NoError(t, env.Redis.Pause(context.Background(), 40*time.Second))
			return false
		}
		return true
	})
	require.True(t, paused)
	// Wait for the pause to end (Redis answers again), bounded.
	rdb := env.Redis.Client()
	defer rdb.Close()
	require.Eventually(t, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		defer cancel()
		return rdb.Ping(ctx).Err() == nil
	}, 60*time.Second, 200*time.Millisecond)
	checkExactlyOnce(t, env, owner, jwt, []string{a.RunID})
}

// TestAppwriteDownThirtySeconds takes Appwrite away for 30 s mid-run: events keep flowing
// through Redis, are written to Appwrite later, none lost and none doubled.
func TestAppwriteDownThirtySeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("takes 30 s")
	}
	t.Parallel()
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.Model.SetScript("#steady", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 200)), TokenDelay: 50 * time.Millisecond}}})
	env.StartAgent(t)
	owner, jwt := env.SignUp(t, "aw@example.com", "password-awdown")
	conv := env.Conversation(t, jwt)
	a := env.Admit(t, jwt, conv, "w1", "go #steady", "")
	down := false
	var during int
	env.Follow(t, jwt, a.RunID, 30*time.Second, func(ev queue.Event) bool {
		if ev.Type == queue.EventMessageDelta && !down {
			down = true
			env.TS.SetDown(true)
			return false
		}
		return true
	})
	require.True(t, down)
	// Events still reach Redis while Appwrite is down.
	rdb := env.Redis.Client()
	defer rdb.Close()
	before, _, err := queue.ReadEvents(context.Background(), rdb, a.RunID, 0, 0)
	require.NoError(t, err)
	time.Sleep(30 * time.Second)
	evs, _, err := queue.ReadEvents(context.Background(), rdb, a.RunID, 0, 0)
	require.NoError(t, err)
	during = len(evs) - len(before)
	env.TS.SetDown(false)
	require.Positive(t, during, "the stream kept moving while Appwrite was down")
	checkExactlyOnce(t, env, owner, jwt, []string{a.RunID})
	fmt.Fprintf(os.Stderr, "appwrite-down: %d events streamed during the outage\n", during)
}
