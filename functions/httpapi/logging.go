package httpapi

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"io"
	"log/slog"
	"net/http"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"privateassistant/functions/runtimehttp"
)

// Logging: every request served by an API writes exactly one JSON line (slog) when it
// ends, with
//
//	requestId  Appwrite's x-appwrite-execution-id, else a valid X-Request-Id, else generated
//	method, route (the matched pattern, "METHOD /api/runs/{id}"), path (no query string)
//	status, durationMs, userId (only once the JWT was verified)
//	code (the error envelope's code) and err (the cause, for 5xx answers)
//
// Never logged: headers (Authorization, x-appwrite-key, cookies), bodies and query
// strings (a query may carry a token). The request id is echoed in the X-Request-Id
// response header and in every error envelope ("requestId"), so a user's report can be
// matched to the execution's log line.

// RequestIDHeader is the response header that carries the request id.
const RequestIDHeader = "X-Request-Id"

// NewLogger is a JSON logger writing to w at level ("debug", "info", "warn", "error";
// anything else is info).
func NewLogger(w io.Writer, level string) *slog.Logger {
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: logLevel(level)}))
}

// DefaultLogger writes JSON lines at PA_LOG_LEVEL (debug, info, warn, error; default
// info): a record logged with the context of a request an Appwrite execution serves (the
// request's own line, and anything logged with its context) goes to that execution's log
// (runtimehttp.ExecutionLog: Context.Log, Context.Error at error level), which Appwrite
// keeps with the execution; any other record to stderr.
func DefaultLogger() *slog.Logger {
	opts := &slog.HandlerOptions{Level: logLevel(os.Getenv("PA_LOG_LEVEL"))}
	return slog.New(&execHandler{opts: opts, next: slog.NewJSONHandler(stderr{}, opts)})
}

func logLevel(level string) slog.Level {
	var l slog.Level
	if err := l.UnmarshalText([]byte(strings.TrimSpace(level))); err != nil {
		l = slog.LevelInfo
	}
	return l
}

// execHandler sends a record whose context names an execution log there, as the same JSON
// line next would write, and any other record to next.
type execHandler struct {
	opts *slog.HandlerOptions
	next slog.Handler
	with []func(slog.Handler) slog.Handler // WithAttrs and WithGroup, replayed per execution record
}

func (h *execHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h *execHandler) Handle(ctx context.Context, r slog.Record) error {
	el := runtimehttp.ExecutionLogFrom(ctx)
	if el == nil {
		return h.next.Handle(ctx, r)
	}
	var buf bytes.Buffer
	var j slog.Handler = slog.NewJSONHandler(&buf, h.opts)
	for _, f := range h.with {
		j = f(j)
	}
	if err := j.Handle(ctx, r); err != nil {
		return err
	}
	line := strings.TrimSuffix(buf.String(), "\n") // Context.Log ends the line itself
	if r.Level >= slog.LevelError {
		el.Error(line)
	} else {
		el.Log(line)
	}
	return nil
}

func (h *execHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &execHandler{opts: h.opts, next: h.next.WithAttrs(as),
		with: append(slices.Clip(h.with), func(j slog.Handler) slog.Handler { return j.WithAttrs(as) })}
}

func (h *execHandler) WithGroup(name string) slog.Handler {
	return &execHandler{opts: h.opts, next: h.next.WithGroup(name),
		with: append(slices.Clip(h.with), func(j slog.Handler) slog.Handler { return j.WithGroup(name) })}
}

// stderr writes to os.Stderr as it is at each write, not as it was when the logger was
// built: the Open Runtimes server may point os.Stderr at an execution's log capture while
// the warm container's logger lives across executions.
type stderr struct{}

func (stderr) Write(p []byte) (int, error) { return os.Stderr.Write(p) }

var validRequestID = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,128}$`)

// requestID is the id Appwrite gave this execution, else the caller's X-Request-Id when it
// is a plain token, else a new random one.
func requestID(r *http.Request) string {
	for _, h := range []string{"X-Appwrite-Execution-Id", RequestIDHeader} {
		if v := strings.TrimSpace(r.Header.Get(h)); validRequestID.MatchString(v) {
			return v
		}
	}
	var b [12]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// reqState is what the request's log line collects while it is served.
type reqState struct {
	id      string
	pattern string
	userID  string
	code    string
	cause   error
}

type stateKey struct{}

func stateOf(r *http.Request) *reqState {
	if r == nil {
		return nil
	}
	st, _ := r.Context().Value(stateKey{}).(*reqState)
	return st
}

// RequestID is the id of the request being served ("" outside an API).
func RequestID(ctx context.Context) string {
	if st, ok := ctx.Value(stateKey{}).(*reqState); ok {
		return st.id
	}
	return ""
}

// statusWriter records the status written.
type statusWriter struct {
	http.ResponseWriter
	status int
}

func (w *statusWriter) WriteHeader(s int) {
	if w.status == 0 {
		w.status = s
	}
	w.ResponseWriter.WriteHeader(s)
}

func (w *statusWriter) Write(b []byte) (int, error) {
	if w.status == 0 {
		w.status = http.StatusOK
	}
	return w.ResponseWriter.Write(b)
}

// Flush passes flushes through (long-polls on a real server).
func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Unwrap lets http.ResponseController reach the underlying writer.
func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// logged serves the request through next and writes its log line.
func (a *API) logged(w http.ResponseWriter, r *http.Request, next func(http.ResponseWriter, *http.Request)) {
	start := time.Now()
	st := &reqState{id: requestID(r)}
	w.Header().Set(RequestIDHeader, st.id)
	sw := &statusWriter{ResponseWriter: w}
	r = r.WithContext(context.WithValue(r.Context(), stateKey{}, st))
	defer func() {
		status := sw.status
		if status == 0 {
			status = http.StatusOK
		}
		attrs := []slog.Attr{
			slog.String("requestId", st.id),
			slog.String("method", r.Method),
			slog.String("route", st.pattern),
			slog.String("path", r.URL.Path),
			slog.Int("status", status),
			slog.Int64("durationMs", time.Since(start).Milliseconds()),
		}
		if st.userID != "" {
			attrs = append(attrs, slog.String("userId", st.userID))
		}
		if st.code != "" {
			attrs = append(attrs, slog.String("code", st.code))
		}
		level := slog.LevelInfo
		if status >= 500 {
			level = slog.LevelError
		}
		if (status >= 500 || status == ErrClientClosed.Status) && st.cause != nil {
			attrs = append(attrs, slog.String("err", st.cause.Error()))
		}
		// With the request's context: served for an Appwrite execution, the line goes to
		// the execution's log (DefaultLogger).
		a.log.LogAttrs(r.Context(), level, "request", attrs...)
	}()
	next(sw, r)
}
