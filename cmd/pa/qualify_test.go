package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAdminGPUQualify: pa admin gpu qualify ROUTE posts the request; with -wait it polls
// the route's qualification, printing each change, until the verdict (a failed one exits
// non-zero naming the reasons); qualification ROUTE shows it; bad ids send nothing.
func TestAdminGPUQualify(t *testing.T) {
	f := newFakeAPI(t)
	r := pa(t, f, "admin", "gpu", "qualify", "work")
	require.Equal(t, 0, r.code, r.stderr)
	got := f.requests()
	require.Len(t, got, 1)
	require.Equal(t, "POST", got[0].Method)
	require.Equal(t, "/api/model-routes/work/qualify", got[0].URI)
	r = pa(t, f, "admin", "gpu", "qualification", "work")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "/api/model-routes/work/qualification", f.requests()[1].URI)
	for _, args := range [][]string{{"admin", "gpu", "qualify", ".."}, {"admin", "gpu", "bless", "work"}} {
		r := pa(t, f, args...)
		require.Equal(t, 2, r.code, "%v: %s", args, r.stderr)
	}
	require.Len(t, f.requests(), 2, "a usage error sends nothing")

	defer func(d time.Duration) { qualifyPoll = d }(qualifyPoll)
	qualifyPoll = 5 * time.Millisecond
	for _, verdict := range []string{"passed", "failed"} {
		var polls atomic.Int32
		states := []string{`{"request":{"state":"waiting","reason":"queued like a job: the device is held by run 0123abcd"}}`,
			`{"request":{"state":"running","reason":"qualifying m on xtx at 65536 tokens"}}`,
			`{"request":{"state":"` + verdict + `","reason":"the device overheated: 97.0 °C, above the limit of 95 °C"}}`}
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == "POST" {
				w.WriteHeader(202)
				_, _ = w.Write([]byte(`{"requestId":"q1","state":"queued"}`))
				return
			}
			n := min(int(polls.Add(1))-1, len(states)-1)
			_, _ = w.Write([]byte(states[n]))
		}))
		r := pa(t, &fakeAPI{srv: srv}, "admin", "gpu", "qualify", "-wait", "10s", "work")
		srv.Close()
		require.Contains(t, r.out, "waiting: queued like a job: the device is held by run 0123abcd\nrunning: qualifying m on xtx at 65536 tokens\n"+verdict)
		if verdict == "passed" {
			require.Equal(t, 0, r.code, r.stderr)
		} else {
			require.Equal(t, 1, r.code)
			require.Contains(t, r.stderr, "route work did not qualify: the device overheated")
		}
	}
}
