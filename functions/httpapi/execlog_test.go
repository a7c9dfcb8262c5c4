package httpapi_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/open-runtimes/types-for-go/v4/openruntimes"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/httpapi"
	"privateassistant/functions/runtimehttp"
)

// Served for an Appwrite execution (runtimehttp.Serve), DefaultLogger writes the request's
// line to the execution's own log through the runtime Context (types-for-go's Logger on its
// two files, as the Go runtime opens /mnt/logs/<id>_logs.log and _errors.log): info lines
// to the log, a 5xx line to the errors, nothing on stderr (which the runtime's
// RevertNativeLogs would lose). Not parallel: it swaps os.Stderr.
func TestRequestLinesGoToTheExecutionLog(t *testing.T) {
	dir := t.TempDir()
	open := func(name string) *os.File {
		f, err := os.Create(filepath.Join(dir, name))
		require.NoError(t, err)
		t.Cleanup(func() { _ = f.Close() })
		return f
	}
	stderr := open("stderr")
	saved := os.Stderr
	os.Stderr = stderr
	t.Cleanup(func() { os.Stderr = saved })

	a := httpapi.New(&httpapi.Authenticator{Endpoint: "http://127.0.0.1:1", Project: "p", HTTP: http.DefaultClient}, nil, httpapi.DefaultLogger())
	a.Handle("GET /api/system/ping", httpapi.Route{Public: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		httpapi.WriteJSON(w, 200, map[string]any{"ok": true})
		return nil
	})
	a.Handle("GET /api/system/broken", httpapi.Route{Public: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		return errors.New("the cause")
	})
	logs, errs := open("exec_logs.log"), open("exec_errors.log")
	for _, path := range []string{"/api/system/ping", "/api/system/broken"} {
		c := openruntimes.NewContext(openruntimes.Logger{Enabled: true, Id: "exec1", StreamLogs: logs, StreamErrors: errs})
		c.Req = openruntimes.ContextRequest{Method: "GET", Path: path, Headers: map[string]string{"x-appwrite-execution-id": "exec-" + filepath.Base(path)}}
		runtimehttp.Serve(&c, a, runtimehttp.ExecutionBudget)
	}
	line := func(f *os.File) map[string]any {
		b, err := os.ReadFile(f.Name())
		require.NoError(t, err)
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		require.Len(t, lines, 1, "%s", b)
		var m map[string]any
		require.NoError(t, json.Unmarshal([]byte(lines[0]), &m), lines[0])
		return m
	}
	ok, broken := line(logs), line(errs)
	require.Equal(t, "request", ok["msg"])
	require.Equal(t, "INFO", ok["level"])
	require.Equal(t, "exec-ping", ok["requestId"])
	require.Equal(t, float64(200), ok["status"])
	require.Equal(t, "ERROR", broken["level"])
	require.Equal(t, "exec-broken", broken["requestId"])
	require.Equal(t, "the cause", broken["err"])
	out, err := os.ReadFile(stderr.Name())
	require.NoError(t, err)
	require.Empty(t, string(out), "nothing on stderr")

	// A request not served for an execution still logs to stderr.
	req, _ := http.NewRequest("GET", "/api/system/ping", nil)
	a.ServeHTTP(discard{}, req)
	out, err = os.ReadFile(stderr.Name())
	require.NoError(t, err)
	require.Contains(t, string(out), `"msg":"request"`)
}

type discard struct{}

func (discard) Header() http.Header         { return http.Header{} }
func (discard) Write(b []byte) (int, error) { return len(b), nil }
func (discard) WriteHeader(int)             {}
