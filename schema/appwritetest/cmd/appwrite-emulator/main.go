// Command appwrite-emulator serves the Appwrite 1.9.6 emulator on its own, with a data
// directory so that state survives restarts (the dev stack uses it).
//
//	appwrite-emulator -addr 127.0.0.1:8090 -data .dev/appwrite -project privateassistant \
//	    -keys '{"<secret>":["databases.read","databases.write", ...]}' -engine mongodb
//
// -engine picks the storage engine modelled (ideal, mongodb, mariadb; default
// $PA_APPWRITE_ENGINE, else mongodb, Appwrite 1.9.6's default); -storage-device s3 makes chunked files carry an S3
// ETag as their signature; -rate-limits off disables the engine's abuse limits.
package main

import (
	"context"
	"encoding/json"
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

	"privateassistant/schema/appwritetest"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "appwrite-emulator:", err)
		os.Exit(1)
	}
}

func run() error {
	addr := flag.String("addr", "127.0.0.1:8090", "listen address")
	data := flag.String("data", "", "data directory (empty: in memory only)")
	project := flag.String("project", "privateassistant", "project id")
	keys := flag.String("keys", os.Getenv("APPWRITE_EMULATOR_KEYS"), `API keys as JSON {"secret":["scope",...]}`)
	engine := flag.String("engine", os.Getenv(appwritetest.EngineEnv), "storage engine to model: mongodb (the default), mariadb or ideal")
	device := flag.String("storage-device", "local", "storage device type: local or s3")
	limits := flag.String("rate-limits", "engine", "abuse limits: engine (the engine's default), upstream or off")
	flag.Parse()

	eng, err := appwritetest.ParseEngine(*engine)
	if err != nil {
		return fmt.Errorf("-engine: %w", err)
	}
	var rl *appwritetest.RateLimits
	switch *limits {
	case "engine":
	case "upstream":
		u := appwritetest.UpstreamRateLimits()
		rl = &u
	case "off":
		rl = appwritetest.NoRateLimits()
	default:
		return fmt.Errorf("-rate-limits: want engine, upstream or off, got %q", *limits)
	}

	var km map[string][]string
	if *keys != "" {
		if err := json.Unmarshal([]byte(*keys), &km); err != nil {
			return fmt.Errorf("-keys: %w", err)
		}
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("component", "appwrite-emulator")
	srv, err := appwritetest.New(appwritetest.Options{ProjectID: *project, Keys: km, DataDir: *data, Logger: log,
		Engine: eng, StorageDevice: appwritetest.StorageDevice(*device), RateLimits: rl})
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		return err
	}
	hs := &http.Server{Handler: srv, ReadHeaderTimeout: 10 * time.Second}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("listening", "url", "http://"+ln.Addr().String()+"/v1", "project", *project, "data", *data, "engine", eng)
	select {
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return err
		}
	case <-ctx.Done():
	}
	// Shutdown order: stop accepting requests, finish those in flight, then flush state.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_ = hs.Shutdown(sctx)
	return srv.Close()
}
