// Command pa-stream is the stream service (package stream): run events, the change feed,
// the runtime API's response events as Server-Sent Events, and artifact downloads, on the
// chat's origin behind the reverse proxy (/stream/), plus an ops listener (/healthz,
// /readyz, /metrics).
//
//	go run ./stream/cmd/pa-stream   # settings from the environment, then .env (deploy/stream.env.example)
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/kelseyhightower/envconfig"
	"github.com/prometheus/client_golang/prometheus"

	"privateassistant/internal/dotenv"
	"privateassistant/internal/startstop"
	"privateassistant/ops"
	"privateassistant/stream"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "pa-stream:", err)
		os.Exit(1)
	}
}

func run() error {
	if err := dotenv.Load(".env"); err != nil {
		return err
	}
	var cfg stream.Config
	if err := envconfig.Process("", &cfg); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	reg := prometheus.NewRegistry()
	svc, err := stream.New(cfg, log, reg)
	if err != nil {
		return err
	}
	public := &ops.HTTPServer{Addr: cfg.Addr, Handler: svc, Log: log, What: "stream listener"}
	opsSrv := svc.Ops(cfg.OpsAddr, reg, log)
	ctx := context.Background()
	// Start order: the service (its hub), then the listeners. Stop order, written down:
	// the service first (it refuses new requests and ends every stream, so the public
	// listener's graceful shutdown does not wait on them), then the public listener, then
	// the ops listener (readiness answers until the end).
	for _, c := range []startstop.Service{svc, public, opsSrv} {
		if err := c.Start(ctx); err != nil {
			startstop.StopAll(svc, public, opsSrv)
			return err
		}
	}
	log.Info("stream service listening", "addr", public.Bound(), "ops", opsSrv.Bound())
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	<-sigs
	startstop.StopAll(svc, public, opsSrv)
	log.Info("stream service stopped")
	return nil
}
