package hermes

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// Event is one frame of a /v1/runs stream: data: {"event": ..., "run_id": ...,
// "timestamp": ..., ...}. Fields vary by type, so they are kept raw with accessors.
type Event struct {
	Type      string
	RunID     string
	Timestamp float64
	Fields    map[string]json.RawMessage
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

// Stream reads SSE frames.
type Stream struct {
	body   io.ReadCloser
	r      *bufio.Reader
	closed bool
}

// NewStream wraps an SSE body.
func NewStream(body io.ReadCloser) *Stream {
	return &Stream{body: body, r: bufio.NewReaderSize(body, 64<<10)}
}

// Close ends the stream.
func (s *Stream) Close() error { return s.body.Close() }

const maxFrame = 4 << 20

// Next returns the next event. Comments (": keepalive") are skipped; ": stream closed"
// makes the following EOF ErrStreamClosed. A malformed frame returns an error wrapping
// ErrMalformed, and the stream can continue with the next frame.
func (s *Stream) Next() (Event, error) {
	var data strings.Builder
	for {
		line, err := s.r.ReadString('\n')
		if len(line) > maxFrame || data.Len() > maxFrame {
			return Event{}, fmt.Errorf("%w: frame larger than %d bytes", ErrMalformed, maxFrame)
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				if s.closed {
					return Event{}, ErrStreamClosed
				}
				return Event{}, io.ErrUnexpectedEOF
			}
			return Event{}, err
		}
		line = strings.TrimRight(line, "\r\n")
		switch {
		case line == "":
			if data.Len() == 0 {
				continue
			}
			return parseFrame(data.String())
		case strings.HasPrefix(line, ":"):
			if strings.TrimSpace(line[1:]) == "stream closed" {
				s.closed = true
			}
		case strings.HasPrefix(line, "data:"):
			v := strings.TrimPrefix(line[5:], " ")
			if data.Len() > 0 {
				data.WriteByte('\n')
			}
			data.WriteString(v)
		default:
			// event:, id:, retry: and unknown fields are not part of the runs stream.
		}
	}
}

func parseFrame(data string) (Event, error) {
	var fields map[string]json.RawMessage
	if err := json.Unmarshal([]byte(data), &fields); err != nil {
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	}
	var ev Event
	if err := json.Unmarshal(fields["event"], &ev.Type); err != nil || ev.Type == "" {
		return Event{}, fmt.Errorf("%w: no event name", ErrMalformed)
	}
	_ = json.Unmarshal(fields["run_id"], &ev.RunID)
	_ = json.Unmarshal(fields["timestamp"], &ev.Timestamp)
	ev.Fields = fields
	return ev, nil
}
