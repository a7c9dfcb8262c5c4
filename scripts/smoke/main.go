// Command smoke checks a deployed Private Assistant end to end (`make smoke`): the web
// chat and the functions behind the proxy, Appwrite's version, a member's signed-in view
// (who am I, roles, devices, conversations), the agent's ops listener (alive, ready per
// dependency, metrics), and, only when asked, one prompt followed to its answer. It reads
// only unless PA_SMOKE_PROMPT=1.
//
// Settings (environment, then .env): PA_URL (the web origin; make dev's
// http://127.0.0.1:8080), APPWRITE_ENDPOINT and APPWRITE_PROJECT_ID (default PA_URL/v1 and
// privateassistant, as make dev), PA_SMOKE_EMAIL / PA_SMOKE_PASSWORD (a member's login),
// PA_SMOKE_OPS_URL (the agent's ops listener), PA_SMOKE_PROMPT=1.
//
// Against make dev: make smoke PA_SMOKE_EMAIL=demo@example.com PA_SMOKE_PASSWORD=<printed>
// PA_SMOKE_OPS_URL=<the printed asynqmon origin>.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"time"

	"privateassistant/internal/dotenv"
)

func main() {
	if err := dotenv.Load(".env"); err != nil {
		fmt.Fprintln(os.Stderr, "smoke:", err)
		os.Exit(2)
	}
	cfg := Config{WebURL: os.Getenv("PA_URL"), Endpoint: os.Getenv("APPWRITE_ENDPOINT"), Project: os.Getenv("APPWRITE_PROJECT_ID"),
		Email: os.Getenv("PA_SMOKE_EMAIL"), Password: os.Getenv("PA_SMOKE_PASSWORD"), OpsURL: os.Getenv("PA_SMOKE_OPS_URL"),
		Prompt: os.Getenv("PA_SMOKE_PROMPT") == "1", WantWeb: true}
	if cfg.WebURL == "" {
		cfg.WebURL = "http://127.0.0.1:8080"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	os.Exit(report(os.Stdout, cfg.WebURL, Run(ctx, cfg)))
}

// report prints one line per check and returns the exit code (1 when any failed).
func report(w io.Writer, target string, rs []Result) int {
	fmt.Fprintf(w, "smoke test of %s\n", target)
	failed := 0
	for _, r := range rs {
		line := fmt.Sprintf("%-4s %s", r.Status, r.Name)
		if r.Detail != "" {
			line += " — " + r.Detail
		}
		fmt.Fprintln(w, line)
		if r.Status == "FAIL" {
			failed++
		}
	}
	if failed > 0 {
		fmt.Fprintf(w, "%d check(s) failed\n", failed)
		return 1
	}
	fmt.Fprintln(w, "all checks passed")
	return 0
}
