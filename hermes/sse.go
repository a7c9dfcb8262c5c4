package hermes

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Event is one frame of a /v1/runs stream: data: {"event": ..., "run_id": ...,
// "timestamp": ..., ...}. Fields vary by type, so they are kept raw with accessors.
type Event struct {
	Type      string
	RunID     string
	Timestamp float64
	// Seq numbers the run's events from 0 (the "seq" field, or the frame's id: line);
	// -1 when the server sends neither (older servers, replay.truncated).
	Seq    int64
	Fields map[string]json.RawMessage
}

// String returns a string field ("" when absent or not a string).
func (e Event) String(k string) string {
	var s string
	_ = json.Unmarshal(e.Fields[k], &s)
	return s
}

// Bool returns a boolean field.
func (e Event) Bool(k string) bool {
	var b bool
	_ = json.Unmarshal(e.Fields[k], &b)
	return b
}

// Float returns a numeric field.
func (e Event) Float(k string) float64 {
	var f float64
	_ = json.Unmarshal(e.Fields[k], &f)
	return f
}

// Strings returns a string-array field.
func (e Event) Strings(k string) []string {
	var s []string
	_ = json.Unmarshal(e.Fields[k], &s)
	return s
}

// ErrStreamClosed is returned by Next after the server's ": stream closed" comment: the
// server ended the stream on purpose (after a terminal event). A plain EOF without it is
// a dropped stream. Neither is proof of completion: check the run's status.
var ErrStreamClosed = errors.New("hermes: stream closed by the server")

// ErrMalformed is a frame that is not a JSON object with an event name.
var ErrMalformed = errors.New("hermes: malformed event frame")

// Stream reads a run's SSE frames. A Stream from Client.Events resumes a dropped
// connection with Last-Event-ID (see Client.EventsAfter); one from NewStream reads the
// body it was given and nothing else. Close may be called from another goroutine to
// unblock Next.
type Stream struct {
	client *Client // nil: no resume
	runID  string
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	body      io.ReadCloser
	r         *bufio.Reader
	ended     bool // Close was called, or the stream ended for good
	closed    bool // ": stream closed" seen on the current connection
	resumable bool // the server numbers its events (": open" or an id: line seen)
	last      int64
	resumes   int
}

// NewStream wraps an SSE body (no resume).
func NewStream(body io.ReadCloser) *Stream {
	st := &Stream{last: -1}
	st.reset(body)
	return st
}

func (s *Stream) reset(body io.ReadCloser) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.ended {
		body.Close()
		return
	}
	s.body, s.r, s.closed = body, bufio.NewReaderSize(body, 64<<10), false
}

// Close ends the stream and frees the run for another Events call of the client.
func (s *Stream) Close() error {
	s.mu.Lock()
	s.ended = true
	body := s.body
	s.mu.Unlock()
	s.release()
	if body == nil {
		return nil
	}
	return body.Close()
}

func (s *Stream) release() {
	if s.cancel != nil {
		s.cancel()
	}
	if s.client != nil {
		s.client.release(s)
	}
}

// LastSeq is the seq of the last event Next returned (-1 before any, or when the server
// does not number events).
func (s *Stream) LastSeq() int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// Resumes is how many times the stream reconnected after a drop.
func (s *Stream) Resumes() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resumes
}

const maxFrame = 4 << 20

// Next returns the next event. Comments (": keepalive", ": open") are skipped;
// ": stream closed" makes the following EOF ErrStreamClosed. A malformed frame returns an
// error wrapping ErrMalformed, and the stream can continue with the next frame. A dropped
// connection is resumed after the last delivered seq when the stream came from a Client
// and the server numbers events; otherwise, or when resuming fails, Next returns
// io.ErrUnexpectedEOF (the run's status decides what happened).
func (s *Stream) Next() (Event, error) {
	for {
		s.mu.Lock()
		r := s.r
		s.mu.Unlock()
		if r == nil {
			return Event{}, io.ErrUnexpectedEOF
		}
		ev, err := s.next(r)
		if err == nil {
			if ev.Seq >= 0 {
				s.mu.Lock()
				s.last = ev.Seq
				s.mu.Unlock()
			}
			return ev, nil
		}
		if errors.Is(err, ErrMalformed) {
			return ev, err
		}
		if errors.Is(err, ErrStreamClosed) || !s.resume() {
			s.mu.Lock()
			ended := s.ended
			s.ended = true
			s.mu.Unlock()
			if !ended {
				s.release()
			}
			return Event{}, err
		}
	}
}

// resume reopens the stream after the last delivered seq; false when it cannot.
func (s *Stream) resume() bool {
	s.mu.Lock()
	ok := s.client != nil && s.resumable && !s.ended && s.ctx != nil && s.ctx.Err() == nil
	last := s.last
	old := s.body
	s.mu.Unlock()
	if !ok {
		return false
	}
	old.Close()
	attempts := s.client.ResumeAttempts
	if attempts == 0 {
		attempts = 3
	}
	bo := s.client.ResumeBackoff
	if bo.Min == 0 && bo.Max == 0 {
		bo.Min, bo.Max = 100*time.Millisecond, time.Second
	}
	for i := 0; i < attempts; i++ {
		if bo.Wait(s.ctx) != nil {
			return false
		}
		body, err := s.client.openEvents(s.ctx, s.runID, last)
		if errors.Is(err, ErrNotFound) || errors.Is(err, ErrUnauthorized) {
			return false // the run's buffer is gone (restart, TTL): no stream to resume
		}
		if err != nil {
			continue
		}
		s.reset(body)
		s.mu.Lock()
		s.resumes++
		ended := s.ended
		s.mu.Unlock()
		return !ended
	}
	return false
}

func (s *Stream) next(r *bufio.Reader) (Event, error) {
	var data strings.Builder
	id := int64(-1)
	for {
		line, err := r.ReadString('\n')
		if len(line) > maxFrame || data.Len() > maxFrame {
			return Event{}, fmt.Errorf("%w: frame larger than %d bytes", ErrMalformed, maxFrame)
		}
		if err != nil {
			s.mu.Lock()
			closed := s.closed
			s.mu.Unlock()
			if errors.Is(err, io.EOF) {
				if closed {
					return Event{}, ErrStreamClosed
				}
				return Event{}, io.ErrUnexpectedEOF
			}
			if closed {
				return Event{}, ErrStreamClosed
			}
			return Event{}, fmt.Errorf("%w: %v", io.ErrUnexpectedEOF, err)
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data.Len() == 0 {
				continue
			}
			ev, err := parseFrame(data.String())
			if err == nil && ev.Seq < 0 {
				ev.Seq = id
			}
			return ev, err
		case strings.HasPrefix(line, ":"):
			switch strings.TrimSpace(line[1:]) {
			case "stream closed":
				s.mu.Lock()
				s.closed = true
				s.mu.Unlock()
			case "open":
				s.mu.Lock()
				s.resumable = true
				s.mu.Unlock()
			}
		case strings.HasPrefix(line, "data:"):
			v := strings.TrimPrefix(line[5:], " ")
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(v)
		case strings.HasPrefix(line, "id:"):
			if n, err := strconv.ParseInt(strings.TrimSpace(line[3:]), 10, 64); err == nil {
				id = n
				s.mu.Lock()
				s.resumable = true
				s.mu.Unlock()
			}
		default:
			// event:, retry: and unknown fields are not part of the runs stream.
		}
	}
}

func parseFrame(data string) (Event, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &fields); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	ev := Event{Seq: -1}
	if raw, ok := fields["seq"]; ok {
		if json.Unmarshal(raw, &ev.Seq) != nil {
			ev.Seq = -1
		}
	}
	if err := json.Unmarshal(fields["event"], &ev.Type); err != nil || ev.Type == "" {
		return Event{}, fmt.Errorf("%w: no event name", ErrMalformed)
	}
	_ = json.Unmarshal(fields["run_id"], &ev.RunID)
	_ = json.Unmarshal(fields["timestamp"], &ev.Timestamp)
	ev.Fields = fields
	return ev, nil
}
