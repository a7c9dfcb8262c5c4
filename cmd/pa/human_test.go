package main

import (
	"bytes"
	"context"
	"flag"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

var update = flag.Bool("update", false, "rewrite the golden files of the human output")

// fixtures are answers as the functions give them (field for field), by method and path.
var fixtures = map[string]string{
	"GET /api/conversations": `{"conversations":[{"id":"c2","title":"Trip to Lisbon: trains,\nhotels and a long title that goes on","lastActivityAt":"2026-12-06T18:04:05.123Z","createdAt":"2026-12-01T09:00:00Z"},` +
		`{"id":"c1","title":"hello","lastActivityAt":"2026-11-30T07:00:00Z","createdAt":"2026-11-30T07:00:00Z"}],"next":null}`,
	"POST /api/conversations":             `{"id":"c3","title":"from the cli","lastActivityAt":"2026-12-07T05:00:00Z","createdAt":"2026-12-07T05:00:00Z"}`,
	"POST /api/conversations/c1/messages": `{"messageId":"m9","runId":"r9","sequence":9,"status":"queued","role":"chat"}`,
	"GET /api/roles":                      `{"roles":[{"name":"chat","tools":[]},{"name":"research","tools":["write_file"]},{"name":"coding","tools":["terminal","write_file"]}]}`,
	"GET /api/runs":                       `{"runs":[{"id":"r9","conversationId":"c1","messageId":"m9","requestId":"q9","role":"coding","status":"waiting_for_resource","terminal":false,"phase":null,"progress":null,"queueReason":"gpu_busy","queuePosition":2,"cancelRequested":false,"queuedAt":"2026-12-07T05:01:00Z","startedAt":null,"finishedAt":null,"heartbeatAt":null,"elapsedMs":null,"lastSequence":1,"assistantMessageId":null,"error":null,"usage":null},{"id":"r8","conversationId":"c1","messageId":"m8","requestId":"q8","role":"chat","status":"failed","terminal":true,"phase":null,"progress":null,"queueReason":null,"queuePosition":null,"cancelRequested":false,"queuedAt":"2026-12-07T04:00:00Z","startedAt":"2026-12-07T04:00:01Z","finishedAt":"2026-12-07T04:00:09Z","heartbeatAt":null,"elapsedMs":8000,"lastSequence":7,"assistantMessageId":null,"error":"the model's server answered 503 three times in a row, then the run gave up","usage":null}],"next":null}`,
	"POST /api/runs/r9/cancel":            `{"runId":"r9","status":"stopping","cancelRequested":true}`,
	"POST /api/runs/r9/approval":          `{"runId":"r9","requestId":"q1","choice":"deny","accepted":true}`,
	"GET /api/harnesses": `{"harnesses":[{"profileId":"direct","revision":1,"kind":"direct","baseUrl":"http://127.0.0.1:8090/v1","profileName":null,"keyRef":null,"capabilities":null,"verified":true,"verifiedAt":"2026-12-01T00:00:00Z","hermesVersion":null,"hermesCommit":null,"validationRequestedAt":null,"createdBy":"admin"},` +
		`{"profileId":"hermes","revision":2,"kind":"hermes","baseUrl":"http://127.0.0.1:8642","profileName":"assistant","keyRef":"env:HERMES_KEY","capabilities":"{}","verified":false,"verifiedAt":null,"hermesVersion":"0.22.1","hermesCommit":null,"validationRequestedAt":null,"createdBy":"u1"}]}`,
	"GET /api/model-routes": `{"routes":[{"routeId":"chat","revision":1,"alias":"chat","device":"arc","backendModel":"qwen3-8b","contextBudget":32768,"maxOutput":4096,"localOnly":true,"enabled":true,"createdBy":"admin","qualification":"{\"passed\":true}"},` +
		`{"routeId":"work","revision":3,"alias":"work","device":"xtx","backendModel":"qwen3-32b","contextBudget":131072,"maxOutput":null,"localOnly":true,"enabled":true,"createdBy":"admin","qualification":null}]}`,
	"GET /api/audit":      `{"audit":[{"actorId":"u1","action":"selection.commit","target":"settings","fromRevision":1,"toRevision":2,"detail":null,"at":"2026-12-07T05:02:00Z"},{"actorId":"u1","action":"route.register","target":"work","fromRevision":null,"toRevision":3,"detail":null,"at":"2026-12-07T05:01:00Z"}],"next":null}`,
	"GET /api/settings":   `{"revision":2,"roles":{"research":{"harness":"hermes","harnessRevision":2,"route":"work","routeRevision":3,"tools":["write_file"]},"chat":{"harness":"direct","harnessRevision":1,"route":"chat","routeRevision":1,"tools":[]},"coding":{"harness":"hermes","harnessRevision":2,"route":"work","routeRevision":3}},"toolCeiling":["terminal","write_file"]}`,
	"GET /api/runs/empty": `{"runs":[],"next":null}`,
}

// runEvents is a run as the stream service sends it: text split mid-word, a tool that
// needs approval, a file, and a failed end.
var runEvents = []string{
	`{"sequence":1,"type":"run.queued","data":{"status":"queued"}}`,
	`{"sequence":2,"type":"run.status","data":{"status":"waiting_for_resource","phase":null,"queueReason":"gpu_busy","queuePosition":1}}`,
	`{"sequence":3,"type":"message.delta","data":{"text":"Let me look at the folder first; listing it shows what the project holds, and then I can wr"}}`,
	`{"sequence":4,"type":"message.delta","data":{"text":"ite the summary you asked for."}}`,
	`{"sequence":5,"type":"approval.request","data":{"requestId":"q1","command":"ls -la /tmp","description":"List the temporary folder","choices":["once","deny"]}}`,
	`{"sequence":6,"type":"approval.responded","data":{"requestId":"q1","choice":"once"}}`,
	`{"sequence":7,"type":"tool.started","data":{"tool":"terminal","preview":"ls -la /tmp"}}`,
	`{"sequence":8,"type":"tool.completed","data":{"tool":"terminal","durationSec":1.25,"error":false}}`,
	`{"sequence":9,"type":"artifact.created","data":{"artifactId":"a1","filename":"summary.md","mimeType":"text/markdown","size":2560,"checksum":"x"}}`,
	`{"sequence":10,"type":"message.delta","data":{"text":"Done."}}`,
	`{"sequence":11,"type":"run.failed","data":{"status":"failed","error":"the tool's output was too large"}}`,
}

func fixtureServer(t *testing.T) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/stream/") {
			w.Header().Set("Content-Type", "text/event-stream")
			for _, e := range runEvents {
				_, _ = w.Write([]byte("data: " + e + "\n\n"))
			}
			_, _ = w.Write([]byte("event: end\ndata: {\"status\":\"failed\"}\n\n"))
			return
		}
		key := r.Method + " " + r.URL.Path
		if r.URL.Query().Get("conversationId") == "none" {
			key = "GET /api/runs/empty"
		}
		body, ok := fixtures[key]
		if !ok {
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no such thing"}}`))
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv
}

func paAt(base string, args ...string) result {
	var out, errw bytes.Buffer
	c := newCLI(strings.NewReader(""), &out, &errw)
	c.base = base
	c.token = func(context.Context) (string, error) { return "test-token", nil }
	code := c.exec(context.Background(), args)
	return result{code, out.String(), errw.String()}
}

// golden compares got with testdata/human/NAME.golden (go test -run TestHumanOutput
// -update rewrites them; review the diff).
func golden(t *testing.T, name, got string) {
	t.Helper()
	p := filepath.Join("testdata", "human", name+".golden")
	if *update {
		require.NoError(t, os.MkdirAll(filepath.Dir(p), 0o755))
		require.NoError(t, os.WriteFile(p, []byte(got), 0o644))
	}
	want, err := os.ReadFile(p)
	require.NoError(t, err, "run with -update to create it")
	require.Equal(t, string(want), got, name)
}

func TestHumanOutput(t *testing.T) {
	srv := fixtureServer(t)
	for _, tc := range []struct {
		name    string
		args    []string
		fixture string // the answer -json must print unchanged ("" for none)
		code    int
	}{
		{"conversations", []string{"conversations"}, "GET /api/conversations", 0},
		{"new", []string{"new", "from the cli"}, "POST /api/conversations", 0},
		{"send", []string{"send", "c1", "hello"}, "POST /api/conversations/c1/messages", 0},
		{"roles", []string{"roles"}, "GET /api/roles", 0},
		{"runs", []string{"runs"}, "GET /api/runs", 0},
		{"runs-empty", []string{"runs", "-conversation", "none"}, "GET /api/runs/empty", 0},
		{"cancel", []string{"cancel", "r9"}, "POST /api/runs/r9/cancel", 0},
		{"approve", []string{"approve", "-yes", "r9", "q1", "deny"}, "POST /api/runs/r9/approval", 0},
		{"tail", []string{"tail", "r9"}, "", exitIncomplete},
		{"admin-harnesses", []string{"admin", "harnesses"}, "GET /api/harnesses", 0},
		{"admin-routes", []string{"admin", "routes"}, "GET /api/model-routes", 0},
		{"admin-audit", []string{"admin", "audit"}, "GET /api/audit", 0},
		{"admin-settings", []string{"admin", "settings"}, "GET /api/settings", 0},
	} {
		r := paAt(srv.URL, tc.args...)
		require.Equal(t, tc.code, r.code, "%s: %s", tc.name, r.stderr)
		golden(t, tc.name, r.out)
		if tc.fixture != "" {
			// -json is the answer exactly as the server gave it (scripts rely on it).
			r = paAt(srv.URL, append(tc.args, "-json")...)
			require.Equal(t, 0, r.code, tc.name)
			require.Equal(t, fixtures[tc.fixture]+"\n", r.out, tc.name)
		}
	}
	// pa tail -json: one line per event, as sent.
	r := paAt(srv.URL, "tail", "-json", "r9")
	require.Equal(t, exitIncomplete, r.code)
	require.Equal(t, strings.Join(runEvents, "\n")+"\n", r.out)
}

func TestApproveNeedsYes(t *testing.T) {
	f := newFakeAPI(t)
	r := pa(t, f, "approve", "r1", "q1", "once")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "plan (commit with -yes): answer request q1 of run r1: allowed once\n", r.stderr)
	require.Empty(t, r.out)
	require.Empty(t, f.requests(), "nothing is answered without -yes")
	r = pa(t, f, "approve", "r1", "q1", "deny", "-yes")
	require.Equal(t, 0, r.code, r.stderr)
	require.Len(t, f.requests(), 1)
	require.Equal(t, map[string]any{"requestId": "q1", "choice": "deny"}, f.requests()[0].Body)
}

func TestPlainErrorsForNoServerAndAWrongPassword(t *testing.T) {
	// Nothing listens on the port of a closed server.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	for _, args := range [][]string{{"runs"}, {"tail", "r1"}, {"chat", "hello"}, {"approve", "-yes", "r1", "q1", "once"}} {
		r := paAt(gone.URL, args...)
		require.Equal(t, exitError, r.code, args)
		require.Equal(t, "pa: cannot reach the assistant at "+gone.URL+": is it running? (make dev)\n", r.stderr, args)
	}

	// Signing in: Appwrite unreachable, then a wrong password.
	t.Setenv("PA_CONFIG_DIR", t.TempDir())
	t.Setenv("PA_PASSWORD", "not-the-password")
	login := func(endpoint string) result {
		var out, errw bytes.Buffer
		c := newCLI(strings.NewReader(""), &out, &errw)
		c.endpoint = endpoint
		return result{c.exec(context.Background(), []string{"login", "me@example.com"}), out.String(), errw.String()}
	}
	r := login(gone.URL + "/v1")
	require.Equal(t, exitError, r.code)
	require.Equal(t, "pa: cannot reach the assistant at "+gone.URL+"/v1: is it running? (make dev)\n", r.stderr)
	// Signed in, but Appwrite (which mints the call's JWT) does not answer.
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "session"), []byte("secret"), 0o600))
	var out, errw bytes.Buffer
	c := newCLI(strings.NewReader(""), &out, &errw)
	c.dir, c.base, c.endpoint = dir, gone.URL, gone.URL+"/v1"
	require.Equal(t, exitError, c.exec(context.Background(), []string{"runs"}))
	require.Equal(t, "pa: cannot reach the assistant at "+gone.URL+"/v1: is it running? (make dev)\n", errw.String())

	aw := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(401)
		_, _ = w.Write([]byte(`{"message":"Invalid credentials. Please check the email and password.","code":401,"type":"user_invalid_credentials","version":"1.9.6"}`))
	}))
	defer aw.Close()
	r = login(aw.URL + "/v1")
	require.Equal(t, exitSignedOut, r.code)
	require.Equal(t, "pa: wrong email or password for me@example.com\n", r.stderr)
}

func TestWrap(t *testing.T) {
	require.Equal(t, "one two\n  three\n  four", wrap("one two three four", 10, "  "))
	require.Equal(t, "a\n  averyveryverylongword\n  b", wrap("a averyveryverylongword b", 10, "  "))
	require.Equal(t, "x\n\ny", wrap("x\n\ny", 10, ""))

	var b bytes.Buffer
	ww := &wrapWriter{w: &b, width: 10}
	for _, piece := range []string{"one two three four\n    code();", " end", " of a wo", "rd"} {
		ww.WriteString(piece)
	}
	require.Equal(t, "one two\nthree four\n    code();\nend of a\nword", b.String())
	// Shown at once: a word split between pieces is never held back.
	b.Reset()
	ww = &wrapWriter{w: &b, width: 10}
	ww.WriteString("stream")
	require.Equal(t, "stream", b.String())
	ww.WriteString("ing")
	require.Equal(t, "streaming", b.String(), "a split word goes on where its first part stands")
	ww.WriteString(" on")
	require.Equal(t, "streaming\non", b.String())
	// A note breaks the line; the text goes on after it without the space it broke at.
	ww.Note("[note]\n")
	ww.WriteString(" and on\n  indented")
	require.Equal(t, "streaming\non\n[note]\nand on\n  indented", b.String())
}
