// Package readiness is the model of readiness per component that the agent's and the
// stream service's /readyz, pa_component_ready and the admin's /api/system share: each
// component (Appwrite, Redis, the stream service, each Hermes, the gateway, each model
// server, each device's telemetry, each queue's consumers) is ready, idle (not a failure),
// unknown (it reads through another that fails) or failing, with a sentence a person can
// act on.
package readiness

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"sync"
)

// Kind is a kind of component: each has an alert rule (deploy/prometheus/alerts.yml, on
// pa_component_ready{kind=...}) and a sentence saying what to do when it fails.
type Kind string

// Readiness kinds: one per kind of component /readyz and /api/system report.
const (
	KindAppwrite       Kind = "appwrite"
	KindRedis          Kind = "redis"
	KindStream         Kind = "stream"          // the stream service (stream/cmd/pa-stream), by its Redis heartbeat
	KindHermes         Kind = "hermes"          // each Hermes the agent drives: shared profiles and members' homes
	KindGateway        Kind = "gateway"         // the agent's inference gateway
	KindModelServer    Kind = "model_server"    // each managed device's model server
	KindGPUTelemetry   Kind = "gpu_telemetry"   // each managed device's telemetry source
	KindQueueConsumers Kind = "queue_consumers" // each device queue's asynq servers (their heartbeats)
)

// KindAgent is a resident agent as /api/system sees it: its readiness report in Redis is
// fresh, or it stopped reporting without saying goodbye. Not in Kinds: the agent does not
// report itself (its alert is PrivateAssistantAgentDown, on up).
const KindAgent Kind = "agent"

// HermesHomes is the component saying whether members' Hermes can start (the agent runs
// each member's own Hermes, PA_AGENT_HERMES_HOMES): it is there before any member has run.
const HermesHomes = "hermes:homes"

// Kinds lists every readiness kind.
var Kinds = []Kind{KindAppwrite, KindRedis, KindStream, KindHermes, KindGateway, KindModelServer, KindGPUTelemetry, KindQueueConsumers}

// State is a component's state. Idle is not a failure: a member's Hermes stopped after being unused,
// a device with no model loaded.
// Unknown is a component whose check needs another that fails (e.g. the stream service's
// heartbeat, read from a Redis that does not answer): the other one is reported, this one
// cannot be judged.
type State string

// The states.
const (
	StateReady   State = "ready"
	StateIdle    State = "idle"
	StateUnknown State = "unknown"
	StateFailing State = "failing"
)

// UnmarshalText accepts only the four states (an agent's report read back from Redis).
func (s *State) UnmarshalText(b []byte) error {
	switch st := State(b); st {
	case StateReady, StateIdle, StateUnknown, StateFailing:
		*s = st
		return nil
	}
	return fmt.Errorf("readiness: unknown state %q", b)
}

// Component is one component's readiness as /readyz and /api/system show it.
type Component struct {
	Name    string `json:"name"`             // e.g. "redis", "hermes:member:<id>", "model_server:arc", "queue:gpu:arc"
	Kind    Kind   `json:"kind"`             // one of Kinds (or KindAgent)
	State   State  `json:"state"`            // ready | idle | unknown | failing
	Message string `json:"message"`          // a sentence a person can act on
	Error   string `json:"error,omitempty"`  // the cause, when failing
	Detail  string `json:"detail,omitempty"` // what was seen when not failing (e.g. a heartbeat's age)
}

// Failing reports whether the component is failing.
func (c Component) Failing() bool { return c.State == StateFailing }

// Idle marks a check's answer as idle rather than failing (errors.As).
type Idle struct{ Why string }

func (i Idle) Error() string { return i.Why }

// Healthy is a check's answer for a ready component with something to say (errors.As).
type Healthy struct{ Detail string }

func (h Healthy) Error() string { return h.Detail }

// Check is one readiness probe: nil, Idle or Healthy when the component is not failing.
type Check func(ctx context.Context) error

// Probe is one component: its kind and its check (nil error, Idle or Healthy: not failing).
// Needs names a component the check reads through (e.g. "redis"): while that one fails,
// this one's failure reads as unknown.
type Probe struct {
	Kind  Kind
	Check Check
	Needs string
}

// Evaluate runs every probe at once (each bounded by ctx) and returns the components
// sorted by kind, then name.
func Evaluate(ctx context.Context, probes map[string]Probe) []Component {
	out := make([]Component, 0, len(probes))
	var mu sync.Mutex
	var wg sync.WaitGroup
	for name, p := range probes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := Judge(name, p.Kind, p.Check(ctx))
			mu.Lock()
			out = append(out, c)
			mu.Unlock()
		}()
	}
	wg.Wait()
	failing := map[string]Component{}
	for _, c := range out {
		if c.Failing() {
			failing[c.Name] = c
		}
	}
	for i, c := range out {
		if dep, ok := failing[probes[c.Name].Needs]; ok && c.Failing() {
			out[i].State = StateUnknown
			out[i].Message = fmt.Sprintf("%s cannot be checked while %s is failing (%s).", subject(c), lowerThe(subject(dep)), c.Error)
		}
	}
	Sort(out)
	return out
}

// Sort orders components by kind (in Kinds order), then name.
func Sort(cs []Component) {
	rank := map[Kind]int{KindAgent: -1}
	for i, k := range Kinds {
		rank[k] = i
	}
	sort.Slice(cs, func(i, j int) bool {
		if cs[i].Kind != cs[j].Kind {
			return rank[cs[i].Kind] < rank[cs[j].Kind]
		}
		return cs[i].Name < cs[j].Name
	})
}

// Judge turns a check's answer into a component with its sentence.
func Judge(name string, kind Kind, err error) Component {
	c := Component{Name: name, Kind: kind, State: StateReady}
	var idle Idle
	var healthy Healthy
	switch {
	case err == nil:
	case errors.As(err, &idle):
		c.State, c.Detail = StateIdle, idle.Why
	case errors.As(err, &healthy):
		c.Detail = healthy.Detail
	default:
		c.State, c.Error = StateFailing, err.Error()
	}
	c.Message = sentence(c)
	return c
}

// subject names a component in a sentence.
func subject(c Component) string {
	_, what, _ := strings.Cut(c.Name, ":")
	switch c.Kind {
	case KindAgent:
		return "Agent " + what
	case KindAppwrite:
		return "Appwrite"
	case KindRedis:
		return "The queue Redis"
	case KindStream:
		return "The stream service"
	case KindHermes:
		if c.Name == HermesHomes {
			return "Starting members' Hermes"
		}
		if m, ok := strings.CutPrefix(what, "member:"); ok {
			return "Member " + m + "'s Hermes"
		}
		return "Hermes " + what
	case KindGateway:
		return "The inference gateway"
	case KindModelServer:
		if p, ok := strings.CutPrefix(what, "profile:"); ok {
			return "The model server of harness profile " + p
		}
		return "The model server of GPU " + what
	case KindGPUTelemetry:
		return "GPU telemetry of " + what
	case KindQueueConsumers:
		return "The consumers of queue " + what
	}
	return c.Name
}

func lowerThe(s string) string {
	if rest, ok := strings.CutPrefix(s, "The "); ok {
		return "the " + rest
	}
	return s
}

// advice is what to do about a failing kind.
var advice = map[Kind]string{
	KindAgent:          "its devices' queues are not served and its components are not known; check systemctl status privateassistant-agent on its host.",
	KindAppwrite:       "nothing can be admitted, settled or read; check Appwrite's containers (docker compose ps) and its logs.",
	KindRedis:          "runs cannot be queued, followed or cancelled; check systemctl status privateassistant-redis and the agent's PA_REDIS_* settings.",
	KindStream:         "live views, the change feed and downloads stop; check systemctl status privateassistant-stream.",
	KindHermes:         "runs on it fail or wait; check the Hermes process and its log (a member's Hermes starts again on their next run).",
	KindGateway:        "Hermes cannot reach any model; check the agent's log and PA_GATEWAY_ADDR.",
	KindModelServer:    "runs on this device wait or fail; check the model server process (llama-server, Ollama) and the agent's log.",
	KindGPUTelemetry:   "swaps cannot verify memory and the device may go unknown; check the card's sysfs files (or the device-report command) and the driver.",
	KindQueueConsumers: "its runs stay queued; check that an agent serving the queue runs (systemctl status privateassistant-agent) and reaches Redis.",
}

func sentence(c Component) string {
	s, is := subject(c), "is"
	if c.Kind == KindQueueConsumers {
		is = "are"
	}
	what := advice[c.Kind]
	if c.Name == HermesHomes {
		what = "members' runs cannot start their Hermes; check PA_AGENT_HERMES_VENV (scripts/hermes/install.sh), PA_AGENT_HERMES_CONFIG and the .env beside it, bubblewrap, and PA_AGENT_HERMES_HOMES."
	}
	switch c.State {
	case StateFailing:
		return fmt.Sprintf("%s %s failing (%s): %s", s, is, c.Error, what)
	case StateIdle:
		return fmt.Sprintf("%s %s idle (%s); that is not a failure.", s, is, c.Detail)
	}
	if c.Detail != "" {
		return fmt.Sprintf("%s %s ready (%s).", s, is, c.Detail)
	}
	return fmt.Sprintf("%s %s ready.", s, is)
}

// Summary is the readiness in words: which components fail, or that all are ready.
func Summary(cs []Component) string {
	var bad []string
	for _, c := range cs {
		if c.Failing() {
			bad = append(bad, c.Message)
		}
	}
	if len(bad) == 0 {
		return fmt.Sprintf("All %d components are ready.", len(cs))
	}
	return fmt.Sprintf("%d of %d components failing. %s", len(bad), len(cs), strings.Join(bad, " "))
}

// Ready reports whether no component fails.
func Ready(cs []Component) bool {
	for _, c := range cs {
		if c.Failing() {
			return false
		}
	}
	return true
}

// ReadyBody is /readyz's answer (and an agent's report in Redis): ready, the components, the failing ones
// in words (summary), and checks (name → "ok", "idle: why", "unknown: cause" or
// "error: cause").
type ReadyBody struct {
	Ready      bool              `json:"ready"`
	Summary    string            `json:"summary"`
	Components []Component       `json:"components"`
	Checks     map[string]string `json:"checks"`
}

// Body builds /readyz's answer from components.
func Body(cs []Component) ReadyBody {
	checks := map[string]string{}
	for _, c := range cs {
		switch c.State {
		case StateFailing:
			checks[c.Name] = "error: " + c.Error
		case StateIdle:
			checks[c.Name] = "idle: " + c.Detail
		case StateUnknown:
			checks[c.Name] = "unknown: " + c.Error
		default:
			checks[c.Name] = "ok"
		}
	}
	return ReadyBody{Ready: Ready(cs), Summary: Summary(cs), Components: cs, Checks: checks}
}
