package service_test

import (
	"encoding/json"
	"net"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/httpapi"
	"privateassistant/functions/service"
	"privateassistant/queue/redistest"
	"privateassistant/schema/appwritetest"
)

// healthOf serves GET /api/health of the system function built on cfg.
func healthOf(t *testing.T, cfg service.Config, log *syncLog) (int, map[string]any, string) {
	t.Helper()
	svc, err := service.New(cfg, httpapi.NewLogger(log, "info"))
	require.NoError(t, err)
	defer func() { require.NoError(t, svc.Close()) }()
	a, err := svc.API("system")
	require.NoError(t, err)
	w := httptest.NewRecorder()
	start := time.Now()
	a.ServeHTTP(w, httptest.NewRequest("GET", "/api/health", nil))
	require.Less(t, time.Since(start), service.HealthTimeout+2*time.Second, "a dead dependency is bounded by the check's timeout")
	var body map[string]any
	require.NoError(t, json.Unmarshal(w.Body.Bytes(), &body), w.Body.String())
	return w.Code, body, w.Body.String()
}

// syncLog collects log output (the service's long-poll hub may log from its goroutine).
type syncLog struct{ lines chan string }

func (l *syncLog) Write(p []byte) (int, error) {
	select {
	case l.lines <- string(p):
	default:
	}
	return len(p), nil
}

func (l *syncLog) all() string {
	var b strings.Builder
	for {
		select {
		case s := <-l.lines:
			b.WriteString(s)
		default:
			return b.String()
		}
	}
}

// TestHealthChecksRedisAndAppwrite: /api/health answers 200 with each dependency's status
// when both answer, and 503 naming the one that is down otherwise — Redis stopped, the
// Appwrite endpoint unreachable — with status words only (no address), the cause in the log.
func TestHealthChecksRedisAndAppwrite(t *testing.T) {
	t.Parallel()
	ts := appwritetest.NewTestServer(t, appwritetest.Options{})
	rs := redistest.Start(t)
	cfg := service.Config{Endpoint: ts.URL, ProjectID: ts.Project, RedisAddr: rs.Addr, LongPollMax: 25 * time.Second,
		JWTCacheTTL: time.Second, AdmitRate: 30, AdmitWindow: time.Minute, HeartbeatStale: 30 * time.Second}

	log := &syncLog{lines: make(chan string, 1000)}
	status, body, _ := healthOf(t, cfg, log)
	require.Equal(t, 200, status, body)
	require.Equal(t, true, body["ok"])
	require.Equal(t, map[string]any{"redis": "ok", "appwrite": "ok"}, body["checks"])

	// Appwrite unreachable: a port nothing listens on.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	deadPort := strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
	require.NoError(t, l.Close())
	down := cfg
	down.Endpoint = "http://127.0.0.1:" + deadPort + "/v1"
	status, body, raw := healthOf(t, down, log)
	require.Equal(t, 503, status, raw)
	e := body["error"].(map[string]any)
	require.Equal(t, "unhealthy", e["code"])
	require.Equal(t, "appwrite unavailable", e["message"])
	require.Equal(t, map[string]any{"redis": "ok", "appwrite": "down"}, e["checks"])
	require.NotContains(t, raw, deadPort)
	require.NotContains(t, raw, "127.0.0.1")
	require.Contains(t, log.all(), `"dependency":"appwrite"`)

	// Redis stopped.
	rs.Stop()
	status, body, raw = healthOf(t, cfg, log)
	require.Equal(t, 503, status, raw)
	e = body["error"].(map[string]any)
	require.Equal(t, "redis unavailable", e["message"])
	require.Equal(t, map[string]any{"redis": "down", "appwrite": "ok"}, e["checks"])
	require.NotContains(t, raw, rs.Addr)
	require.NotContains(t, raw, "127.0.0.1")
	require.Contains(t, log.all(), `"dependency":"redis"`)

	// Both down.
	status, body, _ = healthOf(t, down, log)
	require.Equal(t, 503, status)
	require.Equal(t, "redis and appwrite unavailable", body["error"].(map[string]any)["message"])
}
