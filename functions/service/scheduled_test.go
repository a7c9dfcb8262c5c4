package service_test

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionhost"
	"privateassistant/functions/functionstest"
)

// TestScheduledReconcilerCollectsEvidence (issue 33 gap 1): an admin proposes a change and
// touches nothing more; the admin function's schedule (Appwrite runs it every minute as
// an asynchronous execution, trigger schedule) collects the candidate's evidence under the
// reconciler's lease. The function host runs it like Appwrite (one execution record,
// trigger schedule, no API worker held); reading the candidate collects nothing. POST /
// without the schedule's trigger, or with a caller's JWT, answers like an unknown route,
// and a second pass within PA_RECONCILE_GAP is skipped.
func TestScheduledReconcilerCollectsEvidence(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t)
	adminID, admin := env.SignUp(t, "sched-admin@example.com", "password-sched")
	env.Label(t, adminID, "member", "admin")

	work := map[string]any{"harness": "direct", "harnessRevision": 1, "route": "work", "routeRevision": 1, "tools": []string{}}
	res := env.Do(t, "PUT", "/api/harness-selection", admin, map[string]any{"propose": true, "expectedRevision": 1,
		"roles": map[string]any{"chat": work, "research": work, "coding": work}})
	require.Equal(t, 200, res.Status, string(res.Body))
	state := func() (string, string) {
		res := env.Do(t, "GET", "/api/releases/2", admin, nil)
		require.Equal(t, 200, res.Status, string(res.Body))
		var one struct {
			Release struct {
				State    string
				Evidence *struct{ Collector string }
			}
		}
		res.JSON(t, &one)
		c := ""
		if one.Release.Evidence != nil {
			c = one.Release.Evidence.Collector
		}
		return one.Release.State, c
	}
	st, _ := state()
	require.Equal(t, "collecting", st, "reading a candidate collects nothing")

	// The scheduler's clock is just before a whole minute: the schedule fires at once.
	base := time.Now()
	skew := base.Truncate(time.Minute).Add(time.Minute).Add(-500 * time.Millisecond).Sub(base)
	env.Functions.Now = func() time.Time { return time.Now().Add(skew) }
	require.NoError(t, env.Functions.StartSchedules())
	var collector string
	require.Eventually(t, func() bool { st, collector = state(); return st == "ready" }, 20*time.Second, 100*time.Millisecond)

	var sched []functionhost.Execution
	for _, e := range env.Functions.Stats(true).Recent {
		if e.Trigger == "schedule" {
			sched = append(sched, e)
		}
	}
	require.Len(t, sched, 1)
	require.Equal(t, "admin", sched[0].Function)
	require.Equal(t, 200, sched[0].Status)
	require.Equal(t, "schedule:"+sched[0].ID, collector, "the scheduled execution collected it")

	// The admin function's POST / is the schedule's only.
	api, err := env.Svc.API("admin")
	require.NoError(t, err)
	call := func(hdr ...string) *httptest.ResponseRecorder {
		req := httptest.NewRequest("POST", "/", nil)
		req.Header.Set("X-Appwrite-Key", functionstest.FunctionKey("admin"))
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		rr := httptest.NewRecorder()
		api.ServeHTTP(rr, req)
		return rr
	}
	for _, hdr := range [][]string{{"X-Appwrite-Trigger", "http"}, {}, {"X-Appwrite-Trigger", "schedule", "Authorization", "Bearer " + admin},
		{"X-Appwrite-Trigger", "schedule", "X-Appwrite-User-Id", adminID}} {
		rr := call(hdr...)
		require.Equal(t, http.StatusNotFound, rr.Code, "%v: %s", hdr, rr.Body)
		require.Contains(t, rr.Body.String(), `"route_not_found"`)
	}
	rr := call("X-Appwrite-Trigger", "schedule", "X-Appwrite-Execution-Id", "forged")
	require.Equal(t, 200, rr.Code, rr.Body.String())
	require.True(t, strings.Contains(rr.Body.String(), "skipped"), "a second pass within the gap is skipped: %s", rr.Body)
}
