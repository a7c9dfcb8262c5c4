package daemon

import (
	"context"
	"fmt"
	"sync"

	"github.com/hibiken/asynq"

	"privateassistant/internal/startstop"
	"privateassistant/queue"
)

// Start brings everything up in the order written at the top of the package. On an
// error the caller calls Shutdown, which stops whatever had started.
func (a *Agent) Start(ctx context.Context) error {
	ctx, a.cancel = context.WithCancel(ctx)
	// Start's context ending aborts runs in flight, like Shutdown's abort.
	context.AfterFunc(ctx, a.abort)
	if a.Homes != nil {
		if err := a.Homes.Start(ctx); err != nil {
			return err
		}
	}
	for _, qs := range a.queueServers() {
		if err := qs.Start(ctx); err != nil {
			return err
		}
	}
	if err := a.Outbox.Start(ctx); err != nil {
		return err
	}
	if err := a.Resumer.Start(ctx); err != nil {
		return err
	}
	if err := a.Expirer.Start(ctx); err != nil {
		return err
	}
	if err := a.Uploads.Start(ctx); err != nil {
		return err
	}
	if err := a.Validator.Start(ctx); err != nil {
		return err
	}
	if err := a.Ops.Start(ctx); err != nil {
		return err
	}
	if err := a.startGPU(ctx); err != nil {
		return err
	}
	if err := a.ready.Start(ctx); err != nil {
		return err
	}
	a.Log.Info("agent started", "queues", len(a.Servers), "ops", a.Ops.Bound())
	return nil
}

// StopIntake is stage one of shutdown: the asynq servers stop pulling tasks and the
// outbox and resume scans stop; runs in flight go on (Busy reports them). Idempotent.
func (a *Agent) StopIntake() {
	for _, qs := range a.queueServers() {
		qs.StopIntake()
	}
	a.Outbox.Stop()
	a.Resumer.StopScan()
}

// Busy reports whether runs are still executing here.
func (a *Agent) Busy() bool { return a.Exec.Running() > 0 }

// Shutdown is stage two: it aborts what is left and stops every component, in this
// order, waiting for each (asynq's Server.Shutdown is the model):
//
//  1. Intake (StopIntake, if the caller has not): nothing new starts from here on.
//  2. Abort: handler contexts (asynq's BaseContext) are cancelled and the aborted tasks
//     go back to asynq without using their retry budget; a handler returns without
//     stopping its native run, which the next agent start re-attaches to. The asynq
//     servers shut down and every handler call has returned (runs the resume scanner
//     put back on a queue are handlers like any other: it executes nothing itself).
//     (Letting work finish is the caller's
//     bound: main waits up to PA_AGENT_SHUTDOWN_GRACE between the two stages.)
//  3. Background writers: the outbox (already stopped with intake), the retention
//     sweeper, the harness validator, the members' Hermes processes (agent/homes: their
//     runs in flight end; the next start finds them interrupted), and the GPU status
//     publishers, which read the managers, so they stop before them.
//  4. GPU managers: no run holds a grant any more, so their unloads and Immich resumes
//     are the last GPU effects; they wait for their effect goroutines.
//  5. The MCP job server (PA_MCP_ADDR), then the inference gateway: this agent's runs
//     are gone; requests still in flight (a native run Hermes goes on with) get the
//     listener's drain bound, then are cut. Then the gateway's usage writer, which
//     writes the records still queued.
//  6. The readiness report (removed from Redis), then the ops listener: last, so
//     /healthz answers through the whole grace period.
//  7. Redis: every component that uses the client has stopped.
//
// Idempotent; a concurrent second call waits for the first.
func (a *Agent) Shutdown() {
	a.shutdownOnce.Do(func() {
		a.StopIntake() // 1
		a.abort()      // 2
		var wg sync.WaitGroup
		for _, qs := range a.queueServers() {
			wg.Add(1)
			go func() { defer wg.Done(); qs.Stop() }()
		}
		wg.Wait()
		a.handlers.wait()
		a.Resumer.Stop()
		if a.cancel != nil {
			a.cancel()
		}
		a.Outbox.Stop() // 3
		a.Expirer.Stop()
		a.Uploads.Stop()
		a.Validator.Stop()
		if a.Homes != nil {
			a.Homes.Stop() // the members' Hermes processes: no handler uses one any more
		}
		for _, p := range a.Publishers {
			p.Stop()
		}
		for _, m := range a.GPU { // 4
			m.Stop()
		}
		if a.mcpSrv != nil { // 5: the MCP job server, then the gateway
			a.mcpSrv.Stop()
		}
		if a.gwSrv != nil {
			a.gwSrv.Stop()
		}
		if a.Usage != nil {
			a.Usage.Stop() // the gateway's last usage records, written
		}
		a.ready.Stop() // 6: the readiness report goes from Redis, then the ops listener
		a.Ops.Stop()
		_ = a.RDB.Close() // 7
		if a.usageRDB != nil {
			_ = a.usageRDB.Close()
		}
	})
}

// abort cancels every handler's context; from here on a handler's error is not a
// failure (its task goes back to asynq without using its retry budget).
func (a *Agent) abort() {
	a.aborting.Store(true)
	a.abortWork()
}

// queueServer is one device queue's asynq server as a startstop.Service, with asynq's
// two stages: StopIntake (Server.Stop: no new tasks) and Stop (Server.Shutdown: waits
// for its workers up to its ShutdownTimeout, then requeues what is left).
type queueServer struct {
	name string
	srv  *asynq.Server
	h    asynq.Handler
}

var _ startstop.Service = (*queueServer)(nil)

func (q *queueServer) Start(context.Context) error {
	if err := q.srv.Start(q.h); err != nil {
		return fmt.Errorf("start %s server: %w", q.name, err)
	}
	return nil
}

func (q *queueServer) StopIntake() { q.srv.Stop() }
func (q *queueServer) Stop()       { q.srv.Shutdown() }

// queueServers wraps the asynq servers (once; the handler is set by Start).
func (a *Agent) queueServers() []*queueServer {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.qs == nil {
		mux := asynq.NewServeMux()
		mux.HandleFunc(queue.TypeRun, a.handlers.track(a.Exec.HandleTask))
		mux.HandleFunc(queue.TypeProbe, a.handlers.track(a.Exec.HandleProbe)) // a release's probe run (issue 33)
		if a.Qualifier != nil {
			// A route's GPU qualification (issue 20): aborted by Shutdown like a run, it is
			// offered again at the next start.
			mux.HandleFunc(queue.TypeQualify, a.handlers.track(a.Qualifier.HandleTask))
		}
		for name, srv := range a.Servers {
			a.qs = append(a.qs, &queueServer{name: name, srv: srv, h: mux})
		}
	}
	return a.qs
}

// inflight counts handler calls so that Shutdown can wait for them: asynq's
// Server.Shutdown stops waiting for a handler once its ShutdownTimeout has passed, and
// the handler's goroutine is asynq's, not ours.
type inflight struct {
	mu   sync.Mutex
	n    int
	zero chan struct{} // closed when n drops to 0
}

func (f *inflight) track(h asynq.HandlerFunc) asynq.HandlerFunc {
	return func(ctx context.Context, t *asynq.Task) error {
		f.mu.Lock()
		if f.n == 0 {
			f.zero = make(chan struct{})
		}
		f.n++
		f.mu.Unlock()
		defer func() {
			f.mu.Lock()
			f.n--
			if f.n == 0 {
				close(f.zero)
			}
			f.mu.Unlock()
		}()
		return h(ctx, t)
	}
}

// wait returns when no handler call is in progress.
func (f *inflight) wait() {
	f.mu.Lock()
	if f.n == 0 {
		f.mu.Unlock()
		return
	}
	z := f.zero
	f.mu.Unlock()
	<-z
}
