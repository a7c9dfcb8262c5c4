package daemon_test

import (
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/stacktest"
)

// appwriteOutage is how long TestOutageAppwriteDown keeps Appwrite away:
// PA_APPWRITE_OUTAGE (make chaos sets 10m), otherwise 12 s.
func appwriteOutage(t *testing.T) time.Duration {
	t.Helper()
	if v := os.Getenv("PA_APPWRITE_OUTAGE"); v != "" {
		d, err := time.ParseDuration(v)
		require.NoError(t, err, "PA_APPWRITE_OUTAGE is a duration")
		return d
	}
	return 12 * time.Second
}

// TestOutageAppwriteDown (issue 14, item 6): Appwrite goes away while one job streams on
// the exclusive xtx device and another waits behind it. The streaming job's native run
// goes on (its events reach Redis) but cannot settle until Appwrite is back. make chaos
// runs it with a 10-minute outage (PA_APPWRITE_OUTAGE=10m): the first job's settlement
// gives up after its 2-minute bound, and the waiting job's task is then delivered and
// fails on every retry until asynq archives it (asserted); when Appwrite is back the
// resume scanner resumes the first (running in Appwrite, no lease) and the outbox
// re-enqueues the second's archived task (queued in Appwrite). make test runs it with
// 12 s (the settlement waits Appwrite out). Either way both complete exactly once, one
// native run each, and no task is left queued.
func TestOutageAppwriteDown(t *testing.T) {
	t.Parallel()
	outage := appwriteOutage(t)
	env := stacktest.New(t)
	env.Model.SetScript("#steady", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 120)), TokenDelay: 30 * time.Millisecond}}})
	env.StartAgent(t)
	owner, jwt := env.SignUp(t, "awdown@example.com", "password-awdown")
	first := env.Admit(t, jwt, env.Conversation(t, jwt), "w1", "go #steady", "coding")
	second := env.Admit(t, jwt, env.Conversation(t, jwt), "w2", "go #steady as well", "coding")
	env.Follow(t, jwt, first.RunID, 30*time.Second, func(ev queue.Event) bool { return ev.Type != queue.EventMessageDelta })

	env.TS.SetDown(true)
	start := time.Now()
	q := queue.DeviceQueue("xtx")
	if outage >= 8*time.Minute {
		require.Eventually(t, func() bool {
			ti := runTask(t, env, q, second.RunID)
			return ti != nil && ti.State == asynq.TaskStateArchived
		}, outage, time.Second, "the waiting job's task runs out of retries during the outage")
		t.Logf("the waiting job's task was archived after %s", time.Since(start).Round(time.Second))
	}
	if rest := outage - time.Since(start); rest > 0 {
		time.Sleep(rest) // the outage itself: nothing to wait on, Appwrite is simply away
	}
	env.TS.SetDown(false)
	t.Logf("Appwrite was down for %s", time.Since(start).Round(time.Second))

	for _, id := range []string{first.RunID, second.RunID} {
		env.Follow(t, jwt, id, 5*time.Minute, nil) // settled (the outbox's backoff is up to 10 min after an archive)
		t.Logf("run %s settled %s after the outage began", id[:8], time.Since(start).Round(time.Second))
	}
	checkExactlyOnce(t, env, owner, jwt, []string{first.RunID, second.RunID})
	requireNoTaskLeft(t, env, q)
}

// requireNoTaskLeft waits for q to hold no pending, active, scheduled or retry task, and
// names the tasks left (id, state, last error) when it does not. It waits 90 s: a task
// that failed while Appwrite was away (its attempt could not read the run) is retried
// after asynq's default delay (15–45 s the first time, 16–76 s the second) and then
// finds its run settled; under a loaded CI box 30 s was once not enough.
func requireNoTaskLeft(t *testing.T, env *stacktest.Env, q string) {
	t.Helper()
	rdb := env.Redis.Client()
	defer rdb.Close()
	in := asynq.NewInspectorFromRedisClient(rdb)
	deadline := time.Now().Add(90 * time.Second)
	for {
		qi, err := in.GetQueueInfo(q)
		if err == nil && qi.Pending+qi.Active+qi.Scheduled+qi.Retry == 0 {
			return
		}
		if time.Now().After(deadline) {
			var left []string
			for _, list := range []func(string, ...asynq.ListOption) ([]*asynq.TaskInfo, error){
				in.ListPendingTasks, in.ListActiveTasks, in.ListScheduledTasks, in.ListRetryTasks} {
				tis, _ := list(q)
				for _, ti := range tis {
					left = append(left, fmt.Sprintf("%s %s (retried %d, next %s, last error %q)", ti.ID, ti.State, ti.Retried, ti.NextProcessAt.Format(time.RFC3339), ti.LastErr))
				}
			}
			require.Failf(t, "no task left queued", "left in %s: %v", q, left)
		}
		time.Sleep(100 * time.Millisecond)
	}
}
