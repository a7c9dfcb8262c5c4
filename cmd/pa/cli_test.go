package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// request is what the fake API saw.
type request struct {
	Method string
	URI    string // as sent, escapes intact
	Body   map[string]any
}

// fakeAPI is a loopback API that records requests and answers like the functions do.
type fakeAPI struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []request
}

func newFakeAPI(t *testing.T) *fakeAPI {
	f := &fakeAPI{}
	f.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req := request{Method: r.Method, URI: r.RequestURI}
		b, _ := io.ReadAll(r.Body)
		_ = json.Unmarshal(b, &req.Body)
		f.mu.Lock()
		f.seen = append(f.seen, req)
		f.mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case strings.Contains(r.URL.Path, "missing"):
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"run not found"}}`))
		case strings.HasPrefix(r.URL.Path, "/stream/") && strings.HasSuffix(r.URL.Path, "/events"):
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("id: 1\ndata: {\"sequence\":1,\"type\":\"message.delta\",\"data\":{\"text\":\"hi\"}}\n\nevent: end\ndata: {\"status\":\"completed\"}\n\n"))
		case strings.HasSuffix(r.URL.Path, "/events"):
			_, _ = w.Write([]byte(`{"events":[{"sequence":1,"type":"message.delta","data":{"text":"hi"}}],"status":"completed","terminal":true}`))
		case r.URL.Path == "/api/roles":
			_, _ = w.Write([]byte(`{"roles":[{"name":"chat","tools":[]},{"name":"coding","tools":["file"]},{"name":"research","tools":["web"]}]}`))
		case r.Method == "POST" && strings.HasSuffix(r.URL.Path, "/messages"):
			_, _ = w.Write([]byte(admitted))
		case r.URL.Path == "/api/settings":
			_, _ = w.Write([]byte(`{"revision":3}`))
		case req.Body["preview"] == true:
			_, _ = w.Write([]byte(`{"plan":{"basedOnRevision":1}}`))
		default:
			_, _ = w.Write([]byte(`{"ok":true}`))
		}
	}))
	t.Cleanup(f.srv.Close)
	return f
}

const admitted = `{"messageId":"m1","runId":"r1","sequence":1,"status":"queued","role":"research"}`

func (f *fakeAPI) requests() []request {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]request(nil), f.seen...)
}

type result struct {
	code        int
	out, stderr string
}

// pa runs the CLI against f (nil: an API that must not be called) with a fixed token.
func pa(t *testing.T, f *fakeAPI, args ...string) result {
	t.Helper()
	var out, errw bytes.Buffer
	c := newCLI(strings.NewReader(""), &out, &errw)
	c.base = "http://127.0.0.1:1" // nothing listens: a call fails loudly
	if f != nil {
		c.base = f.srv.URL
	}
	c.token = func(context.Context) (string, error) { return "test-token", nil }
	code := c.exec(context.Background(), args)
	return result{code, out.String(), errw.String()}
}

// every lists each runnable command with its full name.
func every(prefix string, cmds []*command) map[string]*command {
	m := map[string]*command{}
	for _, c := range cmds {
		if c.sub != nil {
			for k, v := range every(join(prefix, c.name), c.sub) {
				m[k] = v
			}
			continue
		}
		m[join(prefix, c.name)] = c
	}
	return m
}

func TestEveryCommandHasHelp(t *testing.T) {
	cmds := every("", topCommands)
	require.Len(t, cmds, 43)
	for full, cmd := range cmds {
		args := append(strings.Fields(full), "-help")
		r := pa(t, nil, args...)
		require.Equal(t, 0, r.code, "%s: %s", full, r.stderr)
		require.Empty(t, r.stderr, full)
		require.True(t, strings.HasPrefix(r.out, "Usage: pa "+full+" [flags]"), "%s:\n%s", full, r.out)
		require.Contains(t, r.out, cmd.help, full)
		// Every flag of the command is documented in its help, and only its own.
		fs := flag.NewFlagSet(full, flag.ContinueOnError)
		cmd.setup(fs, newCLI(nil, io.Discard, io.Discard))
		fs.VisitAll(func(fl *flag.Flag) { require.Contains(t, r.out, "  -"+fl.Name, "%s -%s", full, fl.Name) })
		if fs.Lookup("yes") == nil {
			require.NotContains(t, r.out, "-yes", full)
		}

		// --help and pa help X say the same.
		require.Equal(t, r, pa(t, nil, append(strings.Fields(full), "--help")...), full)
		require.Equal(t, r, pa(t, nil, append([]string{"help"}, strings.Fields(full)...)...), full)
	}
}

func TestCommandLists(t *testing.T) {
	r := pa(t, nil, "help")
	require.Equal(t, 0, r.code)
	for _, c := range topCommands {
		require.Contains(t, r.out, "  "+c.name+" ", c.name)
	}
	require.Equal(t, r, pa(t, nil, "--help"))

	r = pa(t, nil)
	require.Equal(t, 2, r.code, "no command is a usage error")
	require.Contains(t, r.stderr, "Commands:")

	r = pa(t, nil, "admin", "-help")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.out, "Usage: pa admin <command>")
	for _, c := range adminCommands {
		require.Contains(t, r.out, "  "+c.name+" ", c.name)
	}
	r = pa(t, nil, "admin")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, "harnesses")

	r = pa(t, nil, "frobnicate")
	require.Equal(t, 2, r.code)
	require.Contains(t, r.stderr, `unknown command "frobnicate"`)
}

func TestFlagsAnywhereAndDoubleDash(t *testing.T) {
	f := newFakeAPI(t)
	r := pa(t, f, "send", "c1", "hello", "-role", "research", "--json")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, admitted+"\n", r.out, "-json prints the raw answer")
	r = pa(t, f, "send", "--role=coding", "c1", "--", "-starts with a dash")
	require.Equal(t, 0, r.code, r.stderr)
	require.Equal(t, "Sent (message m1). Run r1 (research) is queued.\nFollow it with: pa tail r1\n", r.out, "for people without -json")

	got := []request{}
	for _, q := range f.requests() {
		if q.Method == "POST" {
			got = append(got, q)
		}
	}
	require.Len(t, got, 2)
	require.Equal(t, "POST", got[0].Method)
	require.Equal(t, "/api/conversations/c1/messages", got[0].URI)
	require.Equal(t, "hello", got[0].Body["text"])
	require.Equal(t, "research", got[0].Body["role"])
	require.Equal(t, "-starts with a dash", got[1].Body["text"])
	require.Equal(t, "coding", got[1].Body["role"])
}

func TestBadInputIsAUsageErrorAndSendsNothing(t *testing.T) {
	f := newFakeAPI(t)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"runs", "-bogus"}, "flag provided but not defined: -bogus"},
		{[]string{"send", "c1"}, "missing arguments: want CONVERSATION TEXT"},
		{[]string{"cancel", "r1", "r2"}, "too many arguments"},
		{[]string{"tail", ".."}, `".." is not a valid run id`},
		{[]string{"send", "", "hi"}, `"" is not a valid conversation id`},
		{[]string{"approve", "r1", "q1", "maybe"}, "the choice must be once or deny"},
		{[]string{"runs", "-conversation"}, "flag needs an argument: -conversation"},
		{[]string{"admin", "validate", "p1", "two"}, "REVISION must be a positive integer"},
		{[]string{"admin", "route", "r1", "-alias", "a", "-device", "d", "-model", "m", "-context", "lots"}, `invalid value "lots" for flag -context`},
		{[]string{"admin", "route", "r1", "-alias", "a", "-device", "d", "-model", "m"}, "-context must be the measured context window"},
		{[]string{"admin", "harness", "h1", "-kind", "hermes"}, "-url is required"},
		{[]string{"admin", "harness", "h1", "-url", "http://h", "-kind", "other"}, "-kind must be hermes or direct"},
		{[]string{"admin", "select"}, "missing arguments"},
		{[]string{"admin", "select", "chat=bad"}, "bad role"},
		{[]string{"admin", "select", "chat=h@0:r@1"}, "bad role"},
		{[]string{"admin", "select", "chat=h@1:r@1", "chat=h@2:r@1"}, `role "chat" is named twice`},
	} {
		r := pa(t, f, tc.args...)
		require.Equal(t, 2, r.code, "%v: %s", tc.args, r.stderr)
		require.Contains(t, r.stderr, tc.want, tc.args)
		require.Empty(t, r.out, tc.args)
	}
	require.Empty(t, f.requests(), "a usage error sends nothing")
}

func TestIDsAreEscapedInPaths(t *testing.T) {
	f := newFakeAPI(t)
	for _, tc := range []struct {
		args []string
		uri  string
	}{
		{[]string{"cancel", "../conversations"}, "/api/runs/..%2Fconversations/cancel"},
		{[]string{"send", "a/b?c#d", "hi"}, "/api/conversations/a%2Fb%3Fc%23d/messages"},
		{[]string{"approve", "r 1", "q/1", "once", "-yes"}, "/api/runs/r%201/approval"},
		{[]string{"tail", "r?wait=0"}, "/stream/runs/r%3Fwait=0/events?after=0"},
		{[]string{"runs", "-conversation", "x&limit=1"}, "/api/runs?conversationId=x%26limit%3D1&limit=100"},
		{[]string{"admin", "validate", "p/1", "2"}, "/api/harnesses/p%2F1/validate?revision=2"},
	} {
		before := len(f.requests())
		r := pa(t, f, tc.args...)
		require.Equal(t, 0, r.code, "%v: %s", tc.args, r.stderr)
		got := f.requests()
		require.Len(t, got, before+1, tc.args)
		require.Equal(t, tc.uri, got[before].URI, tc.args)
	}
	// The request id travels in the body, as it is.
	require.Equal(t, "q/1", f.requests()[2].Body["requestId"])
}

func TestAnswersMapToExitCodes(t *testing.T) {
	f := newFakeAPI(t)
	r := pa(t, f, "cancel", "missing")
	require.Equal(t, 4, r.code)
	require.Contains(t, r.stderr, "not_found: run not found")
	r = pa(t, f, "tail", "r1")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.out, "hi")
	require.Contains(t, r.out, "run completed")
}

func TestMutationsPreviewThenCommitWithYes(t *testing.T) {
	f := newFakeAPI(t)
	r := pa(t, f, "admin", "select", "chat=direct@1:chat@2:", "research=hermes@1:work@1:write_file,read_file")
	require.Equal(t, 0, r.code, r.stderr)
	require.Contains(t, r.stderr, "commit with -yes")
	got := f.requests()
	require.Len(t, got, 2, "settings, then the preview only")
	require.Equal(t, "PUT", got[1].Method)
	require.Equal(t, true, got[1].Body["preview"])
	require.EqualValues(t, 3, got[1].Body["expectedRevision"])
	roles := got[1].Body["roles"].(map[string]any)
	require.Equal(t, []any{}, roles["chat"].(map[string]any)["tools"])
	require.Equal(t, []any{"write_file", "read_file"}, roles["research"].(map[string]any)["tools"])

	r = pa(t, f, "admin", "route", "chat", "-yes", "-alias", "chat", "-device", "arc", "-model", "m", "-context", "131072")
	require.Equal(t, 0, r.code, r.stderr)
	got = f.requests()[2:]
	require.Len(t, got, 2, "preview, then commit")
	require.Equal(t, false, got[1].Body["preview"])
	require.EqualValues(t, 1, got[1].Body["expectedRevision"], "committed against the revision the plan was based on")
	require.EqualValues(t, 131072, got[1].Body["input"].(map[string]any)["contextBudget"])
}

func TestParseInterspersed(t *testing.T) {
	for _, tc := range []struct {
		args []string
		pos  []string
		v    bool
		s    string
	}{
		{nil, nil, false, ""},
		{[]string{"a", "-v", "b"}, []string{"a", "b"}, true, ""},
		{[]string{"-s", "x", "a"}, []string{"a"}, false, "x"},
		{[]string{"a", "--", "-v", "--s"}, []string{"a", "-v", "--s"}, false, ""},
		{[]string{"a", "-s=y", "--", "--"}, []string{"a", "--"}, false, "y"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		v := fs.Bool("v", false, "")
		s := fs.String("s", "", "")
		pos, err := parseInterspersed(fs, tc.args)
		require.NoError(t, err, tc.args)
		require.Equal(t, tc.pos, pos, tc.args)
		require.Equal(t, tc.v, *v, tc.args)
		require.Equal(t, tc.s, *s, tc.args)
	}
}

func TestSendOffersOnlyAllowedRoles(t *testing.T) {
	f := newFakeAPI(t)
	r := pa(t, f, "send", "-role", "admin", "c1", "hi")
	require.Equal(t, 2, r.code, r.stderr)
	require.Contains(t, r.stderr, `you may not use the role "admin"; you may use: chat, coding, research`)
	got := f.requests()
	require.Len(t, got, 1, "only the roles were asked for; nothing was sent")
	require.Equal(t, "/api/roles", got[0].URI)

	r = pa(t, f, "send", "-role", "research", "c1", "hi")
	require.Equal(t, 0, r.code, r.stderr)
	got = f.requests()[1:]
	require.Len(t, got, 2)
	require.Equal(t, "research", got[1].Body["role"])

	r = pa(t, f, "roles")
	require.Equal(t, 0, r.code)
	require.Contains(t, r.out, "research")
}

func TestAdminMembersAndInvitations(t *testing.T) {
	f := newFakeAPI(t)
	t.Setenv("PA_PASSWORD", "password-new1")
	for _, args := range [][]string{{"admin", "member", "n@example.com"}, {"admin", "invite"}, {"admin", "admit", "u1"}, {"admin", "remove", "u1"}} {
		r := pa(t, f, args...)
		require.Equal(t, 0, r.code, r.stderr)
		require.Contains(t, r.stderr, "commit with -yes")
	}
	require.Empty(t, f.requests(), "nothing is sent without -yes")
	require.Equal(t, 0, pa(t, f, "admin", "member", "n@example.com", "-name", "N", "-yes").code)
	require.Equal(t, 0, pa(t, f, "admin", "invite", "-hours", "5", "-yes").code)
	require.Equal(t, 0, pa(t, f, "admin", "remove", "u1", "-yes").code)
	got := f.requests()
	require.Len(t, got, 3)
	require.Equal(t, request{Method: "POST", URI: "/api/members", Body: map[string]any{"email": "n@example.com", "password": "password-new1", "name": "N"}}, got[0])
	require.Equal(t, request{Method: "POST", URI: "/api/invitations", Body: map[string]any{"expiresInHours": float64(5)}}, got[1])
	require.Equal(t, request{Method: "PUT", URI: "/api/members/u1", Body: map[string]any{"member": false}}, got[2])
	require.Equal(t, 2, pa(t, f, "admin", "invite", "-hours", "0").code)
}
