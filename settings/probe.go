package settings

import (
	"context"
	"encoding/json"
	"errors"
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
	if p.Kind == "direct" {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		defer cancel()
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
	// Real Hermes enumerates its toolsets in Python on the first call: seconds on a busy
	// host, so the three calls get 30 s together (the agent validates; no function
	// deadline applies).
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	c := &hermes.Client{BaseURL: p.BaseURL, APIKey: key, HTTP: hc}
	h, err := c.Health(ctx)
	if err != nil {
		return Probe{Reason: "health: " + err.Error()}
	}
	caps, err := c.Capabilities(ctx)
	if err != nil {
		return Probe{Version: h.Version, Reason: "capabilities: " + err.Error()}
	}
	sum := caps.Summary()
	// What the profile offers a run's model; settings checks it against the roles' tool
	// policy. Unknown only when this Hermes has no /v1/toolsets (404); any other failure
	// leaves the profile unverified, since what it offers could not be checked.
	ts, err := c.Toolsets(ctx)
	switch {
	case err == nil:
		sum["toolsets"] = hermes.EnabledToolsets(ts)
	case !errors.Is(err, hermes.ErrNotFound):
		return Probe{Version: h.Version, Reason: "toolsets: " + err.Error()}
	}
	summary, _ := json.Marshal(sum)
	pr := Probe{Version: h.Version, Capabilities: string(summary), Verified: true}
	if err := caps.CheckRunnable(); err != nil {
		pr.Verified, pr.Reason = false, err.Error()
	}
	return pr
}
