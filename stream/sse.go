package stream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"privateassistant/functions/httpapi"
)

// sse writes one text/event-stream response. Messages are gathered in buf and written
// with flush, under a write deadline: a client that stops reading fails the write within
// WriteTimeout instead of holding the handler (and its follower) forever.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
	buf     bytes.Buffer
	m       *Metrics
}

func (s *Service) startSSE(w http.ResponseWriter) (*sse, error) {
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no") // nginx: never buffer this response
	w.WriteHeader(http.StatusOK)
	e := &sse{w: w, rc: http.NewResponseController(w), timeout: s.cfg.WriteTimeout, m: s.metrics}
	return e, e.flush()
}

// event adds one message. data is one JSON value (written on one data line: JSON with a
// line break in it is compacted first).
func (e *sse) event(id int64, name string, data []byte) {
	if id >= 0 {
		e.buf.WriteString("id: ")
		e.buf.WriteString(strconv.FormatInt(id, 10))
		e.buf.WriteByte('\n')
	}
	if name != "" {
		e.buf.WriteString("event: ")
		e.buf.WriteString(name)
		e.buf.WriteByte('\n')
	}
	if bytes.ContainsAny(data, "\r\n") {
		var c bytes.Buffer
		if json.Compact(&c, data) == nil {
			data = c.Bytes()
		}
	}
	e.buf.WriteString("data: ")
	e.buf.Write(data)
	e.buf.WriteString("\n\n")
	if name == "" {
		e.m.Events.Inc()
	}
}

func (e *sse) heartbeat() {
	e.buf.WriteString(": hb\n\n")
	e.m.Heartbeats.Inc()
}

// fail ends the stream with the error's envelope as an "error" event.
func (e *sse) fail(err error) {
	he := httpapi.FromError(err)
	if he == nil {
		he = httpapi.Errorf(500, "internal", "internal error")
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": he.Code, "message": he.Message}})
	e.event(-1, "error", b)
	_ = e.flush()
}

// maxBuffered bounds what a stream gathers before it writes: a large batch goes out in
// pieces, each under the write deadline.
const maxBuffered = 64 << 10

// errClient: a write to the client failed (gone, or stalled past the write deadline).
var errClient = errors.New("stream: client write failed")

// flushFull writes when maxBuffered is reached.
func (e *sse) flushFull() error {
	if e.buf.Len() < maxBuffered {
		return nil
	}
	if err := e.flush(); err != nil {
		return fmt.Errorf("%w: %v", errClient, err)
	}
	return nil
}

// flush writes what was gathered and pushes it to the client.
func (e *sse) flush() error {
	if err := e.rc.SetWriteDeadline(time.Now().Add(e.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if e.buf.Len() > 0 {
		if _, err := e.w.Write(e.buf.Bytes()); err != nil {
			return err
		}
		e.buf.Reset()
	}
	if err := e.rc.Flush(); err != nil {
		return err
	}
	// No deadline between writes: the stream may be idle up to a heartbeat.
	if err := e.rc.SetWriteDeadline(time.Time{}); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	return nil
}
