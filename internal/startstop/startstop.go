// Package startstop is the one lifecycle every background component of the agent shares
// (river's startstop is the model): Start(ctx) error backgrounds the component and
// returns; Stop() is idempotent, safe before Start, and returns only when every goroutine
// the component started has exited.
//
// A component embeds a Runner and starts its goroutines through it: the main loop with
// Start, effect goroutines (a model load, an upload) with Go. Stop cancels the context
// they all share and waits for every one of them, so no goroutine outlives its owner.
package startstop

import (
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// Service is what the daemon starts and stops in its written order.
type Service interface {
	Start(ctx context.Context) error
	Stop()
}

// ErrStarted: Start was called twice without a Stop in between.
var ErrStarted = errors.New("startstop: already started")

// ErrStopped: the runner was stopped; it takes no new goroutines.
var ErrStopped = errors.New("startstop: stopped")

// Runner owns a component's goroutines. The zero value is ready to use.
type Runner struct {
	mu      sync.Mutex
	started bool
	stopped bool
	ctx     context.Context
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	done    chan struct{} // closed when Stop has finished
}

// Start runs run(ctx) in a goroutine under a context derived from ctx that Stop cancels.
// A nil run only sets up the context for later Go calls.
func (r *Runner) Start(ctx context.Context, run func(ctx context.Context)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.started && !r.stopped {
		return ErrStarted
	}
	r.started, r.stopped = true, false
	r.ctx, r.cancel = context.WithCancel(ctx)
	r.done = make(chan struct{})
	if run != nil {
		r.wg.Add(1)
		go func(ctx context.Context) {
			defer r.wg.Done()
			run(ctx)
		}(r.ctx)
	}
	return nil
}

// Go starts a tracked goroutine under the runner's context. It reports false (and runs
// nothing) when the runner is not started or is stopping.
func (r *Runner) Go(f func(ctx context.Context)) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if !r.started || r.stopped {
		return false
	}
	r.wg.Add(1)
	go func(ctx context.Context) {
		defer r.wg.Done()
		f(ctx)
	}(r.ctx)
	return true
}

// Context is the context the runner's goroutines share (nil before Start).
func (r *Runner) Context() context.Context {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ctx
}

// Stop cancels the shared context and waits for every goroutine. Idempotent; a second
// concurrent Stop waits too.
func (r *Runner) Stop() {
	r.mu.Lock()
	if !r.started {
		r.mu.Unlock()
		return
	}
	if r.stopped {
		done := r.done
		r.mu.Unlock()
		<-done
		return
	}
	r.stopped = true
	cancel, done := r.cancel, r.done
	r.mu.Unlock()
	cancel()
	r.wg.Wait()
	close(done)
}

// Every runs fn at once and then every interval until ctx ends. An error other than
// context cancellation is logged (at most once per minute for a repeating message).
func Every(ctx context.Context, interval time.Duration, log *slog.Logger, what string, fn func(ctx context.Context) error) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var lastMsg string
	var lastAt time.Time
	for {
		if err := fn(ctx); err != nil && ctx.Err() == nil && !errors.Is(err, context.Canceled) && log != nil {
			if msg := err.Error(); msg != lastMsg || time.Since(lastAt) > time.Minute {
				log.Warn(what+" failed", "err", err)
				lastMsg, lastAt = msg, time.Now()
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// StopAll stops services in the order given (the caller writes the order down).
func StopAll(services ...Service) {
	for _, s := range services {
		if s != nil {
			s.Stop()
		}
	}
}
