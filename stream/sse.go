package stream

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"time"

	"privateassistant/functions/httpapi"
)

// sse writes one text/event-stream response. Messages are gathered in buf and written
// with flush, under a write deadline: a client that stops reading fails the write within
// WriteTimeout instead of holding the handler (and its follower) forever. A stream that
// took its connection over from net/http (takeOver) writes to conn itself.
type sse struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	conn    net.Conn
	raw     syscall.RawConn // a direct stream's socket (live.go): written without waiting
	armed   bool            // a write deadline is set on conn
	timeout time.Duration
	buf     bytes.Buffer
	m       *Metrics
}

// takeOver starts a text/event-stream response on a connection taken over from net/http
// (Hijack), for a stream that lives long: net/http's handler goroutine (its stack grown
// to 16 KiB by the request's verification and never shrunk, net/http's at-rest frames
// being over the quarter a stack must fall under), its background reader, its 4 KiB read
// and write buffers and the response's 2 KiB chunking buffer all go. With direct (and a
// socket the service can write without waiting: live.go) the stream then has no
// goroutine of its own while it waits: gone is nil, e.raw is set, and the service's
// ticker notices a client that left (live.go). Otherwise it costs one goroutine of its
// own (caller's) and a small one waiting on the connection to learn the client left (it
// calls left then; gone is closed once it returned). The response is HTTP/1.1 with
// "Connection: close" and no length: the body ends when the connection closes. ok false:
// the connection cannot be taken over (HTTP/2, HTTP/1.0): use startSSE.
func (s *Service) takeOver(w http.ResponseWriter, r *http.Request, left func(), direct bool) (e *sse, gone <-chan struct{}, ok bool) {
	if !r.ProtoAtLeast(1, 1) || r.ProtoMajor != 1 {
		return nil, nil, false
	}
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Accel-Buffering", "no")
	conn, rw, err := http.NewResponseController(w).Hijack()
	if err != nil {
		return nil, nil, false
	}
	// net/http's deadlines (the header's read deadline) stay on a taken connection.
	_ = conn.SetDeadline(time.Time{})
	e = &sse{conn: conn, timeout: s.cfg.WriteTimeout, m: s.metrics}
	e.buf.WriteString("HTTP/1.1 200 OK\r\n")
	h.Del("Content-Length")
	h.Del("Transfer-Encoding")
	h.Set("Connection", "close")
	h.Set("Date", time.Now().UTC().Format(http.TimeFormat))
	_ = h.Write(&e.buf)
	e.buf.WriteString("\r\n")
	// The client sends nothing more on a stream; whatever it sends is read and dropped
	// until it closes (or the stream closes the connection).
	_, _ = rw.Reader.Discard(rw.Reader.Buffered()) // neither buffer is kept
	if direct {
		if sc, ok := conn.(syscall.Conn); ok {
			if rc, err := sc.SyscallConn(); err == nil {
				e.raw = rc
				return e, nil, true
			}
		}
	}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		defer left()
		var b [1]byte
		for {
			if _, err := conn.Read(b[:]); err != nil {
				return
			}
		}
	}()
	return e, closed, true
}

// close ends a taken-over stream's connection (and so its reader).
func (e *sse) close() {
	if e.conn != nil {
		_ = e.conn.Close()
	}
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
	e.failEvent(err)
	_ = e.flush()
}

// failEvent adds the error's envelope as an "error" event.
func (e *sse) failEvent(err error) {
	he := httpapi.FromError(err)
	if he == nil {
		he = httpapi.Errorf(500, "internal", "internal error")
	}
	b, _ := json.Marshal(map[string]any{"error": map[string]any{"code": he.Code, "message": he.Message}})
	e.event(-1, "error", b)
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
	if e.conn != nil {
		return e.flushConn()
	}
	if err := e.rc.SetWriteDeadline(time.Now().Add(e.timeout)); err != nil && !errors.Is(err, http.ErrNotSupported) {
		return err
	}
	if e.buf.Len() > 0 {
		if _, err := e.w.Write(e.buf.Bytes()); err != nil {
			return err
		}
		e.release()
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

// flushConn writes what was gathered to a taken-over connection, under the write
// deadline (left armed: the next write sets its own; tryFlush clears it).
func (e *sse) flushConn() error {
	if e.buf.Len() == 0 {
		return nil
	}
	if err := e.conn.SetWriteDeadline(time.Now().Add(e.timeout)); err != nil {
		return err
	}
	e.armed = true
	if _, err := e.conn.Write(e.buf.Bytes()); err != nil {
		return err
	}
	e.release()
	return nil
}

// tryFlush writes what it can of what was gathered to a direct stream's socket without
// waiting (live.go): what the socket's buffer cannot take now stays in buf, for a
// flushConn on a goroutine of the stream's. err: the connection failed.
func (e *sse) tryFlush() error {
	if e.buf.Len() == 0 {
		return nil
	}
	if e.armed { // an expired deadline would refuse the write
		if err := e.conn.SetWriteDeadline(time.Time{}); err != nil {
			return err
		}
		e.armed = false
	}
	n, err := tryWrite(e.raw, e.buf.Bytes())
	if n == e.buf.Len() {
		e.release()
	} else {
		e.buf.Next(n)
	}
	return err
}

// release empties buf. A taken-over stream lets its array go (most of a follower's life
// is a wait: it keeps nothing meanwhile, and the next message allocates its own); the
// others keep a small one.
func (e *sse) release() {
	if e.conn != nil || e.buf.Cap() > keptBuffer {
		e.buf = bytes.Buffer{}
		return
	}
	e.buf.Reset()
}

// keptBuffer is the most a stream's buffer keeps between writes.
const keptBuffer = 4 << 10
