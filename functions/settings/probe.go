package settings

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"time"

	"privateassistant/hermes"
	"privateassistant/schema"
)

// ProbeHarness checks a harness's capabilities with the key already resolved: a direct
// profile answers GET /models; a Hermes profile answers /health (its version),
// /v1/capabilities (durable runs idempotency, run events, stop and approval) and, when it
// lists them, /v1/toolsets. The admin function probes a direct profile with it; the agent,
// which holds every key (env: and file:), probes the Hermes profiles an admin asked it to
// validate (agent/validator). Failures are a Probe with a Reason, never an error.
func ProbeHarness(ctx context.Context, hc *http.Client, p *schema.HarnessProfile, key string) Probe {
	if hc == nil {
		hc = http.DefaultClient
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if p.Kind == "direct" {
		req, err := http.NewRequestWithContext(ctx, "GET", strings.TrimRight(p.BaseURL, "/")+"/models", nil)
		if err != nil {
			return Probe{Reason: "bad base URL: " + err.Error()}
		}
		if key != "" {
			req.Header.Set("Authorization", "Bearer "+key)
		}
		resp, err := hc.Do(req)
		if err != nil {
			return Probe{Reason: "unreachable: " + err.Error()}
		}
		resp.Body.Close()
		if resp.StatusCode != 200 {
			return Probe{Reason: "GET /models answered " + strconv.Itoa(resp.StatusCode)}
		}
		return Probe{Verified: true}
	}
	c := &hermes.Client{BaseURL: p.BaseURL, APIKey: key, HTTP: hc}
	h, err := c.Health(ctx)
	if err != nil {
		return Probe{Reason: "health: " + err.Error()}
	}
	caps, err := c.Capabilities(ctx)
	if err != nil {
		return Probe{Version: h.Version, Reason: "capabilities: " + err.Error()}
	}
	sum := map[string]any{"runs_idempotency": caps.Idempotency(), "run_events_sse": caps.Has("run_events_sse"),
		"run_stop": caps.Has("run_stop"), "run_approval_response": caps.Has("run_approval_response"), "platform": caps.Platform}
	if ts, err := c.Toolsets(ctx); err == nil {
		// What the profile offers a run's model; settings checks it against the roles'
		// tool policy (unknown when this Hermes does not list its toolsets).
		sum["toolsets"] = hermes.EnabledToolsets(ts)
	}
	summary, _ := json.Marshal(sum)
	pr := Probe{Version: h.Version, Capabilities: string(summary), Verified: true}
	if err := caps.CheckRunnable(); err != nil {
		pr.Verified, pr.Reason = false, err.Error()
	}
	return pr
}
