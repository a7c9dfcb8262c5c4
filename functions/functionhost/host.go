// Package functionhost serves Appwrite Functions locally the way Appwrite 1.9.6 serves
// function domains (contracts/appwrite.md §3 and §9), no more generously:
//
//   - Method, path and query pass through; x-appwrite-user-id and x-appwrite-user-jwt are
//     blanked whatever the client sent; x-appwrite-key carries a key with the function's
//     scopes.
//   - Worker slots. A synchronous execution holds one Appwrite API worker for its whole
//     duration (app/http.php runs Swoole without coroutine hooks and calls the executor
//     with a blocking curl_exec), and only the workers numbered ≥ 80 % of cores ×
//     _APP_WORKER_PER_CORE take function traffic: 5 on a 4-core host (Workers). A request
//     goes to an idle worker; with none idle, Swoole's dispatch hands it to a random busy
//     one and it waits behind that worker's current execution (not in a fair queue).
//   - The 30 s budget counts from arrival, waiting for a worker included; past it the
//     answer is Appwrite's 408 function_synchronous_timeout, an HTML error page (function
//     domains are outside /v1).
//   - One execution record per request (Appwrite queues an execution document for each),
//     counted per function and listed (Stats, ServeStats).
//   - The Go runtime's per-execution stdout/stderr capture (CaptureStdio): types-for-go's
//     OverrideNativeLogs / RevertNativeLogs around each execution, exactly as the
//     open-runtimes Go server calls them. So a line written to stdout or stderr outside an
//     execution goes wherever the last revert left the process's streams — with two
//     executions overlapping, a closed pipe — and is lost, as it is there. Background
//     goroutines must report through Context.Log or a metric.
//
// Each function's Main is called with a context built by the real types-for-go, its logger
// appending to Host.Logs (the runtime's per-execution log files).
package functionhost

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"html"
	"io"
	mrand "math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/open-runtimes/types-for-go/v4/openruntimes"
)

// Function is one deployed function.
type Function struct {
	Name     string
	Prefixes []string // request paths this function's domain serves
	Main     func(openruntimes.Context) openruntimes.Response
	Key      string // the key Appwrite would hand each execution
	// Schedule is the function's cron schedule ("" none; ParseSchedule), run by
	// StartSchedules as asynchronous executions.
	Schedule string
	// Timeout is the function's own timeout, which asynchronous executions get (default
	// DefaultFunctionTimeout); synchronous ones are cut at Host.Timeout.
	Timeout time.Duration
}

// DefaultWorkers is the number of Appwrite API workers that take function traffic on a
// 4-core Appwrite host with the defaults: 4 cores × _APP_WORKER_PER_CORE (6) = 24 workers,
// of which those numbered ≥ floor(0.8 × 24) = 19 take function domains: 5.
const DefaultWorkers = 5

// WorkersFor is the number of function workers of an Appwrite host with cores CPU cores,
// perCore workers per core (_APP_WORKER_PER_CORE, default 6) and riskyPercent
// (_APP_RISKY_WORKERS_PERCENT, default 80): N − floor(N × riskyPercent / 100), at least 1.
func WorkersFor(cores, perCore, riskyPercent int) int {
	n := cores * perCore
	w := n - n*riskyPercent/100
	if w < 1 {
		w = 1
	}
	return w
}

// Host routes requests to functions by path prefix.
type Host struct {
	Functions []Function
	Timeout   time.Duration // the synchronous cap from arrival; default 30 s
	MaxBody   int64         // default 20 MiB (the Go runtime's MaxBytesHandler)
	// Workers is the number of API workers that serve function executions (default
	// DefaultWorkers); an execution holds one for its whole duration.
	Workers int
	// Logs receives what executions log through their Context (Context.Log and
	// Context.Error) and what they wrote to stdout/stderr, as the Go runtime's logger
	// appends them to the execution's /mnt/logs/<id>_logs.log and _errors.log files; nil
	// drops them.
	Logs *os.File
	// CaptureStdio swaps the process's os.Stdout and os.Stderr per execution as the Go
	// runtime does (a real runtime always captures). make dev turns it on; a test binary
	// leaves it off unless it tests the capture, because there the process's streams are
	// the test framework's own (it prints PASS to os.Stdout after the last execution).
	CaptureStdio bool
	// AsyncWorkers is how many asynchronous (scheduled) executions run at once: the
	// functions worker's coroutines (default DefaultAsyncWorkers). They never take one of
	// the Workers.
	AsyncWorkers int
	// Now is the scheduler's clock (tests); nil: time.Now.
	Now func() time.Time

	once    sync.Once
	workers []chan struct{} // one token per worker: held for an execution

	asyncBusy    atomic.Int64
	asyncWaiting atomic.Int64
	sched        *scheduler // guarded by mu

	executions atomic.Int64
	waiting    atomic.Int64
	busy       atomic.Int64
	timeouts   atomic.Int64
	mu         sync.Mutex
	perFn      map[string]int64
	perTrigger map[string]int64
	recent     []Execution // the last recentMax executions, oldest first
}

const recentMax = 512

// stdio orders every host's swaps of the process's os.Stdout and os.Stderr (one pair per
// process, as one runtime container has).
var stdio sync.Mutex

// Execution is the record Appwrite keeps of one execution.
type Execution struct {
	ID       string        `json:"id"`
	Function string        `json:"function"`
	Trigger  string        `json:"trigger"` // http, schedule or event
	Method   string        `json:"method"`
	Path     string        `json:"path"`
	Status   int           `json:"status"`
	Waited   bool          `json:"waited"`     // no worker was idle: it waited behind a busy one
	Queued   time.Duration `json:"queuedNs"`   // waiting for a worker
	Duration time.Duration `json:"durationNs"` // arrival to answer
	At       time.Time     `json:"at"`
}

// Stats is what the host has served: executions (one record each) in all and per
// function, workers busy now and requests waiting for one, and 408s.
type Stats struct {
	Workers     int              `json:"workers"`
	Executions  int64            `json:"executions"`
	PerFunction map[string]int64 `json:"perFunction"`
	// PerTrigger counts them by trigger: http (a caller's request; what a page can cause),
	// schedule (a function's cron).
	PerTrigger map[string]int64 `json:"perTrigger"`
	Busy       int64            `json:"busy"`
	Waiting    int64            `json:"waiting"`
	Timeouts   int64            `json:"timeouts"`
	// AsyncBusy and AsyncWaiting: asynchronous executions running, and queued for a slot.
	AsyncBusy    int64       `json:"asyncBusy"`
	AsyncWaiting int64       `json:"asyncWaiting"`
	Recent       []Execution `json:"recent,omitempty"`
}

const appwriteVersion = "1.9.6"

func (h *Host) init() {
	h.once.Do(func() {
		n := h.Workers
		if n <= 0 {
			n = DefaultWorkers
		}
		h.workers = make([]chan struct{}, n)
		for i := range h.workers {
			h.workers[i] = make(chan struct{}, 1)
		}
		h.perFn = map[string]int64{}
		h.perTrigger = map[string]int64{}
	})
}

// Stats returns the counters and, with recent, the latest execution records.
func (h *Host) Stats(recent bool) Stats {
	h.init()
	h.mu.Lock()
	defer h.mu.Unlock()
	s := Stats{Workers: len(h.workers), Executions: h.executions.Load(), Busy: h.busy.Load(), Waiting: h.waiting.Load(),
		Timeouts: h.timeouts.Load(), AsyncBusy: h.asyncBusy.Load(), AsyncWaiting: h.asyncWaiting.Load(), PerFunction: map[string]int64{},
		PerTrigger: map[string]int64{}}
	for k, v := range h.perFn {
		s.PerFunction[k] = v
	}
	for k, v := range h.perTrigger {
		s.PerTrigger[k] = v
	}
	if recent {
		s.Recent = append([]Execution(nil), h.recent...)
	}
	return s
}

// ServeStats answers Stats as JSON (?recent=1 adds the records): the dev stack's
// /_dev/executions, what the Console's executions list would show.
func (h *Host) ServeStats(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(h.Stats(r.URL.Query().Get("recent") == "1"))
}

func (h *Host) record(e Execution) {
	h.executions.Add(1)
	h.mu.Lock()
	h.perFn[e.Function]++
	h.perTrigger[e.Trigger]++
	h.recent = append(h.recent, e)
	if len(h.recent) > recentMax {
		h.recent = append(h.recent[:0:0], h.recent[len(h.recent)-recentMax:]...)
	}
	h.mu.Unlock()
}

// acquire takes a worker as Swoole's dispatch gives one: an idle worker if there is one,
// else a random busy one to wait behind. It returns the worker's release, or false when
// the deadline passed or the client went away first.
func (h *Host) acquire(ctx context.Context, deadline time.Time, waited *bool) (func(), bool) {
	start := mrand.IntN(len(h.workers))
	for i := range h.workers {
		w := h.workers[(start+i)%len(h.workers)]
		select {
		case w <- struct{}{}:
			return h.took(w), true
		default:
		}
	}
	*waited = true
	w := h.workers[mrand.IntN(len(h.workers))]
	h.waiting.Add(1)
	defer h.waiting.Add(-1)
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	select {
	case w <- struct{}{}:
		return h.took(w), true
	case <-t.C:
		return nil, false
	case <-ctx.Done():
		return nil, false
	}
}

func (h *Host) took(w chan struct{}) func() {
	h.busy.Add(1)
	var once sync.Once
	return func() { once.Do(func() { h.busy.Add(-1); <-w }) }
}

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

// errorPage is Appwrite's HTML error page, which it answers outside /v1 (function domains).
func errorPage(w http.ResponseWriter, status int, typ, msg string) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, "<!DOCTYPE html><html><head><title>Error "+strconv.Itoa(status)+"</title></head><body><h1>Error "+
		strconv.Itoa(status)+"</h1><p>"+html.EscapeString(msg)+"</p><p>Type: <code>"+typ+"</code></p><p>Version: "+appwriteVersion+"</p></body></html>")
}

const timeoutMessage = "Synchronous function execution timed out. Use asynchronous execution instead, or ensure the execution duration doesn't exceed 30 seconds."

// ServeHTTP executes the matching function synchronously on a worker.
func (h *Host) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	arrived := time.Now()
	h.init()
	fn := h.find(r.URL.Path)
	if fn == nil {
		appwriteError(w, 404, "router_host_not_found", "No function is deployed for this path.")
		return
	}
	timeout := h.Timeout
	if timeout == 0 {
		timeout = 30 * time.Second
	}
	deadline := arrived.Add(timeout)
	execID := newID()
	rec := Execution{ID: execID, Function: fn.Name, Trigger: "http", Method: r.Method, Path: r.URL.Path, At: arrived.UTC()}
	status := 0
	defer func() {
		rec.Status, rec.Duration = status, time.Since(arrived)
		h.record(rec)
	}()

	maxBody := h.MaxBody
	if maxBody == 0 {
		maxBody = 20 << 20
	}
	body, err := io.ReadAll(io.LimitReader(r.Body, maxBody+1))
	if err != nil || int64(len(body)) > maxBody {
		status = 413
		appwriteError(w, 413, "general_argument_invalid", "Request body is too large.")
		return
	}

	release, ok := h.acquire(r.Context(), deadline, &rec.Waited)
	rec.Queued = time.Since(arrived)
	if !ok {
		if r.Context().Err() != nil {
			status = 499 // the client went away while waiting for a worker
			return
		}
		status = 408
		h.timeouts.Add(1)
		errorPage(w, 408, "function_synchronous_timeout", timeoutMessage)
		return
	}
	defer release()

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
		captured := h.captureStdio(&logger)
		defer func() {
			if p := recover(); p != nil {
				if captured {
					h.revertStdio(&logger)
				}
				done <- openruntimes.Response{StatusCode: 500, Body: []byte("")}
			}
		}()
		res := fn.Main(ctx)
		if captured {
			h.revertStdio(&logger)
		}
		done <- res
	}()
	t := time.NewTimer(time.Until(deadline))
	defer t.Stop()
	var res openruntimes.Response
	select {
	case res = <-done:
	case <-t.C:
		// The router gives up and the worker is free again; the runtime goes on.
		status = 408
		h.timeouts.Add(1)
		errorPage(w, 408, "function_synchronous_timeout", timeoutMessage)
		return
	}
	status = res.StatusCode
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

// captureStdio points the process's stdout and stderr at the execution's capture, as the
// Go runtime does before calling Main (types-for-go's own code). The host's lock only
// orders the swaps of the two variables (the runtime's overlap, a later execution
// restoring an earlier one's closed pipe, is kept).
func (h *Host) captureStdio(l *openruntimes.Logger) bool {
	if !h.CaptureStdio {
		return false
	}
	stdio.Lock()
	defer stdio.Unlock()
	return l.OverrideNativeLogs() == nil
}

func (h *Host) revertStdio(l *openruntimes.Logger) {
	stdio.Lock()
	defer stdio.Unlock()
	l.RevertNativeLogs() // closes the capture, restores what Override saw, copies the capture to the log
}

func newID() string {
	b := make([]byte, 10)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
