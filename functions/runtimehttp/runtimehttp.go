// Package runtimehttp adapts an Open Runtimes (Appwrite Functions) execution to net/http,
// so the functions' logic is plain http.Handlers: Serve turns the runtime request into an
// *http.Request, serves it, and turns the recorded response back.
package runtimehttp

import (
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/open-runtimes/types-for-go/v4/openruntimes"
)

// Serve runs h for the execution in c and returns the runtime response. The request's
// context is bounded by the x-open-runtimes-timeout the executor gave the runtime
// (Appwrite's synchronous cap is 30 s), so long-polls end before the executor gives up.
func Serve(c *openruntimes.Context, h http.Handler, timeout time.Duration) openruntimes.Response {
	req := c.Req
	target := req.Path
	if target == "" {
		target = "/"
	}
	if req.QueryString != "" {
		target += "?" + req.QueryString
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return invalid(c, "invalid_path", "the request path is not valid")
	}
	ctx := context.WithValue(context.Background(), execLogKey{}, ExecutionLog(c))
	if timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, timeout)
		defer cancel()
	}
	method := strings.ToUpper(req.Method)
	if method == "" {
		method = http.MethodGet
	}
	hr, err := http.NewRequestWithContext(ctx, method, u.String(), bytes.NewReader(req.BodyBinary()))
	if err != nil {
		return invalid(c, "invalid_request", "the request could not be read")
	}
	hr.Host = req.Host
	for k, v := range req.Headers {
		hr.Header.Set(k, v)
	}
	hr.ContentLength = int64(len(req.BodyBinary()))
	hr.RequestURI = u.RequestURI()

	rec := &recorder{header: http.Header{}}
	h.ServeHTTP(rec, hr)
	headers := map[string]string{}
	for k, vs := range rec.header {
		headers[strings.ToLower(k)] = strings.Join(vs, ", ")
	}
	status := rec.status
	if status == 0 {
		status = 200
	}
	return c.Res.Binary(rec.body.Bytes(), c.Res.WithStatusCode(status), c.Res.WithHeaders(headers))
}

// invalid answers a request that never reaches the handler: the envelope with Appwrite's
// execution id as its request id (as httpapi does), and one line in the execution's log.
func invalid(c *openruntimes.Context, code, msg string) openruntimes.Response {
	id := ""
	for k, v := range c.Req.Headers {
		if strings.EqualFold(k, "x-appwrite-execution-id") {
			id = v
		}
	}
	c.Error(fmt.Sprintf(`{"level":"WARN","msg":"request","requestId":%q,"status":400,"code":%q}`, id, code))
	body := map[string]any{"code": code, "message": msg}
	opts := []openruntimes.ResponseOption{c.Res.WithStatusCode(400)}
	if id != "" {
		body["requestId"] = id
		opts = append(opts, c.Res.WithHeaders(map[string]string{"x-request-id": id}))
	}
	return c.Res.Json(map[string]any{"error": body}, opts...)
}

// ExecutionLog is an execution's own log, which Appwrite keeps with the execution (the
// Console's execution logs): Log for lines, Error for error lines. It is the runtime
// Context's: types-for-go appends to the execution's log files (/mnt/logs/<id>_logs.log
// and _errors.log). Lines written to stdout or stderr instead are captured through a pipe
// per execution (Logger.OverrideNativeLogs) and, in types-for-go v4.0.8, RevertNativeLogs
// stores the stdout capture in place of the stderr one: a line on stderr is lost.
type ExecutionLog interface {
	Log(messages ...interface{})
	Error(messages ...interface{})
}

type execLogKey struct{}

// ExecutionLogFrom is the log of the execution a request served by Serve belongs to (nil
// for any other request).
func ExecutionLogFrom(ctx context.Context) ExecutionLog {
	l, _ := ctx.Value(execLogKey{}).(ExecutionLog)
	return l
}

type recorder struct {
	header http.Header
	status int
	body   bytes.Buffer
}

func (r *recorder) Header() http.Header { return r.header }

func (r *recorder) WriteHeader(s int) {
	if r.status == 0 {
		r.status = s
	}
}

func (r *recorder) Write(b []byte) (int, error) {
	if r.status == 0 {
		r.status = 200
	}
	return r.body.Write(b)
}

// ExecutionBudget is how long a handler may take: under Appwrite's 30 s synchronous cap,
// leaving room to write the response.
const ExecutionBudget = 28 * time.Second
