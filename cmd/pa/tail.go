package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"strconv"
	"strings"
	"time"

	"privateassistant/internal/backoff"
)

// pa tail follows a run over the stream service (GET /stream/runs/{id}/events, Server-Sent
// Events, resumed with Last-Event-ID on every reconnect) and over the function long-poll
// only while the stream service is unreachable: no synchronous function execution waits
// for it (contracts/appwrite.md §9).

// tailTiming: the fallback's shape (like the web's sse.js) and the stream's idle limit.
type tailTiming struct {
	pollWait    int           // s, the fallback long-poll's wait (the functions cap theirs at 2 s)
	emptyPause  time.Duration // between fallback answers without news (an instant answer never spins)
	busyEvery   time.Duration // a fallback poll with news: the next starts this long after it
	streamRetry time.Duration // while falling back, the stream is tried again this often
	idle        time.Duration // no byte for this long (heartbeats come every 15 s): reconnect
}

var defaultTailTiming = tailTiming{pollWait: 2, emptyPause: 1500 * time.Millisecond, busyEvery: 2 * time.Second, streamRetry: 10 * time.Second, idle: 45 * time.Second}

type tailEvent struct {
	Sequence int64           `json:"sequence"`
	Type     string          `json:"type"`
	Data     json.RawMessage `json:"data"`
	At       string          `json:"at,omitempty"`
}

// tailer is one pa tail (or one run of pa chat): the last sequence printed and how to print.
type tailer struct {
	c      *cli
	run    string
	asJSON bool
	after  int64
	t      tailTiming
	// inChat: pa chat follows the run (approvals are asked inline, not with a hint to run
	// pa approve; a completed run says nothing more). onEvent, when set, sees each event
	// after it is printed.
	inChat  bool
	onEvent func(tailEvent)
	text    *wrapWriter // the answer's text, wrapped
	endNote string      // what the terminal event said (an error, a reason)
	reached bool        // the stream or the functions answered once
}

// errStreamDown: the stream service did not answer as itself (no answer, a proxy's
// 502/503/504, a 404 or 200 that is not the service's own).
var errStreamDown = errors.New("the stream service is unreachable")

// tail follows a run until it is terminal, printing each event once.
func (c *cli) tail(ctx context.Context, run string, asJSON bool) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Hour)
	defer cancel()
	return c.newTailer(run, asJSON).follow(ctx)
}

func (c *cli) newTailer(run string, asJSON bool) *tailer {
	t := &tailer{c: c, run: run, asJSON: asJSON, t: c.tailTiming, text: &wrapWriter{w: c.out, width: textWidth}}
	if t.t == (tailTiming{}) {
		t.t = defaultTailTiming
	}
	return t
}

func (t *tailer) follow(ctx context.Context) error {
	retry := backoff.Backoff{Min: 500 * time.Millisecond, Max: 10 * time.Second}
	var streamDownSince time.Time // zero: the stream is in use
	for {
		if streamDownSince.IsZero() || time.Since(streamDownSince) >= t.t.streamRetry {
			status, got, err := t.stream(ctx)
			switch {
			case err == nil && status != "":
				return t.finish(status)
			case errors.Is(err, errStreamDown):
				streamDownSince = time.Now()
			case err != nil:
				var ee *exitErr
				var gone noServer
				if errors.As(err, &ee) && ee.code != exitError || !t.reached && errors.As(err, &gone) {
					return err
				}
				if werr := retry.Wait(ctx); werr != nil {
					return fail(exitError, "gave up following run %s: %v (last error: %v)", t.run, werr, err)
				}
			default: // the stream ended without its end (a restart, a proxy timeout): reconnect
				streamDownSince = time.Time{}
				if got > 0 {
					retry.Reset()
				}
				if werr := retry.Wait(ctx); werr != nil {
					return fail(exitError, "gave up following run %s: %v", t.run, werr)
				}
			}
			continue
		}
		asked := time.Now()
		status, n, err := t.poll(ctx)
		var ee *exitErr
		var gone noServer
		switch {
		case errors.As(err, &ee) && ee.code != exitError:
			return err
		case !t.reached && errors.As(err, &gone):
			return err // nothing answered from the start: not a restart to wait out
		case err != nil:
			if werr := retry.Wait(ctx); werr != nil {
				return fail(exitError, "gave up following run %s: %v (last error: %v)", t.run, werr, err)
			}
			continue
		case status != "":
			return t.finish(status)
		}
		retry.Reset()
		// Each poll holds one of Appwrite's few function workers: never one right after another.
		pause := t.t.emptyPause
		if n > 0 {
			pause = t.t.busyEvery - time.Since(asked)
		}
		if err := backoff.Sleep(ctx, pause); err != nil {
			return fail(exitError, "gave up following run %s: %v", t.run, err)
		}
	}
}

// print writes one event (once: events at or before the last printed are skipped).
func (t *tailer) print(e tailEvent) {
	if e.Sequence <= t.after {
		return
	}
	if t.asJSON {
		line, _ := json.Marshal(e)
		fmt.Fprintln(t.c.out, string(line))
	} else {
		t.human(e)
	}
	t.after = e.Sequence
	if t.onEvent != nil {
		t.onEvent(e)
	}
}

func (t *tailer) finish(status string) error {
	if !t.asJSON {
		switch {
		case t.inChat && status == "completed":
			t.text.Note("")
		case t.endNote != "":
			t.text.Note(fmt.Sprintf("run %s: %s\n", status, wrap(t.endNote, textWidth, "  ")))
		default:
			t.text.Note("run " + status + "\n")
		}
	}
	if status != "completed" {
		return fail(exitIncomplete, "run %s", status)
	}
	return nil
}

// poll is one round of the function long-poll: the terminal status when the run ended.
func (t *tailer) poll(ctx context.Context) (string, int, error) {
	b, err := t.c.call(ctx, "GET", withQuery(apiPath("/api/runs/{}/events", t.run), "after", strconv.FormatInt(t.after, 10), "wait", strconv.Itoa(t.t.pollWait)), nil)
	if err != nil {
		return "", 0, err
	}
	t.reached = true
	var batch struct {
		Events   []tailEvent `json:"events"`
		Status   string      `json:"status"`
		Terminal bool        `json:"terminal"`
	}
	if err := json.Unmarshal(b, &batch); err != nil {
		return "", 0, fmt.Errorf("read events: %w", err)
	}
	for _, e := range batch.Events {
		t.print(e)
	}
	if batch.Terminal {
		return batch.Status, len(batch.Events), nil
	}
	return "", len(batch.Events), nil
}

// stream follows the run's event stream once: the terminal status when it said "end",
// "" when it ended without (reconnect), or an error (errStreamDown: fall back).
func (t *tailer) stream(ctx context.Context) (status string, got int, err error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	// No byte for t.idle (the service sends a heartbeat every 15 s): the connection is dead.
	idle := time.AfterFunc(t.t.idle, cancel)
	defer idle.Stop()
	resp, err := t.open(ctx, true)
	if err != nil {
		return "", 0, err
	}
	t.reached = true
	defer resp.Body.Close()
	sc := newSSEScanner(resp.Body)
	sc.touch = func() { idle.Reset(t.t.idle) }
	for {
		m, err := sc.next()
		if errors.Is(err, bufio.ErrTooLong) {
			return "", got, fmt.Errorf("read the run's events: a line over %d bytes", maxSSELine)
		}
		if err != nil {
			// The end of the response, a broken connection or the idle limit: reconnect
			// from the last printed sequence.
			return "", got, nil
		}
		switch m.event {
		case "end":
			var d struct{ Status string }
			if json.Unmarshal([]byte(m.data), &d) != nil || d.Status == "" {
				return "", got, fmt.Errorf("read the stream's end: %q", m.data)
			}
			return d.Status, got, nil
		case "error":
			var env struct {
				Error struct{ Code, Message string } `json:"error"`
			}
			_ = json.Unmarshal([]byte(m.data), &env)
			return "", got, fmt.Errorf("live events failed: %s: %s", env.Error.Code, env.Error.Message)
		case "message":
			var e tailEvent
			if err := json.Unmarshal([]byte(m.data), &e); err != nil {
				return "", got, fmt.Errorf("read event %s: %w", m.id, err)
			}
			t.print(e)
			got++
		}
	}
}

// open starts the stream from the last printed sequence. A 401 drops the kept JWT and
// opens once more with a fresh one.
func (t *tailer) open(ctx context.Context, mayRetry bool) (*http.Response, error) {
	tok, err := t.c.token(ctx)
	if err != nil {
		return nil, err
	}
	after := strconv.FormatInt(t.after, 10)
	path := withQuery(apiPath("/stream/runs/{}/events", t.run), "after", after)
	req, err := http.NewRequestWithContext(ctx, "GET", t.c.base+path, nil)
	if err != nil {
		return nil, fail(exitUsage, "PA_URL %q is not a URL: %v", t.c.base, err)
	}
	req.Header.Set("Authorization", "Bearer "+tok)
	req.Header.Set("Accept", "text/event-stream")
	req.Header.Set("Last-Event-ID", after)
	// The CLI's client has a whole-request timeout; a stream has none (the idle limit).
	hc := &http.Client{Transport: t.c.http.Transport, CheckRedirect: t.c.http.CheckRedirect, Jar: t.c.http.Jar}
	resp, err := hc.Do(req)
	if err != nil {
		if ctx.Err() != nil && ctx.Err() != context.DeadlineExceeded {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %v", errStreamDown, err)
	}
	ct, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode == 200 && ct == "text/event-stream" {
		return resp, nil
	}
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	resp.Body.Close()
	if resp.StatusCode == 401 && mayRetry && t.c.dropToken != nil {
		t.c.dropToken()
		return t.open(ctx, false)
	}
	switch {
	case resp.StatusCode == 502 || resp.StatusCode == 503 || resp.StatusCode == 504 || resp.StatusCode == 200:
		return nil, fmt.Errorf("%w: HTTP %d", errStreamDown, resp.StatusCode)
	case resp.StatusCode == 404 && !isEnvelope(b):
		return nil, fmt.Errorf("%w: HTTP 404 without the service's answer", errStreamDown)
	}
	_, err = t.c.answer("GET", path, resp.StatusCode, b)
	if err == nil {
		err = fmt.Errorf("GET %s: HTTP %d", path, resp.StatusCode)
	}
	return nil, err
}

func isEnvelope(b []byte) bool {
	var env struct {
		Error *struct{ Code string } `json:"error"`
	}
	return json.Unmarshal(b, &env) == nil && env.Error != nil && env.Error.Code != ""
}

// sseMessage is one Server-Sent Events message.
type sseMessage struct{ id, event, data string }

// sseScanner reads text/event-stream (the HTML standard's parsing: lines end in CRLF, LF
// or CR; data lines join with "\n"; ":" starts a comment; a blank line ends a message; a
// message without data is not dispatched).
type sseScanner struct {
	sc     *bufio.Scanner
	lastID string
	touch  func() // called for every line (a heartbeat comment included)
}

// maxSSELine bounds one line (an event's JSON): larger is an error, not unbounded memory.
const maxSSELine = 16 << 20

func newSSEScanner(r io.Reader) *sseScanner {
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), maxSSELine)
	sc.Split(splitSSELines)
	return &sseScanner{sc: sc}
}

// splitSSELines splits at CRLF, LF or CR; a CR at the end of the data read so far waits for
// the next byte (it may be a CRLF's first half).
func splitSSELines(data []byte, atEOF bool) (int, []byte, error) {
	if atEOF && len(data) == 0 {
		return 0, nil, nil
	}
	if i := bytes.IndexAny(data, "\r\n"); i >= 0 {
		if data[i] == '\n' {
			return i + 1, data[:i], nil
		}
		if i+1 < len(data) {
			if data[i+1] == '\n' {
				return i + 2, data[:i], nil
			}
			return i + 1, data[:i], nil
		}
		if atEOF {
			return i + 1, data[:i], nil
		}
		return 0, nil, nil
	}
	if atEOF {
		return len(data), data, nil
	}
	return 0, nil, nil
}

// next returns the next message; io.EOF when the stream ended (an unfinished message at
// the end is dropped, as a browser drops it).
func (s *sseScanner) next() (sseMessage, error) {
	var data strings.Builder
	hasData := false
	event := ""
	for s.sc.Scan() {
		if s.touch != nil {
			s.touch()
		}
		line := s.sc.Text()
		if line == "" {
			if hasData {
				if event == "" {
					event = "message"
				}
				return sseMessage{id: s.lastID, event: event, data: data.String()}, nil
			}
			event = ""
			continue
		}
		if line[0] == ':' {
			continue
		}
		field, value, _ := strings.Cut(line, ":")
		value = strings.TrimPrefix(value, " ")
		switch field {
		case "data":
			if hasData {
				data.WriteByte('\n')
			}
			data.WriteString(value)
			hasData = true
		case "event":
			event = value
		case "id":
			if !strings.Contains(value, "\x00") {
				s.lastID = value
			}
		}
	}
	if err := s.sc.Err(); err != nil {
		return sseMessage{}, err
	}
	return sseMessage{}, io.EOF
}
