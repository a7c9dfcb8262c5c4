package executor

import (
	"context"
	"strconv"
	"time"

	"privateassistant/agent/harness"
	"privateassistant/queue"
)

// gatewayUsageKey is where the agent's inference gateway keeps a run's usage: token
// totals over every request of the run, and the model that last answered (agent/gateway
// UsageKey and RedisSink; TestRunRecordCarriesGatewayUsage checks the two agree). Not
// imported: the gateway brings the GPU manager with it.
func gatewayUsageKey(run string) string { return queue.GatewayUsageKey(run) }

// runUsage is what a run record's usage holds (JSON, at most schema's 1024 characters):
// the tokens, and when the run went through the gateway, the model actually served, the
// route alias, the device and how many requests were made.
type runUsage struct {
	InputTokens  int    `json:"inputTokens"`
	OutputTokens int    `json:"outputTokens"`
	TotalTokens  int    `json:"totalTokens"`
	Model        string `json:"model,omitempty"`
	Alias        string `json:"alias,omitempty"`
	Device       string `json:"device,omitempty"`
	Requests     int    `json:"requests,omitempty"`
	// Source says who counted: "gateway" (every request of the run, authoritative) or
	// "harness" (what the harness reported; no model).
	Source string `json:"source"`
}

// usageSettleWait bounds the wait for the gateway's unacknowledged records (each waits
// for one Redis round trip; a Redis that does not answer in this long fails them anyway).
const usageSettleWait = 10 * time.Second

// usage is the run's usage at its end: the gateway's record when the run made requests
// through it, else the harness's report (nil: neither). A Redis error falls back to the
// harness's report: usage never holds up the settlement.
func (a *attempt) usage(ctx context.Context, h *harness.Usage) *runUsage {
	var u *runUsage
	if h != nil {
		u = &runUsage{InputTokens: h.InputTokens, OutputTokens: h.OutputTokens, TotalTokens: h.TotalTokens, Source: "harness"}
	}
	if a.e.RDB == nil {
		return u
	}
	if a.e.UsageSettled != nil {
		sctx, cancel := context.WithTimeout(ctx, usageSettleWait)
		err := a.e.UsageSettled(sctx, a.runID)
		cancel()
		if err != nil {
			a.e.log().Warn("the run's gateway usage is read before the gateway's last records were acknowledged", "run", a.runID, "err", err)
		}
	}
	m, err := a.e.RDB.HGetAll(ctx, gatewayUsageKey(a.runID)).Result()
	if err != nil {
		a.e.log().Warn("the run's gateway usage could not be read", "run", a.runID, "err", err)
		return u
	}
	num := func(k string) int { n, _ := strconv.Atoi(m[k]); return n }
	if num("requests") <= 0 {
		return u
	}
	g := &runUsage{InputTokens: num("promptTokens"), OutputTokens: num("completionTokens"),
		Model: truncate(m["effectiveModel"], 200), Alias: truncate(m["alias"], 64),
		Device: truncate(m["device"], 64), Requests: num("requests"), Source: "gateway"}
	g.TotalTokens = g.InputTokens + g.OutputTokens
	return g
}

// json is u as the record holds it, within the attribute's size whatever the names are.
func (u *runUsage) json() string {
	s, _ := jsonString(u)
	if len(s) > usageSize {
		short := *u
		short.Model, short.Alias, short.Device = truncate(u.Model, 40), "", ""
		s, _ = jsonString(&short)
	}
	return s
}

// usageSize is the run record's usage attribute size (schema/model.go).
const usageSize = 1024
