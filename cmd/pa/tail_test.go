package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func sseFrame(seq int64, typ, text string) string {
	d, _ := json.Marshal(map[string]string{"text": text})
	e, _ := json.Marshal(tailEvent{Sequence: seq, Type: typ, Data: d})
	return fmt.Sprintf("id: %d\ndata: %s\n\n", seq, e)
}

// tailServer records each request's path, query and Last-Event-ID and answers with h.
type tailServer struct {
	mu   sync.Mutex
	seen []string
	srv  *httptest.Server
}

func newTailServer(t *testing.T, h func(n int, w http.ResponseWriter, r *http.Request)) *tailServer {
	ts := &tailServer{}
	ts.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ts.mu.Lock()
		ts.seen = append(ts.seen, r.URL.RequestURI()+" last="+r.Header.Get("Last-Event-ID")+" auth="+r.Header.Get("Authorization"))
		n := len(ts.seen)
		ts.mu.Unlock()
		h(n, w, r)
	}))
	t.Cleanup(ts.srv.Close)
	return ts
}

func (ts *tailServer) requests() []string {
	ts.mu.Lock()
	defer ts.mu.Unlock()
	return append([]string(nil), ts.seen...)
}

// write sends s in pieces of at most k bytes, each flushed on its own (frames split
// anywhere, as TCP may deliver them).
func writeSplit(w http.ResponseWriter, s string, k int) {
	for len(s) > 0 {
		n := min(k, len(s))
		_, _ = io.WriteString(w, s[:n])
		w.(http.Flusher).Flush()
		s = s[n:]
		time.Sleep(time.Millisecond)
	}
}

func tailCLI(base string) (*cli, *bytes.Buffer, *bytes.Buffer) {
	var out, errw bytes.Buffer
	c := newCLI(strings.NewReader(""), &out, &errw)
	c.base = base
	c.token = func(context.Context) (string, error) { return "tok", nil }
	c.tailTiming = tailTiming{pollWait: 2, emptyPause: 40 * time.Millisecond, busyEvery: 60 * time.Millisecond, streamRetry: 200 * time.Millisecond, idle: 2 * time.Second}
	return c, &out, &errw
}

func TestTailFollowsTheStreamAndResumesWithoutDuplicates(t *testing.T) {
	ts := newTailServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		require.True(t, strings.HasPrefix(r.URL.Path, "/stream/runs/r1/events"), r.URL.Path)
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		switch n {
		case 1:
			// Two events split into 3-byte pieces, a heartbeat, then the connection drops in
			// the middle of the third.
			third := sseFrame(3, "message.delta", "!")
			writeSplit(w, sseFrame(1, "message.delta", "Hel")+": hb\r\n\r\n"+sseFrame(2, "message.delta", "lo")+third[:15], 3)
		case 2:
			// The service replays from Last-Event-ID; an event already printed is not again.
			writeSplit(w, sseFrame(2, "message.delta", "lo")+sseFrame(3, "message.delta", "!")+sseFrame(4, "run.completed", "")+
				"event: end\ndata: {\"status\":\"completed\"}\n\n", 7)
		default:
			t.Errorf("request %d after the end", n)
		}
	})
	c, out, _ := tailCLI(ts.srv.URL)
	require.NoError(t, c.tail(context.Background(), "r1", false))
	require.Equal(t, "Hello!\nrun completed\n", out.String(), "each event once")
	require.Equal(t, []string{"/stream/runs/r1/events?after=0 last=0 auth=Bearer tok", "/stream/runs/r1/events?after=2 last=2 auth=Bearer tok"}, ts.requests())
}

func TestTailJSONPrintsEachEventOnceAndExitsOnAFailedRun(t *testing.T) {
	ts := newTailServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream; charset=utf-8")
		writeSplit(w, sseFrame(1, "message.delta", "a")+sseFrame(2, "run.failed", "")+"event: end\ndata: {\"status\":\"failed\"}\n\n", 5)
	})
	c, out, _ := tailCLI(ts.srv.URL)
	err := c.tail(context.Background(), "r1", true)
	var ee *exitErr
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitIncomplete, ee.code)
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 2)
	require.JSONEq(t, `{"sequence":1,"type":"message.delta","data":{"text":"a"}}`, lines[0])
}

func TestTailFallsBackToTheLongPollOnlyWhileTheStreamIsUnreachable(t *testing.T) {
	var mu sync.Mutex
	streamUp := false
	var polls []time.Time
	ts := newTailServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		up := streamUp
		mu.Unlock()
		switch {
		case strings.HasPrefix(r.URL.Path, "/stream/") && !up:
			http.Error(w, "404 page not found", 404) // no route: not the service's envelope
		case strings.HasPrefix(r.URL.Path, "/stream/"):
			w.Header().Set("Content-Type", "text/event-stream")
			writeSplit(w, sseFrame(1, "message.delta", "x")+sseFrame(2, "message.delta", "y")+"event: end\ndata: {\"status\":\"completed\"}\n\n", 64)
		default:
			require.Equal(t, "2", r.URL.Query().Get("wait"), "the fallback waits at most 2 s")
			mu.Lock()
			polls = append(polls, time.Now())
			if len(polls) == 4 {
				streamUp = true
			}
			first := len(polls) == 1
			mu.Unlock()
			w.Header().Set("Content-Type", "application/json")
			if first {
				_, _ = io.WriteString(w, `{"events":[{"sequence":1,"type":"message.delta","data":{"text":"x"}}],"next":1,"status":"running","terminal":false}`)
				return
			}
			_, _ = io.WriteString(w, `{"events":[],"next":1,"status":"running","terminal":false}`) // at once, empty
		}
	})
	c, out, _ := tailCLI(ts.srv.URL)
	require.NoError(t, c.tail(context.Background(), "r1", false))
	require.True(t, strings.HasPrefix(out.String(), "xy\nrun completed"), out.String())
	mu.Lock()
	defer mu.Unlock()
	require.GreaterOrEqual(t, polls[1].Sub(polls[0]), 60*time.Millisecond, "an answer with news: the next poll starts busyEvery after it")
	for i := 2; i < len(polls); i++ {
		require.GreaterOrEqual(t, polls[i].Sub(polls[i-1]), 40*time.Millisecond, "an empty answer is followed by a pause")
	}
	reqs := ts.requests()
	require.Contains(t, reqs[1], "/api/runs/r1/events?after=0&wait=2")
	require.Contains(t, reqs[2], "/api/runs/r1/events?after=1&wait=2")
	require.Contains(t, reqs[len(reqs)-1], "/stream/runs/r1/events?after=1 last=1", "back on the stream, from the last printed")
}

func TestTailStreamRefusals(t *testing.T) {
	// 401: one fresh token, then the service's 404 envelope is the run not found (no fallback).
	tokens := 0
	ts := newTailServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		if r.Header.Get("Authorization") == "Bearer old" {
			w.WriteHeader(401)
			_, _ = io.WriteString(w, `{"error":{"code":"unauthenticated","message":"expired"}}`)
			return
		}
		w.WriteHeader(404)
		_, _ = io.WriteString(w, `{"error":{"code":"not_found","message":"run not found"}}`)
	})
	c, _, _ := tailCLI(ts.srv.URL)
	c.token = func(context.Context) (string, error) {
		tokens++
		if tokens == 1 {
			return "old", nil
		}
		return "new", nil
	}
	dropped := 0
	c.dropToken = func() { dropped++ }
	err := c.tail(context.Background(), "r1", false)
	var ee *exitErr
	require.ErrorAs(t, err, &ee)
	require.Equal(t, exitNotFound, ee.code)
	require.Equal(t, 1, dropped)
	require.Len(t, ts.requests(), 2)
	for _, r := range ts.requests() {
		require.True(t, strings.HasPrefix(r, "/stream/"), r)
	}
}

func TestTailReconnectsASilentStream(t *testing.T) {
	ts := newTailServer(t, func(n int, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/event-stream")
		if n == 1 {
			writeSplit(w, sseFrame(1, "message.delta", "a"), 100)
			<-r.Context().Done() // silent: no heartbeat, the client gives up on it
			return
		}
		writeSplit(w, sseFrame(2, "message.delta", "b")+"event: end\ndata: {\"status\":\"completed\"}\n\n", 100)
	})
	c, out, _ := tailCLI(ts.srv.URL)
	c.tailTiming.idle = 150 * time.Millisecond
	require.NoError(t, c.tail(context.Background(), "r1", false))
	require.True(t, strings.HasPrefix(out.String(), "ab"), out.String())
	require.Contains(t, ts.requests()[1], "after=1 last=1")
}

func TestSSEScannerLineEndings(t *testing.T) {
	in := "data: a\r\ndata:b\r\rid: 7\revent: x\ndata\n\n: c\n\nid: 8\n\ndata: tail-without-end"
	s := newSSEScanner(strings.NewReader(in))
	m, err := s.next()
	require.NoError(t, err)
	require.Equal(t, sseMessage{event: "message", data: "a\nb"}, m)
	m, err = s.next()
	require.NoError(t, err)
	require.Equal(t, sseMessage{id: "7", event: "x", data: ""}, m)
	_, err = s.next()
	require.ErrorIs(t, err, io.EOF, "an unfinished message at the end is dropped")
	require.Equal(t, "8", s.lastID)
}
