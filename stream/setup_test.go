package stream_test

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
	"privateassistant/stream"
)

// streamKey is the stream service's emulator key: read scopes only.
const streamKey = "stream-key-0123456789"

type env struct {
	*functionstest.Env
	svc    *stream.Service
	reg    *prometheus.Registry
	stream *httptest.Server
	log    *logBuffer // the service's log, JSON lines
}

// logBuffer collects a service's log lines (written by its handlers' goroutines).
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// lines are the log's lines so far, decoded.
func (l *logBuffer) lines(t *testing.T) []map[string]any {
	t.Helper()
	l.mu.Lock()
	defer l.mu.Unlock()
	var out []map[string]any
	for _, line := range bytes.Split(bytes.TrimSpace(l.b.Bytes()), []byte("\n")) {
		if len(line) == 0 {
			continue
		}
		var m map[string]any
		require.NoError(t, json.Unmarshal(line, &m), "%s", line)
		out = append(out, m)
	}
	return out
}

// setup starts the functions (to admit runs and make records, as in production) and a
// stream service on the same emulator and Redis with its own read-only key.
func setup(t *testing.T, mutate ...func(*stream.Config)) *env {
	t.Helper()
	fe := functionstest.New(t, functionstest.Options{Keys: map[string][]string{streamKey: stream.Scopes}})
	cfg := stream.Config{Endpoint: fe.TS.URL, ProjectID: fe.TS.Project, DatabaseID: fe.Model.DatabaseID, APIKey: streamKey,
		RedisAddr: fe.Redis.Addr, JWTCacheTTL: 5 * time.Second, MemberLabel: "member", AdminLabel: "admin",
		Heartbeat: 15 * time.Second, WriteTimeout: 2 * time.Second, MaxPerUser: 16, Readers: 2}
	for _, m := range mutate {
		m(&cfg)
	}
	reg := prometheus.NewRegistry()
	lb := &logBuffer{}
	svc, err := stream.New(cfg, slog.New(slog.NewJSONHandler(lb, nil)), reg)
	require.NoError(t, err)
	require.NoError(t, svc.Start(context.Background()))
	hs := httptest.NewServer(svc)
	t.Cleanup(func() {
		svc.Stop()
		hs.Close()
	})
	return &env{Env: fe, svc: svc, reg: reg, stream: hs, log: lb}
}

// emit plays the executor: the run's Redis stream and hot state, and the durable copy.
func emit(t *testing.T, e *env, owner, runID string, seq int64, typ, status string) {
	t.Helper()
	ctx := context.Background()
	rdb := e.Redis.Client()
	defer rdb.Close()
	data, _ := json.Marshal(map[string]any{"n": seq, "status": status})
	ev := queue.Event{Sequence: seq, Type: typ, Data: data, At: time.Now().UTC()}
	_, err := schema.For[schema.Event](e.Store, schema.CollEvents).Create(ctx, schema.EventDocID(runID, seq), owner,
		&schema.Event{OwnerID: owner, RunID: runID, Sequence: seq, Type: typ, Data: schema.Ptr(string(data))})
	require.NoError(t, err)
	require.NoError(t, queue.AppendEvent(ctx, rdb, runID, ev))
	require.NoError(t, queue.SetRunState(ctx, rdb, runID, queue.RunState{Status: status, Terminal: schema.IsTerminal(schema.RunStatus(status)), HeartbeatAt: time.Now(), LastSequence: seq}))
	schematest.SetRunStatus(t, e.Store, runID, schema.RunStatus(status), map[string]any{"lastSequence": seq})
}

// admit sends a message through the functions and returns its run.
func admit(t *testing.T, e *env, jwt, req string) string {
	t.Helper()
	conv := e.Conversation(t, jwt)
	res := e.Do(t, "POST", "/api/conversations/"+conv+"/messages", jwt, map[string]any{"requestId": req, "text": "hello"})
	require.Equal(t, 202, res.Status, string(res.Body))
	var a struct{ RunID string }
	res.JSON(t, &a)
	return a.RunID
}

// msg is one SSE message (or a comment, with only Comment set).
type msg struct {
	ID, Event, Data, Comment string
}

// sseConn is an open event stream.
type sseConn struct {
	resp   *http.Response
	rd     *bufio.Reader
	cancel context.CancelFunc
}

// open starts a GET on the stream service; hdr are header name, value pairs.
func (e *env) open(t *testing.T, path string, hdr ...string) *sseConn {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	req, err := http.NewRequestWithContext(ctx, "GET", e.stream.URL+path, nil)
	require.NoError(t, err)
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	c := &sseConn{resp: resp, rd: bufio.NewReader(resp.Body), cancel: cancel}
	t.Cleanup(c.close)
	return c
}

func (c *sseConn) close() {
	c.cancel()
	_ = c.resp.Body.Close()
}

// body reads a non-stream answer whole.
func (c *sseConn) body(t *testing.T) []byte {
	t.Helper()
	b, err := io.ReadAll(c.resp.Body)
	require.NoError(t, err)
	return b
}

// next reads one message or comment; io.EOF when the server ended the stream.
func (c *sseConn) next() (msg, error) {
	var m msg
	seen := false
	for {
		line, err := c.rd.ReadString('\n')
		if err != nil {
			if err == io.EOF && seen {
				return m, io.ErrUnexpectedEOF
			}
			return m, err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if seen {
				return m, nil
			}
			continue
		}
		seen = true
		switch k, v, _ := strings.Cut(line, ": "); k {
		case "":
			m.Comment = v
		case "id":
			m.ID = v
		case "event":
			m.Event = v
		case "data":
			m.Data = v
		}
	}
}

func (c *sseConn) must(t *testing.T) msg {
	t.Helper()
	m, err := c.next()
	require.NoError(t, err)
	return m
}

// functionEvents is GET /api/runs/{id}/events?after=N as the runs function answers it:
// the events array's elements as bytes.
func functionEvents(t *testing.T, e *env, jwt, runID string, after int64) []json.RawMessage {
	t.Helper()
	res := e.Do(t, "GET", "/api/runs/"+runID+"/events?after="+strconv.FormatInt(after, 10)+"&wait=0", jwt, nil)
	require.Equal(t, 200, res.Status, string(res.Body))
	var b struct{ Events []json.RawMessage }
	res.JSON(t, &b)
	return b.Events
}

// envelope is an error answer without its request id (which differs per request).
func envelope(t *testing.T, b []byte) map[string]any {
	t.Helper()
	var v struct{ Error map[string]any }
	require.NoError(t, json.Unmarshal(b, &v), "%s", b)
	require.NotNil(t, v.Error, "%s", b)
	delete(v.Error, "requestId")
	return v.Error
}

// eventually polls cond until it holds or 5 s pass.
func eventually(t *testing.T, cond func() bool, what string) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting: %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
