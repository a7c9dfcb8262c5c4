// Package functionhost serves Appwrite Functions locally the way Appwrite's router
// serves function domains: method, path and query pass through; x-appwrite-user-id and
// x-appwrite-user-jwt are blanked whatever the client sent; x-appwrite-key carries a key
// with the function's scopes; a synchronous execution is cut at 30 s (408
// function_synchronous_timeout). Each function's Main is called with a context built by
// the real types-for-go, exactly as the Go runtime builds it, its logger appending to
// Host.Logs (the runtime's per-execution log files).
package functionhost

import (
	"crypto/rand"
	"encoding/hex"
	"io"
	"net/http"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/open-runtimes/types-for-go/v4/openruntimes"
)

// Function is one deployed function.
type Function struct {
	Name     string
	Prefixes []string // request paths this function's domain serves
	Main     func(openruntimes.Context) openruntimes.Response
	Key      string // the key Appwrite would hand each execution
}

// Host routes requests to functions by path prefix.
type Host struct {
	Functions []Function
	Timeout   time.Duration // default 30 s
	MaxBody   int64         // default 20 MiB (the Go runtime's MaxBytesHandler)
	// Logs receives what executions log through their Context (Context.Log and
	// Context.Error), as the Go runtime's logger appends them to the execution's
	// /mnt/logs/<id>_logs.log and _errors.log files; nil drops them.
	Logs *os.File
}

const appwriteVersion = "1.9.6"

func (h *Host) find(path string) *Function {
	var best *Function
	bestLen := -1
	for i := range h.Functions {
		for _, p := range h.Functions[i].Prefixes {
			if (path == p || strings.HasPrefix(path, p+"/")) && len(p) > bestLen {
				best, bestLen = &h.Functions[i], len(p)
			}
		}
	}
	return best
}

func appwriteError(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, `{"message":"`+msg+`","code":`+strconv.Itoa(status)+`,"type":"`+typ+`","version":"`+appwriteVersion+`"}`)
}

// ServeHTTP executes the matching function synchronously.
func (h *Host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	fn := h.find(r.URL.Path)
	if fn == nil {
		appwriteError(w, 404, "router_host_not_found", "No function is deployed for this path.")
		return
	}
	maxBody := h.MaxBody
	if maxBody == 0 {
		maxBody = 20 << 20
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || int64(len(body)) > maxBody {
		appwriteError(w, 413, "general_argument_invalid", "Request body is too large.")
		return
	}
	execID := newID()
	logger := openruntimes.Logger{}
	if h.Logs != nil {
		logger = openruntimes.Logger{Enabled: true, Id: execID, StreamLogs: h.Logs, StreamErrors: h.Logs}
	}
	ctx := openruntimes.NewContext(logger)
	headers := map[string]string{}
	for k, vs := range r.Header {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-open-runtimes-") || len(vs) == 0 {
			continue
		}
		headers[lk] = vs[0] // the runtime keeps the first value only
	}
	// What Appwrite's router sets after the client's headers (overwriting them).
	headers["x-appwrite-trigger"] = "http"
	headers["x-appwrite-user-id"] = ""
	headers["x-appwrite-user-jwt"] = ""
	headers["x-appwrite-key"] = fn.Key
	headers["x-appwrite-execution-id"] = execID
	headers["x-appwrite-client-ip"] = strings.Split(r.RemoteAddr, ":")[0]
	ctx.Req.Headers = headers
	ctx.Req.Method = r.Method
	ctx.Req.Path = r.URL.Path
	ctx.Req.QueryString = r.URL.RawQuery
	ctx.Req.Query = map[string]string{}
	for k, vs := range r.URL.Query() {
		ctx.Req.Query[k] = vs[0]
	}
	ctx.Req.Scheme = "http"
	if p := r.Header.Get("X-Forwarded-Proto"); p != "" {
		ctx.Req.Scheme = p
	}
	ctx.Req.Host = r.Host
	host, port, found := strings.Cut(r.Host, ":")
	if found {
		ctx.Req.Host = host
		ctx.Req.Port, _ = strconv.Atoi(port)
	}
	ctx.Req.Url = ctx.Req.Scheme + "://" + r.Host + r.URL.RequestURI()
	ctx.Req.SetBodyBinary(body)

	done := make(chan openruntimes.Response, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				done <- openruntimes.Response{StatusCode: 500, Body: []byte("")}
			}
		}()
		done <- fn.Main(ctx)
	}()
	timeout := h.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	var res openruntimes.Response
	select {
	case res = <-done:
	case <-time.After(timeout):
		appwriteError(w, 408, "function_synchronous_timeout", "Synchronous function execution timed out. Use asynchronous execution instead, or ensure the execution duration doesn't exceed 30 seconds.")
		return
	}
	status := res.StatusCode
	if status == 0 {
		status = 200
	}
	ct := ""
	for k, v := range res.Headers {
		lk := strings.ToLower(k)
		if strings.HasPrefix(lk, "x-open-runtimes-") || lk == "transfer-encoding" {
			continue
		}
		if lk == "content-type" {
			ct = v
		}
		w.Header().Set(lk, v)
	}
	if ct == "" {
		w.Header().Set("content-type", "text/plain; charset=utf-8")
	}
	w.Header().Set("x-appwrite-execution-id", execID)
	if len(res.Body) == 0 && status >= 400 {
		// Appwrite replaces an empty error body with its own HTML error page.
		w.Header().Set("content-type", "text/html; charset=utf-8")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, "<!DOCTYPE html><html><head><title>Error "+strconv.Itoa(status)+"</title></head><body><h1>Error "+strconv.Itoa(status)+"</h1></body></html>")
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write(res.Body)
}

func newID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
