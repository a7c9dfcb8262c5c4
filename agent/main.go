// Command agent is the resident agent: one per GPU host. It executes admitted runs from
// the dedicated Redis (see agent/daemon for the start and shutdown order).
//
//	go run ./agent     # settings from the environment, then .env (see .env.example)
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/kelseyhightower/envconfig"

	"privateassistant/agent/daemon"
	"privateassistant/internal/dotenv"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "agent:", err)
		os.Exit(1)
	}
}

func run() error {
	if err := dotenv.Load(".env"); err != nil {
		return err
	}
	var s daemon.Settings
	if err := envconfig.Process("", &s); err != nil {
		return err
	}
	log := slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	a, err := daemon.New(s, log)
	if err != nil {
		return err
	}
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	if err := a.Start(context.Background()); err != nil {
		a.Shutdown()
		return err
	}
	<-sigs
	log.Info("stopping intake; runs in flight may finish", "grace", s.Grace)
	a.StopIntake()
	deadline := time.NewTimer(s.Grace)
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
wait:
	for a.Busy() {
		select {
		case <-sigs:
			log.Warn("second signal: aborting runs in flight (they resume on the next start)")
			break wait
		case <-deadline.C:
			log.Warn("grace period over: aborting runs in flight (they resume on the next start)")
			break wait
		case <-tick.C:
		}
	}
	a.Shutdown()
	log.Info("agent stopped")
	return nil
}
