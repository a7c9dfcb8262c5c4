package main

import (
	"context"
	"encoding/json"
	"fmt"
	"time"
)

// qualifyPoll is how often pa admin gpu qualify -wait asks for the progress.
var qualifyPoll = 2 * time.Second

// waitQualification polls a route's qualification until its request ends (passed, failed
// or error) or wait passes, printing each change of state or reason; the verdict decides
// the exit status (a failed qualification is an error naming the reasons).
func (c *cli) waitQualification(ctx context.Context, route string, wait time.Duration, asJSON bool) error {
	ctx, cancel := context.WithTimeout(ctx, wait)
	defer cancel()
	last := ""
	for {
		b, err := c.call(ctx, "GET", apiPath("/api/model-routes/{}/qualification", route), nil)
		if err != nil {
			return err
		}
		var v struct {
			Qualified bool
			Reason    string
			Summary   string
			Request   map[string]string
		}
		if err := json.Unmarshal(b, &v); err != nil {
			return fmt.Errorf("admin gpu qualify: unreadable answer: %w", err)
		}
		st := v.Request["state"]
		if line := st + ": " + v.Request["reason"]; line != last && !asJSON {
			fmt.Fprintln(c.out, line)
			last = line
		}
		switch st {
		case "passed", "failed", "error":
			if asJSON {
				fmt.Fprintln(c.out, string(b))
			}
			if st != "passed" {
				return fail(1, "route %s did not qualify: %s", route, v.Request["reason"])
			}
			return nil
		}
		select {
		case <-ctx.Done():
			return fail(1, "route %s: no verdict within %s (the qualification goes on; pa admin gpu qualification %s)", route, wait, route)
		case <-time.After(qualifyPoll):
		}
	}
}
