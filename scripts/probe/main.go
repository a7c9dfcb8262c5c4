// Command probe reads Appwrite's version and Hermes's health and capabilities, and prints
// them (make probe). It sends no prompt, creates no session and touches no GPU. A
// successful probe is not an end-to-end test.
//
// Settings (environment, then .env): APPWRITE_ENDPOINT, APPWRITE_PROJECT_ID; HERMES_URL and
// HERMES_API_KEY (or HERMES_KEY_REF: env:NAME or file:/path) when a Hermes is used.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"privateassistant/hermes"
	"privateassistant/internal/dotenv"
	"privateassistant/keyref"
	"privateassistant/schema/provision"
)

func main() { os.Exit(run(os.Stdout)) }

func run(out io.Writer) int {
	_ = dotenv.Load(".env")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	code := 0
	ep, project := os.Getenv("APPWRITE_ENDPOINT"), os.Getenv("APPWRITE_PROJECT_ID")
	if ep == "" {
		fmt.Fprintln(out, "appwrite: APPWRITE_ENDPOINT is not set")
		code = 1
	} else if err := provision.CheckVersion(ctx, provision.Config{Endpoint: ep, ProjectID: project}); err != nil {
		fmt.Fprintln(out, "appwrite:", err)
		code = 1
	} else {
		fmt.Fprintf(out, "appwrite: %s is version %s\n", ep, provision.RequiredVersion)
	}
	hu := os.Getenv("HERMES_URL")
	if hu == "" {
		fmt.Fprintln(out, "hermes: HERMES_URL is not set (the direct harness needs none)")
		return code
	}
	key := os.Getenv("HERMES_API_KEY")
	if ref := os.Getenv("HERMES_KEY_REF"); key == "" && ref != "" {
		var err error
		if key, err = keyref.Resolve(ref); err != nil {
			fmt.Fprintln(out, "hermes:", err)
			return 1
		}
	}
	c := &hermes.Client{BaseURL: hu, APIKey: key}
	h, err := c.Health(ctx)
	if err != nil {
		fmt.Fprintln(out, "hermes: health:", err)
		return 1
	}
	version := h.Version
	if version == "" {
		version = "unknown (older than the version field)"
	}
	fmt.Fprintf(out, "hermes: %s status %s, version %s\n", hu, h.Status, version)
	caps, err := c.Capabilities(ctx)
	if err != nil {
		fmt.Fprintln(out, "hermes: capabilities:", err)
		return 1
	}
	id, _ := json.Marshal(caps.Idempotency())
	var flags []string
	for _, f := range []string{"run_submission", "run_status", "run_events_sse", "run_stop", "run_approval_response", "session_resources"} {
		flags = append(flags, fmt.Sprintf("%s=%v", f, caps.Has(f)))
	}
	fmt.Fprintf(out, "hermes: runs_idempotency %s\nhermes: %s\n", id, strings.Join(flags, " "))
	if err := caps.CheckRunnable(); err != nil {
		fmt.Fprintln(out, "hermes: NOT USABLE:", err)
		return 1
	}
	fmt.Fprintln(out, "hermes: usable (durable run idempotency)")
	return code
}
