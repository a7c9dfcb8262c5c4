package ops_test

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"privateassistant/ops"
	"privateassistant/queue/redistest"
	"privateassistant/readiness"
)

func get(t *testing.T, url, user, pass string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestServerReadinessAuthAndStop: /readyz reports each check, asynqmon is behind basic
// auth, and stopping the listener leaves the agent's Redis client open (asynqmon's Close
// used to close the client it was handed, i.e. the agent's own).
func TestServerReadinessAuthAndStop(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	rdb := rs.Client()
	defer rdb.Close()
	s := &ops.Server{Addr: "127.0.0.1:0", User: "admin", Password: "ops-password-0123456789", Registry: prometheus.NewRegistry(), RDB: rdb,
		Checks: map[string]readiness.Probe{
			"redis":  {Kind: readiness.KindRedis, Check: func(ctx context.Context) error { return rdb.Ping(ctx).Err() }},
			"broken": {Kind: readiness.KindGateway, Check: func(context.Context) error { return errors.New("down") }},
		}}
	s.Stop() // safe before Start
	require.NoError(t, s.Start(context.Background()))
	base := "http://" + s.Bound()

	code, body := get(t, base+"/healthz", "", "")
	require.Equal(t, 200, code)
	code, body = get(t, base+"/readyz", "", "")
	require.Equal(t, 503, code)
	var ready struct {
		Ready  bool
		Checks map[string]string
	}
	require.NoError(t, json.Unmarshal([]byte(body), &ready))
	require.Equal(t, map[string]string{"redis": "ok", "broken": "error: down"}, ready.Checks)

	code, _ = get(t, base+"/asynqmon/", "", "")
	require.Equal(t, 401, code)
	code, _ = get(t, base+"/asynqmon/api/queues", "admin", "ops-password-0123456789")
	require.Equal(t, 200, code)
	code, _ = get(t, base+"/metrics", "", "")
	require.Equal(t, 200, code)

	s.Stop()
	s.Stop() // idempotent
	_, err := http.Get(base + "/healthz")
	require.Error(t, err, "the listener is closed")
	require.NoError(t, rdb.Ping(context.Background()).Err(), "the agent's Redis client is still open")
}

// TestHTTPServerStopWaitsForRequestsUpToTheBound: Stop lets a request in flight finish,
// cuts one that outlives ShutdownTimeout, and returns only when Serve has returned
// (goleak in TestMain checks nothing is left).
func TestHTTPServerStopWaitsForRequestsUpToTheBound(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name     string
		handler  time.Duration
		bound    time.Duration
		finished bool
	}{
		{"finishes within the bound", 200 * time.Millisecond, 5 * time.Second, true},
		{"cut at the bound", 10 * time.Second, 200 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			entered := make(chan struct{})
			var done atomic.Bool
			h := &ops.HTTPServer{Addr: "127.0.0.1:0", ShutdownTimeout: tc.bound, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				close(entered)
				select {
				case <-time.After(tc.handler):
					done.Store(true)
					_, _ = w.Write([]byte("done"))
				case <-r.Context().Done():
				}
			})}
			require.NoError(t, h.Start(context.Background()))
			res := make(chan error, 1)
			go func() {
				resp, err := http.Get("http://" + h.Bound() + "/")
				if err == nil {
					_, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				res <- err
			}()
			<-entered
			start := time.Now()
			h.Stop()
			took := time.Since(start)
			require.Equal(t, tc.finished, done.Load())
			err := <-res
			if tc.finished {
				require.NoError(t, err)
			} else {
				require.Error(t, err, "the request was cut")
				require.Less(t, took, tc.handler, "Stop did not wait for the whole request")
			}
		})
	}
}

// TestMetricsReportRedisMemory: /metrics carries the dedicated Redis's used_memory and
// maxmemory (the figures the maxmemory sizing is checked against), and the value follows
// what Redis itself reports.
func TestMetricsReportRedisMemory(t *testing.T) {
	t.Parallel()
	rs := redistest.Start(t)
	rdb := rs.Client()
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(t, rdb.ConfigSet(ctx, "maxmemory", "268435456").Err())
	s := &ops.Server{Addr: "127.0.0.1:0", Registry: prometheus.NewRegistry(), RDB: rdb}
	require.NoError(t, s.Start(ctx))
	defer s.Stop()

	gauge := func(body, name string) float64 {
		for _, line := range strings.Split(body, "\n") {
			if v, ok := strings.CutPrefix(line, name+" "); ok {
				f, err := strconv.ParseFloat(v, 64)
				require.NoError(t, err)
				return f
			}
		}
		t.Fatalf("%s not in /metrics", name)
		return 0
	}
	code, body := get(t, "http://"+s.Bound()+"/metrics", "", "")
	require.Equal(t, 200, code)
	before := gauge(body, "pa_redis_used_memory_bytes")
	require.Positive(t, before)
	require.Equal(t, float64(268435456), gauge(body, "pa_redis_maxmemory_bytes"))
	info, err := ops.ReadRedisMemory(ctx, rdb)
	require.NoError(t, err)
	require.InDelta(t, float64(info.Used), before, float64(info.Used)/5)

	require.NoError(t, rdb.Set(ctx, "big", strings.Repeat("x", 4<<20), 0).Err())
	_, body = get(t, "http://"+s.Bound()+"/metrics", "", "")
	require.Greater(t, gauge(body, "pa_redis_used_memory_bytes"), before+float64(3<<20), "a 4 MiB value shows")
}
