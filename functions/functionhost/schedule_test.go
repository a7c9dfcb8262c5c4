package functionhost_test

import (
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-runtimes/types-for-go/v4/openruntimes"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionhost"
)

// justBeforeAMinute is a clock that reaches the next whole minute d from now (cron's
// finest step), so a test sees a "* * * * *" schedule fire without waiting a minute.
func justBeforeAMinute(d time.Duration) func() time.Time {
	base := time.Now()
	skew := base.Truncate(time.Minute).Add(time.Minute).Add(-d).Sub(base)
	return func() time.Time { return time.Now().Add(skew) }
}

func recentOf(h *functionhost.Host, trigger string) []functionhost.Execution {
	var out []functionhost.Execution
	for _, e := range h.Stats(true).Recent {
		if e.Trigger == trigger {
			out = append(out, e)
		}
	}
	return out
}

// TestScheduledExecutionsRunLikeAppwrites: a function's cron schedule runs it at the time
// it names as Appwrite's functions worker does: asynchronously (the only API worker is
// busy with a synchronous execution and it runs all the same), POST / with no body, the
// headers of a scheduled execution (trigger schedule, no user, no JWT, the function's
// key, its execution id, no client IP), one execution record with trigger schedule. A
// function without a schedule never runs on its own.
func TestScheduledExecutionsRunLikeAppwrites(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		seen []openruntimes.Context
	)
	ran := make(chan struct{}, 4)
	tick := func(c openruntimes.Context) openruntimes.Response {
		mu.Lock()
		seen = append(seen, c)
		mu.Unlock()
		ran <- struct{}{}
		return c.Res.Json(map[string]any{"ok": true})
	}
	hold, held := make(chan struct{}), make(chan struct{})
	busy := func(c openruntimes.Context) openruntimes.Response {
		close(held)
		<-hold
		return c.Res.Text("done")
	}
	never := func(c openruntimes.Context) openruntimes.Response {
		t.Error("a function without a schedule ran on its own")
		return c.Res.Text("")
	}
	h := &functionhost.Host{Workers: 1, Now: justBeforeAMinute(700 * time.Millisecond), Functions: []functionhost.Function{
		{Name: "tick", Prefixes: []string{"/api/tick"}, Main: tick, Key: "tick-key", Schedule: "* * * * *", Timeout: 5 * time.Second},
		{Name: "busy", Prefixes: []string{"/api/busy"}, Main: busy},
		{Name: "never", Prefixes: []string{"/api/never"}, Main: never},
	}}
	s := httptest.NewServer(h)
	defer s.Close()
	// The only synchronous worker is held.
	syncDone := make(chan struct{})
	go func() { defer close(syncDone); do(t, s.URL, "GET", "/api/busy") }()
	<-held
	require.NoError(t, h.StartSchedules())
	require.ErrorIs(t, h.StartSchedules(), functionhost.ErrScheduling, "one scheduler")
	select {
	case <-ran:
	case <-time.After(10 * time.Second):
		t.Fatal("the schedule did not run at the minute")
	}
	require.Eventually(t, func() bool { return len(recentOf(h, "schedule")) == 1 }, 5*time.Second, 10*time.Millisecond)
	close(hold)
	<-syncDone
	h.StopSchedules()

	rec := recentOf(h, "schedule")[0]
	require.Equal(t, int64(1), h.Stats(false).PerTrigger["schedule"], "counted by trigger: what a page causes is the http count")
	require.Equal(t, "tick", rec.Function)
	require.Equal(t, 200, rec.Status)
	require.Equal(t, "POST", rec.Method)
	require.Equal(t, "/", rec.Path)
	mu.Lock()
	c := seen[0]
	mu.Unlock()
	require.Equal(t, "POST", c.Req.Method)
	require.Equal(t, "/", c.Req.Path)
	require.Empty(t, c.Req.BodyBinary())
	hd := c.Req.Headers
	require.Equal(t, "schedule", hd["x-appwrite-trigger"])
	require.Equal(t, "", hd["x-appwrite-user-id"])
	require.Equal(t, "", hd["x-appwrite-user-jwt"])
	require.Equal(t, "", hd["x-appwrite-event"])
	require.Equal(t, "tick-key", hd["x-appwrite-key"])
	require.Equal(t, rec.ID, hd["x-appwrite-execution-id"])
	require.NotContains(t, hd, "x-appwrite-client-ip")
	require.Len(t, recentOf(h, "http"), 1, "the synchronous execution has its own record")
	require.Equal(t, int64(0), h.Stats(false).PerFunction["never"])
}

// TestAsyncExecutionsAreBounded: at most AsyncWorkers asynchronous executions run at
// once, the others wait queued (AsyncWaiting); one that outlives its function's timeout
// is recorded as failed (408) and frees its slot, and StopSchedules still waits for it.
func TestAsyncExecutionsAreBounded(t *testing.T) {
	t.Parallel()
	var running, most atomic.Int64
	release := make(chan struct{})
	slow := func(c openruntimes.Context) openruntimes.Response {
		n := running.Add(1)
		defer running.Add(-1)
		for {
			m := most.Load()
			if n <= m || most.CompareAndSwap(m, n) {
				break
			}
		}
		<-release
		return c.Res.Text("ok")
	}
	h := &functionhost.Host{AsyncWorkers: 1, Functions: []functionhost.Function{
		{Name: "slow", Prefixes: []string{"/api/slow"}, Main: slow, Timeout: 200 * time.Millisecond},
	}}
	_, err := h.Execute("slow", "schedule")
	require.ErrorIs(t, err, functionhost.ErrScheduling, "no functions worker before StartSchedules")
	require.NoError(t, h.StartSchedules())
	first, err := h.Execute("slow", "schedule")
	require.NoError(t, err)
	second, err := h.Execute("slow", "schedule")
	require.NoError(t, err)
	require.Eventually(t, func() bool { st := h.Stats(false); return st.AsyncBusy == 1 && st.AsyncWaiting == 1 }, 5*time.Second, 5*time.Millisecond)
	// The first times out (its Main still blocked): its slot goes to the second.
	require.Eventually(t, func() bool { return len(recentOf(h, "schedule")) == 1 }, 5*time.Second, 5*time.Millisecond)
	got := recentOf(h, "schedule")[0]
	require.Equal(t, first, got.ID)
	require.Equal(t, functionhost.AsyncTimeoutStatus, got.Status)
	require.Eventually(t, func() bool { return running.Load() == 2 }, 5*time.Second, 5*time.Millisecond)
	close(release)
	require.Eventually(t, func() bool { return len(recentOf(h, "schedule")) == 2 }, 5*time.Second, 5*time.Millisecond)
	h.StopSchedules()
	require.Equal(t, second, recentOf(h, "schedule")[1].ID)
	require.Equal(t, int64(0), h.Stats(false).Busy, "no API worker was taken")
	_, err = h.Execute("nope", "schedule")
	require.Error(t, err)
}

// TestSchedulesAppwriteAccepts: five fields or a descriptor; no seconds, no @every, no
// time zone prefix (dragonmantank/cron-expression reads none of them).
func TestSchedulesAppwriteAccepts(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"* * * * *", "*/5 * * * *", "0 3 * * 1", "@hourly", "@daily"} {
		_, err := functionhost.ParseSchedule(ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"", "* * * * * *", "@every 1s", "TZ=UTC * * * * *", "CRON_TZ=UTC * * * * *", "61 * * * *"} {
		_, err := functionhost.ParseSchedule(bad)
		require.Error(t, err, bad)
	}
	h := &functionhost.Host{Functions: []functionhost.Function{{Name: "x", Schedule: "@every 1s"}}}
	require.ErrorIs(t, h.StartSchedules(), functionhost.ErrScheduling)
}
