package ops

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"time"

	"privateassistant/internal/startstop"
)

// HTTPServer is one of the agent's HTTP listeners (the ops listener, the inference
// gateway) as a startstop.Service: Start binds and serves in the background; Stop stops
// accepting, lets requests in flight finish for up to ShutdownTimeout, closes what is
// left and returns when Serve has returned.
type HTTPServer struct {
	Addr            string
	Handler         http.Handler
	ShutdownTimeout time.Duration // default 3 s
	Log             *slog.Logger
	What            string // for logs, e.g. "ops listener"

	run   startstop.Runner
	mu    sync.Mutex
	bound string
}

var _ startstop.Service = (*HTTPServer)(nil)

// Start listens on Addr and serves until Stop (or until ctx ends).
func (h *HTTPServer) Start(ctx context.Context) error {
	ln, err := net.Listen("tcp", h.Addr)
	if err != nil {
		return err
	}
	h.mu.Lock()
	h.bound = ln.Addr().String()
	h.mu.Unlock()
	srv := &http.Server{Handler: h.Handler, ReadHeaderTimeout: 10 * time.Second}
	if err := h.run.Start(ctx, func(ctx context.Context) {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) && h.Log != nil {
			h.Log.Error(h.what()+" failed", "err", err)
		}
	}); err != nil {
		_ = ln.Close()
		return err
	}
	h.run.Go(func(ctx context.Context) {
		<-ctx.Done()
		wait := h.ShutdownTimeout
		if wait <= 0 {
			wait = 3 * time.Second
		}
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), wait)
		defer cancel()
		if err := srv.Shutdown(sctx); err != nil {
			_ = srv.Close() // requests still running after the bound: cut them
		}
	})
	return nil
}

// Bound is the address actually bound (after Start; useful with port 0).
func (h *HTTPServer) Bound() string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.bound
}

// Stop shuts the server down and waits. Idempotent, safe before Start.
func (h *HTTPServer) Stop() { h.run.Stop() }

func (h *HTTPServer) what() string {
	if h.What == "" {
		return "http listener"
	}
	return h.What
}
