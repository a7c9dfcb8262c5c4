package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// syncBuffer is an output a test reads while pa chat writes it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// chatSession is one pa chat run in the background: type into it, press Ctrl-C, read what
// it printed, wait for its exit code.
type chatSession struct {
	in   *io.PipeWriter
	out  *syncBuffer
	errw *syncBuffer
	ints chan struct{}
	done chan int
}

func startChat(t *testing.T, prepare func(c *cli), args ...string) *chatSession {
	pr, pw := io.Pipe()
	s := &chatSession{in: pw, out: &syncBuffer{}, errw: &syncBuffer{}, ints: make(chan struct{}, 1), done: make(chan int, 1)}
	c := newCLI(pr, s.out, s.errw)
	c.interrupts = s.ints
	if prepare != nil {
		prepare(c)
	}
	go func() { s.done <- c.exec(context.Background(), append([]string{"chat"}, args...)) }()
	t.Cleanup(func() { pw.Close() })
	return s
}

func (s *chatSession) typeLine(t *testing.T, line string) {
	_, err := io.WriteString(s.in, line+"\n")
	require.NoError(t, err)
}

// waitFor waits until the output holds want n times in all.
func (s *chatSession) waitFor(t *testing.T, want string, n int, within time.Duration) {
	t.Helper()
	for end := time.Now().Add(within); strings.Count(s.out.String(), want) < n; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("waiting for %q ×%d in:\n%s\nstderr: %s", want, n, s.out.String(), s.errw.String())
		}
	}
}

func (s *chatSession) exit(t *testing.T) int {
	t.Helper()
	select {
	case code := <-s.done:
		return code
	case <-time.After(20 * time.Second):
		t.Fatalf("pa chat did not end:\n%s", s.out.String())
		return -1
	}
}

// TestChatAgainstTheLocalStack: pa chat on the whole local stack (functions, agent with
// the Hermes double, Appwrite emulator, Redis, the stream service): a message that makes
// the assistant ask to run a command, answered y at the prompt; a long answer cancelled
// with Ctrl-C; the end of input ends the chat.
func TestChatAgainstTheLocalStack(t *testing.T) {
	env, _, polls := startStack(t)
	env.SignUp(t, "chat@example.com", "password-chat-1")
	t.Setenv("PA_PASSWORD", "password-chat-1")
	require.Equal(t, 0, run(context.Background(), []string{"login", "chat@example.com"}, strings.NewReader(""), io.Discard, io.Discard))

	s := startChat(t, nil, "-role", "coding", "please run #tool")
	s.waitFor(t, "Allow it? [y] once / [n] deny: ", 1, 30*time.Second)
	require.Contains(t, s.out.String(), "[approval needed] The assistant wants to run this command:\n    ls -la /tmp\n")
	require.NotContains(t, s.out.String(), "pa approve", "pa chat asks inline")
	s.typeLine(t, "maybe")
	s.waitFor(t, "Please answer y (allow once) or n (deny): ", 1, 5*time.Second)
	s.typeLine(t, "y")
	s.waitFor(t, "[approval: allowed once]", 1, 30*time.Second)
	s.waitFor(t, "[tool terminal done", 1, 30*time.Second)
	s.waitFor(t, "\n> ", 1, 30*time.Second) // the run completed: the next prompt

	s.typeLine(t, "tell a #long story")
	s.waitFor(t, "streaming tokens", 1, 30*time.Second)
	s.ints <- struct{}{} // Ctrl-C
	s.waitFor(t, "[cancelling the answer; Ctrl-C again quits]", 1, 5*time.Second)
	s.waitFor(t, "run cancelled", 1, 30*time.Second)
	s.waitFor(t, "\n> ", 2, 10*time.Second)
	require.NoError(t, s.in.Close()) // Ctrl-D
	require.Equal(t, 0, s.exit(t), s.errw.String())
	require.Empty(t, s.errw.String())
	t.Logf("pa chat printed:\n%s", s.out.String())

	// The server saw it the same way: one conversation, titled after the first message,
	// with a completed run that asked and was allowed, and a cancelled one.
	// (The run records settle just after the stream's end event: read until they did.)
	var out bytes.Buffer
	var runs struct {
		Runs []struct{ ID, Status, Role, ConversationID string }
	}
	require.Eventually(t, func() bool {
		out.Reset()
		require.Equal(t, 0, run(context.Background(), []string{"runs", "-json"}, strings.NewReader(""), &out, io.Discard))
		require.NoError(t, json.Unmarshal(out.Bytes(), &runs))
		require.Len(t, runs.Runs, 2)
		return runs.Runs[0].Status == "cancelled" && runs.Runs[1].Status == "completed" // newest first
	}, 10*time.Second, 50*time.Millisecond, "%s", &out)
	require.Equal(t, "coding", runs.Runs[0].Role)
	require.Equal(t, runs.Runs[0].ConversationID, runs.Runs[1].ConversationID)
	out.Reset()
	require.Equal(t, 0, run(context.Background(), []string{"conversations"}, strings.NewReader(""), &out, io.Discard))
	require.Contains(t, out.String(), runs.Runs[0].ConversationID+"  ")
	require.Contains(t, out.String(), "please run #tool")
	require.Zero(t, polls.Load(), "pa chat followed the runs over SSE, not the function long-poll")
}

// TestChatCtrlC: Ctrl-C cancels the run, a second quits (exit 6); at the prompt, Ctrl-C
// ends the chat (exit 0). The run's stream never ends here, so only Ctrl-C ends it.
func TestChatCtrlC(t *testing.T) {
	var cancels atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "GET" && r.URL.Path == "/api/conversations/c1":
			_, _ = w.Write([]byte(`{"id":"c1","title":"hello","lastActivityAt":"2026-12-07T05:00:00Z","createdAt":"2026-12-07T05:00:00Z"}`))
		case r.Method == "POST" && r.URL.Path == "/api/conversations/c1/messages":
			_, _ = w.Write([]byte(`{"messageId":"m1","runId":"r1","sequence":1,"status":"queued","role":"chat"}`))
		case r.Method == "POST" && r.URL.Path == "/api/runs/r1/cancel":
			cancels.Add(1)
			w.WriteHeader(202)
			_, _ = w.Write([]byte(`{"runId":"r1","status":"stopping","cancelRequested":true}`))
		case r.URL.Path == "/stream/runs/r1/events":
			w.Header().Set("Content-Type", "text/event-stream")
			_, _ = w.Write([]byte("data: {\"sequence\":1,\"type\":\"message.delta\",\"data\":{\"text\":\"thinking hard\"}}\n\n"))
			w.(http.Flusher).Flush()
			<-r.Context().Done() // the run goes on (its stop is slow)
		default:
			w.WriteHeader(404)
			_, _ = w.Write([]byte(`{"error":{"code":"not_found","message":"no such thing"}}`))
		}
	}))
	defer srv.Close()
	prepare := func(c *cli) {
		c.base = srv.URL
		c.token = func(context.Context) (string, error) { return "test-token", nil }
	}
	s := startChat(t, prepare, "-conversation", "c1", "hello")
	s.waitFor(t, "thinking hard", 1, 5*time.Second)
	s.ints <- struct{}{}
	s.waitFor(t, "Ctrl-C again quits", 1, 5*time.Second)
	require.Eventually(t, func() bool { return cancels.Load() == 1 }, 5*time.Second, 10*time.Millisecond)
	s.ints <- struct{}{}
	require.Equal(t, exitIncomplete, s.exit(t))
	require.Equal(t, "pa: quit; run r1 was asked to cancel\n", s.errw.String())
	require.Equal(t, int64(1), cancels.Load(), "the second Ctrl-C quits without another cancel")

	s = startChat(t, prepare, "-conversation", "c1")
	s.waitFor(t, "> ", 1, 5*time.Second)
	s.ints <- struct{}{}
	require.Equal(t, 0, s.exit(t))
	require.Equal(t, "Chatting in \"hello\" (c1). Ctrl-C cancels an answer; Ctrl-D ends the chat.\n> \n", s.out.String())
}
