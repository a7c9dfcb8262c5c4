package functionhost

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/open-runtimes/types-for-go/v4/openruntimes"
	"github.com/robfig/cron/v3"
)

// Scheduled executions, as Appwrite 1.9.6 runs a function's `schedule`
// (src/Appwrite/Platform/Tasks/ScheduleFunctions.php, Workers/Functions.php):
//
//   - The schedule is a cron expression of five fields (minute to weekday) or a descriptor
//     (@hourly, @daily, …), in UTC: dragonmantank/cron-expression, so a minute is the
//     finest step and "@every" or a seconds field is invalid (ParseSchedule).
//   - At each time the expression names, the scheduler enqueues one message
//     {type: schedule, method: POST, path: /} to the functions queue; nothing checks
//     whether the previous one still runs, so executions of a slow function overlap.
//   - The functions worker (one process, _APP_WORKER_MAX_COROUTINES=8 coroutines in the
//     shipped compose file) runs it asynchronously: it never holds an API worker, it gets
//     the function's own timeout (not the 30 s synchronous cap) and one execution record
//     (trigger schedule, status completed or failed). Beyond 8 at once, messages wait in
//     the queue (AsyncWorkers).
//   - Its headers: x-appwrite-trigger schedule, x-appwrite-event "", x-appwrite-user-id
//     "", x-appwrite-user-jwt "", x-appwrite-key (the function's scopes),
//     x-appwrite-execution-id, x-appwrite-country-code "", x-appwrite-continent-code "",
//     x-appwrite-continent-eu "false"; no client IP, an empty body.

// DefaultAsyncWorkers is how many asynchronous executions the functions worker runs at
// once (_APP_WORKERS_NUM=1 × _APP_WORKER_MAX_COROUTINES=8 in Appwrite's compose file).
const DefaultAsyncWorkers = 8

// DefaultFunctionTimeout is Appwrite's per-function timeout when none is set (15 s).
const DefaultFunctionTimeout = 15 * time.Second

// cronParser reads what dragonmantank/cron-expression reads: five fields or a descriptor.
var cronParser = cron.NewParser(cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// ParseSchedule reads a function's schedule as Appwrite's Cron validator would accept it.
func ParseSchedule(spec string) (cron.Schedule, error) {
	s := strings.TrimSpace(spec)
	if s == "" || strings.HasPrefix(s, "@every") || strings.HasPrefix(s, "TZ=") || strings.HasPrefix(s, "CRON_TZ=") {
		return nil, fmt.Errorf("schedule %q: not a cron expression Appwrite accepts", spec)
	}
	sc, err := cronParser.Parse(s)
	if err != nil {
		return nil, fmt.Errorf("schedule %q: %w", spec, err)
	}
	return sc, nil
}

// scheduler is the host's running scheduler and functions worker.
type scheduler struct {
	ctx    context.Context // ended by StopSchedules
	cancel context.CancelFunc
	queue  chan asyncJob  // the functions queue
	wg     sync.WaitGroup // the loop and every asynchronous execution
}

// ErrScheduling: the scheduler already runs, or a schedule is invalid.
var ErrScheduling = errors.New("functionhost: scheduling")

func (h *Host) now() time.Time {
	if h.Now != nil {
		return h.Now().UTC()
	}
	return time.Now().UTC()
}

// StartSchedules starts the scheduler: each function with a Schedule runs at the times
// it names, one asynchronous execution each (Execute). StopSchedules stops it and waits
// for the executions in flight.
func (h *Host) StartSchedules() error {
	h.init()
	type entry struct {
		fn   *Function
		cron cron.Schedule
	}
	var es []entry
	for i := range h.Functions {
		if h.Functions[i].Schedule == "" {
			continue
		}
		sc, err := ParseSchedule(h.Functions[i].Schedule)
		if err != nil {
			return fmt.Errorf("%w: %s: %v", ErrScheduling, h.Functions[i].Name, err)
		}
		es = append(es, entry{&h.Functions[i], sc})
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.sched != nil {
		return fmt.Errorf("%w: already started", ErrScheduling)
	}
	ctx, cancel := context.WithCancel(context.Background())
	h.sched = &scheduler{ctx: ctx, cancel: cancel, queue: make(chan asyncJob, asyncQueue)}
	s := h.sched
	n := h.AsyncWorkers
	if n <= 0 {
		n = DefaultAsyncWorkers
	}
	s.wg.Add(n)
	for range n {
		go h.asyncWorker(s)
	}
	if len(es) == 0 {
		return nil
	}
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		next := make([]time.Time, len(es))
		for i, e := range es {
			next[i] = e.cron.Next(h.now())
		}
		for {
			soonest := 0
			for i := range next {
				if next[i].Before(next[soonest]) {
					soonest = i
				}
			}
			t := time.NewTimer(next[soonest].Sub(h.now()))
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
			now := h.now()
			for i, e := range es {
				if !next[i].After(now) {
					h.enqueue(s, e.fn, "schedule")
					next[i] = e.cron.Next(now)
				}
			}
		}
	}()
	return nil
}

// StopSchedules stops the scheduler, drops the executions still queued and waits for
// those running (each bounded by its function's timeout).
func (h *Host) StopSchedules() {
	h.mu.Lock()
	s := h.sched
	h.sched = nil
	h.mu.Unlock()
	if s == nil {
		return
	}
	s.cancel()
	s.wg.Wait()
	for {
		select {
		case <-s.queue:
			h.asyncWaiting.Add(-1)
		default:
			return
		}
	}
}

// asyncQueue bounds the executions queued for the functions worker (beyond it the
// scheduler waits to enqueue).
const asyncQueue = 256

// Execute enqueues one asynchronous execution of function name, as the scheduler does at
// each time its schedule names (trigger "schedule"), and returns its id; its record is
// written when it ends (Stats). The scheduler must be started (StartSchedules).
func (h *Host) Execute(name, trigger string) (string, error) {
	h.init()
	var fn *Function
	for i := range h.Functions {
		if h.Functions[i].Name == name {
			fn = &h.Functions[i]
		}
	}
	if fn == nil {
		return "", fmt.Errorf("functionhost: no function %q", name)
	}
	if trigger != "schedule" && trigger != "event" && trigger != "http" {
		return "", fmt.Errorf("functionhost: trigger %q", trigger)
	}
	h.mu.Lock()
	s := h.sched
	h.mu.Unlock()
	if s == nil {
		return "", fmt.Errorf("%w: not started", ErrScheduling)
	}
	return h.enqueue(s, fn, trigger), nil
}

// asyncJob is one queued asynchronous execution.
type asyncJob struct {
	fn       *Function
	id       string
	trigger  string
	enqueued time.Time
}

// enqueue queues one asynchronous execution of fn in the functions queue (FIFO) and
// returns its id: one of the AsyncWorkers takes it (never an API worker), runs it with
// fn's timeout and records it when it ends.
func (h *Host) enqueue(s *scheduler, fn *Function, trigger string) string {
	j := asyncJob{fn: fn, id: newID(), trigger: trigger, enqueued: time.Now()}
	h.asyncWaiting.Add(1)
	select {
	case s.queue <- j:
	case <-s.ctx.Done():
		h.asyncWaiting.Add(-1)
	}
	return j.id
}

// asyncWorker is one of the functions worker's coroutines: it runs queued executions one
// at a time until the scheduler stops (what is still queued then is dropped; Appwrite's
// queue would keep it for after a restart).
func (h *Host) asyncWorker(s *scheduler) {
	defer s.wg.Done()
	for {
		select {
		case <-s.ctx.Done():
			return
		case j := <-s.queue:
			h.asyncWaiting.Add(-1)
			h.asyncBusy.Add(1)
			rec := Execution{ID: j.id, Function: j.fn.Name, Trigger: j.trigger, Method: "POST", Path: "/", At: j.enqueued.UTC(), Queued: time.Since(j.enqueued)}
			rec.Status = h.runAsync(s, j.fn, j.id, j.trigger)
			rec.Duration = time.Since(j.enqueued)
			h.record(rec)
			h.asyncBusy.Add(-1)
		}
	}
}

// runAsync runs fn for an asynchronous execution and returns its status code (Appwrite
// records "failed" for ≥ 500 and for a timeout: AsyncTimeoutStatus).
func (h *Host) runAsync(s *scheduler, fn *Function, id, trigger string) int {
	logger := openruntimes.Logger{}
	if h.Logs != nil {
		logger = openruntimes.Logger{Enabled: true, Id: id, StreamLogs: h.Logs, StreamErrors: h.Logs}
	}
	ctx := openruntimes.NewContext(logger)
	ctx.Req.Headers = map[string]string{
		"x-appwrite-trigger": trigger, "x-appwrite-event": "", "x-appwrite-user-id": "", "x-appwrite-user-jwt": "",
		"x-appwrite-key": fn.Key, "x-appwrite-execution-id": id,
		"x-appwrite-country-code": "", "x-appwrite-continent-code": "", "x-appwrite-continent-eu": "false",
	}
	ctx.Req.Method, ctx.Req.Path, ctx.Req.Scheme = "POST", "/", "http"
	ctx.Req.Host, ctx.Req.Port = fn.Name, 3000 // the executor calls the runtime's container
	ctx.Req.Url = "http://" + fn.Name + ":3000/"
	ctx.Req.Query = map[string]string{}
	ctx.Req.SetBodyBinary(nil)
	timeout := fn.Timeout
	if timeout <= 0 {
		timeout = DefaultFunctionTimeout
	}
	done := make(chan int, 1)
	go func() {
		captured := h.captureStdio(&logger)
		defer func() {
			if p := recover(); p != nil {
				if captured {
					h.revertStdio(&logger)
				}
				done <- 500
			}
		}()
		res := fn.Main(ctx)
		if captured {
			h.revertStdio(&logger)
		}
		if res.StatusCode == 0 {
			res.StatusCode = 200
		}
		done <- res.StatusCode
	}()
	t := time.NewTimer(timeout)
	defer t.Stop()
	select {
	case st := <-done:
		return st
	case <-t.C:
		// The worker gives up (FUNCTION_ASYNCHRONOUS_TIMEOUT, status failed); the runtime
		// goes on, and StopSchedules still waits for it (it is this host's goroutine).
		h.timeouts.Add(1)
		s.wg.Add(1) // while this execution's own count is held
		go func() { defer s.wg.Done(); <-done }()
		return AsyncTimeoutStatus
	}
}

// AsyncTimeoutStatus is the status an asynchronous execution that ran out of its
// function's timeout is recorded with (Appwrite: status failed, no response).
const AsyncTimeoutStatus = 408
