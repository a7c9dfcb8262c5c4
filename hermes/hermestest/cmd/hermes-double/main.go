// Command hermes-double serves the Hermes API double on its own (dev stack, manual tests).
//
//	hermes-double -addr 127.0.0.1:8642 -model-url http://127.0.0.1:9000/v1 -data .dev/hermes
//
// The API key comes from HERMES_API_KEY (32+ characters).
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"privateassistant/hermes/hermestest"
)

func main() {
	addr := flag.String("addr", "127.0.0.1:8642", "listen address")
	modelURL := flag.String("model-url", "http://127.0.0.1:9000/v1", "OpenAI-compatible model endpoint")
	model := flag.String("model", "chat", "default model")
	data := flag.String("data", "", "HERMES_HOME (durable idempotency and sessions)")
	artifacts := flag.String("artifacts", "", "workspace root for write_file (per run)")
	flag.Parse()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "hermes-double")
	d, err := hermestest.New(hermestest.Options{APIKey: os.Getenv("HERMES_API_KEY"), ModelURL: *modelURL, Model: *model,
		DataDir: *data, ArtifactDir: *artifacts, ModelKey: os.Getenv("GATEWAY_API_KEY"), Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "hermes-double:", err)
		os.Exit(1)
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hermes-double:", err)
		os.Exit(1)
	}
	srv := &http.Server{Handler: d, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error("serve", "err", err)
		}
	}()
	log.Info("API server listening on http://" + ln.Addr().String())
	<-ctx.Done()
	d.Close()
	sctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	_ = srv.Shutdown(sctx)
}
