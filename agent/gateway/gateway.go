// Package gateway is the agent's OpenAI-compatible inference endpoint (/v1/models,
// /v1/chat/completions, streaming and not, tools passed through). Hermes and the direct
// harness talk to it, never to a model server. Every chat completion names its run
// (/runs/{id}/v1/…, X-PA-Run, or the model "<alias>@<run>"); one naming no run, or a run
// without bindings, is refused (403, binding.go). The request is served on the route
// revision the run is pinned to (its bindings), never the latest, mapped to the device and
// model, and only under that run's own live grant at the current generation (the GPU
// manager's fence, gpu.Manager.Serve: 409 stale_generation once it was revoked or
// expired, 409 route_not_leased when the run holds none), so a request is never silently
// served by another model or a cloud fallback. A request in flight when its run's grant
// is revoked is cut. It injects the upstream credential (callers never see it), checks
// its own API key, and records usage and the model that actually answered, per run. It
// is also where a run's tool policy is enforced: tools outside it are removed from every
// request and an answer calling one is refused (policy.go).
package gateway

import (
	"bufio"
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/agent/gpu"
	"privateassistant/agent/memberkey"
	"privateassistant/queue"
	"privateassistant/runconfig"
)

// Route is an alias callers name as "model".
type Route struct {
	Alias  string
	Device string // the managed device serving it (local routes)
	Model  string // the model the backend knows
	// Budget is the route's measured context budget, reported as context_length.
	Budget int64
	// Revision is the route revision (a run's pinned one, Gateway.Pinned).
	Revision int64
	// Remote routes go to Endpoint with Key, and only when Enabled: never a fallback.
	Remote   bool
	Enabled  bool
	Endpoint string
	Key      string
}

// Fence admits one request on a managed device (gpu.Manager): the endpoint and the lease
// generation it is served under, or gpu.ErrNotLeased / gpu.ErrStaleGeneration. run is the
// run the request names ("" for none); gen > 0 is the generation the caller says it holds.
type Fence interface {
	Serve(run, model string, gen int64) (gpu.Serving, error)
}

var _ Fence = (*gpu.Manager)(nil)

// Usage is one answered request.
type Usage struct {
	Run              string
	Alias            string
	Device           string
	Generation       int64
	EffectiveModel   string // the model the upstream said answered
	PromptTokens     int64
	CompletionTokens int64
	Stream           bool
	Status           int
	Duration         time.Duration
	// RefusedTool names the tool outside the run's policy the answer called (the answer
	// was refused, policy.go); "" otherwise.
	RefusedTool string
}

// Sink records usage (the agent appends it to the run's record).
type Sink interface {
	Record(ctx context.Context, u Usage)
}

// Gateway serves the OpenAI-compatible API.
type Gateway struct {
	APIKey  string
	Routes  func() map[string]Route
	Devices map[string]Fence
	// UpstreamKey returns the credential for a local device's backend ("" for none).
	UpstreamKey func(device string) string
	Usage       Sink
	Log         *slog.Logger
	Client      *http.Client
	MaxBody     int64 // default 16 MiB
	// Tools returns the effective tool policy of the run a request names (policy.go); a
	// nil Tools allows no tool. ErrUnknownRun refuses the request (403 unknown_run), any
	// other error too (503 policy_unavailable): the gateway never serves without the policy.
	Tools func(ctx context.Context, run string) (runconfig.ToolPolicy, error)
	// Pinned, when set, returns the route revision the run a request names is pinned to
	// (its bindings): the request is served on that revision, never the latest, and a run
	// without bindings is refused (binding.go). Unset (tests of other concerns), the
	// request's alias is looked up in Routes.
	Pinned Pinned
	// ToolCalls, when set, learns the tool calls of every answer served for a run that the
	// policy let through, before the harness receives the answer's end (toolcalls.go).
	ToolCalls CallSink
	// Owner, when set, names the member a run belongs to (its bindings). With it the
	// gateway also accepts a member key (agent/memberkey: a member's own Hermes holds
	// that, never APIKey), for runs of that member only: another member's run answers
	// exactly as a missing one. Nil: member keys are refused.
	Owner func(ctx context.Context, run string) (string, error)
}

const runHeader = "X-PA-Run"

// GenerationHeader carries the lease generation the caller holds. Without it the gateway
// still checks the generation of the grant the request is served under (the run's own
// grant when the request names a run).
const GenerationHeader = "X-PA-Lease-Generation"

func (g *Gateway) log() *slog.Logger {
	if g.Log != nil {
		return g.Log
	}
	return slog.Default()
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(map[string]any{"error": map[string]any{"code": code, "type": code, "message": msg}})
}

// ServeHTTP routes /v1/models and /v1/chat/completions (also under /runs/{run}/v1/… so a
// harness configured per run carries its run id in the base URL).
func (g *Gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	path := r.URL.Path
	run := r.Header.Get(runHeader)
	if rest, ok := strings.CutPrefix(path, "/runs/"); ok {
		id, tail, found := strings.Cut(rest, "/")
		if !found || id == "" {
			writeErr(w, 404, "not_found", "unknown path")
			return
		}
		run, path = id, "/"+tail
	}
	member, ok := g.authorized(r)
	if !ok {
		writeErr(w, 401, "invalid_api_key", "the gateway's API key is required as a Bearer token")
		return
	}
	switch {
	case r.Method == "GET" && (path == "/v1/models" || path == "/models"):
		g.models(w)
	case r.Method == "POST" && (path == "/v1/chat/completions" || path == "/chat/completions"):
		g.chat(w, r, run, member)
	default:
		writeErr(w, 404, "not_found", "the gateway serves GET /v1/models and POST /v1/chat/completions")
	}
}

// authorized checks the Bearer key: the gateway's own (member ""), or, with Owner set, a
// member key (the member it names).
func (g *Gateway) authorized(r *http.Request) (member string, ok bool) {
	if g.APIKey == "" {
		return "", false // a gateway without a key refuses everything
	}
	got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	if !ok {
		return "", false
	}
	if subtle.ConstantTimeCompare([]byte(got), []byte(g.APIKey)) == 1 {
		return "", true
	}
	if g.Owner == nil {
		return "", false
	}
	return memberkey.Owner(g.APIKey, got)
}

func (g *Gateway) models(w http.ResponseWriter) {
	routes := g.Routes()
	names := make([]string, 0, len(routes))
	for a, rt := range routes {
		if rt.Remote && !rt.Enabled {
			continue
		}
		names = append(names, a)
	}
	// Longest alias first: Hermes looks a run's model ("<alias>@<run>") up in this list by
	// exact id, then by the first id the model contains (agent/model_metadata.py
	// _resolve_endpoint_context_length), so "chat-v2@r1" must meet chat-v2 before chat to
	// get chat-v2's context budget.
	sort.Slice(names, func(i, j int) bool {
		if len(names[i]) != len(names[j]) {
			return len(names[i]) > len(names[j])
		}
		return names[i] < names[j]
	})
	data := []any{}
	for _, a := range names {
		rt := routes[a]
		data = append(data, map[string]any{"id": a, "object": "model", "created": 0, "owned_by": "private-assistant",
			"context_length": rt.Budget, "meta": map[string]any{"n_ctx_train": rt.Budget}})
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"object": "list", "data": data})
}

func (g *Gateway) chat(w http.ResponseWriter, r *http.Request, run, member string) {
	start := time.Now()
	max := g.MaxBody
	if max == 0 {
		max = 16 << 20
	}
	raw, err := io.ReadAll(io.LimitReader(r.Body, max+1))
	if err != nil {
		writeErr(w, 400, "invalid_request", "could not read the request body")
		return
	}
	if int64(len(raw)) > max {
		writeErr(w, 413, "request_too_large", fmt.Sprintf("the request body exceeds %d bytes", max))
		return
	}
	// Validated whole (validJSON, json.Valid's fast path), then only its top-level members
	// are found (body.go): the messages are never decoded.
	if !validJSON(raw) && !json.Valid(raw) {
		var v any
		err := json.Unmarshal(raw, &v)
		writeErr(w, 400, "invalid_request", fmt.Sprintf("the body is not a JSON object: %v", err))
		return
	}
	body, isObject := objectMembers(raw)
	if !isObject {
		writeErr(w, 400, "invalid_request", "the body is not a JSON object")
		return
	}
	var alias string
	if err := json.Unmarshal(body["model"], &alias); err != nil || alias == "" {
		writeErr(w, 400, "invalid_request", `"model" (a route alias) is required`)
		return
	}
	var stream bool
	_ = json.Unmarshal(body["stream"], &stream)
	if _, whole := g.Routes()[alias]; !whole {
		// "<alias>@<run>": a Hermes run naming itself through its model (policy.go).
		if a, tagged := splitRunModel(alias); tagged != "" {
			if run != "" && run != tagged {
				writeErr(w, 400, "invalid_request", "the model names another run than the request")
				return
			}
			alias, run = a, tagged
		}
	}
	// The run's binding: no run, or a run without bindings, is refused; the route is the
	// revision the run is pinned to (binding.go).
	bnd, refused := g.bind(r.Context(), run, alias)
	if refused == nil && member != "" {
		refused = g.memberRun(r.Context(), run, member)
	}
	if refused != nil {
		g.log().Warn("gateway refused a request without a valid run binding", "run", run, "route", alias, "code", refused.code, "err", refused.err)
		refused.write(w)
		return
	}
	rt, pol := bnd.route, bnd.pol
	if removed := restrictTools(body, pol); len(removed) > 0 {
		g.log().Info("gateway removed tools outside the run's policy", "run", run, "route", alias, "removed", removed)
	}
	endpoint, key, device := "", "", rt.Device
	var gen int64
	var revoked <-chan struct{}
	switch {
	case rt.Remote && !rt.Enabled:
		g.log().Warn("gateway refused a disabled remote route", "route", alias, "run", run)
		writeErr(w, 409, "route_disabled", fmt.Sprintf("route %q is remote and not enabled", alias))
		return
	case rt.Remote:
		endpoint, key, device = rt.Endpoint, rt.Key, "remote"
	default:
		dev := g.Devices[rt.Device]
		if dev == nil {
			writeErr(w, 409, "route_not_leased", fmt.Sprintf("route %q names device %q, which this agent does not manage", alias, rt.Device))
			return
		}
		var held int64
		if h := r.Header.Get(GenerationHeader); h != "" {
			v, err := strconv.ParseInt(h, 10, 64)
			if err != nil || v <= 0 {
				writeErr(w, 400, "invalid_request", GenerationHeader+" must be a positive integer")
				return
			}
			held = v
		}
		// Every request passes the fence: the run's own grant (or, for a request naming no
		// run, a live grant on the model) at the device's current generation.
		sv, err := dev.Serve(run, rt.Model, held)
		switch {
		case errors.Is(err, gpu.ErrStaleGeneration):
			g.log().Warn("gateway refused a stale generation", "route", alias, "run", run, "err", err)
			writeErr(w, 409, "stale_generation", fmt.Sprintf("route %q: %v", alias, err))
			return
		case err != nil:
			g.log().Warn("gateway refused an unleased route", "route", alias, "device", rt.Device, "model", rt.Model, "run", run, "err", err)
			writeErr(w, 409, "route_not_leased", fmt.Sprintf("no lease covers route %q (%s on %s) right now; the run must hold the device before it calls the model (%v)", alias, rt.Model, rt.Device, err))
			return
		}
		endpoint, gen, revoked = sv.Endpoint, sv.Generation, sv.Done
		if g.UpstreamKey != nil {
			key = g.UpstreamKey(rt.Device)
		}
	}
	m, _ := json.Marshal(rt.Model)
	body["model"] = m
	if stream {
		// Usage arrives in the final chunk only when asked for.
		body["stream_options"] = json.RawMessage(`{"include_usage":true}`)
	}
	out := encodeBody(body)
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	if revoked != nil {
		// The run's grant taken back mid-request (swap past the drain bound, crash, lost
		// control, expiry) cuts the upstream call: nothing is served under a stale grant.
		// The goroutine ends with the request (the deferred cancel).
		go func() {
			select {
			case <-revoked:
				cancel()
			case <-ctx.Done():
			}
		}()
	}
	req, err := http.NewRequestWithContext(ctx, "POST", strings.TrimRight(endpoint, "/")+"/chat/completions", bytes.NewReader(out))
	if err != nil {
		writeErr(w, 502, "upstream_error", "bad upstream endpoint")
		return
	}
	req.Header.Set("Content-Type", "application/json")
	// A model server may close a kept-alive connection just as a request is sent on it
	// (llama-server does, under load): the request then fails with nothing answered. Marked
	// replayable (the key is not sent: an empty value), the transport sends it again on a
	// new connection, but only when the server answered nothing on a reused connection; a
	// local completion has no effect beyond its answer, so sending it twice is safe. A
	// remote route is not marked: a provider that worked on the request before the
	// connection dropped would bill it twice.
	if !rt.Remote {
		req.Header["X-Idempotency-Key"] = nil
	}
	if stream {
		req.Header.Set("Accept", "text/event-stream")
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	client := g.Client
	if client == nil {
		client = upstreamClient
	}
	resp, err := client.Do(req)
	if err != nil {
		msg := redact(err.Error(), key)
		g.log().Warn("gateway upstream failed", "route", alias, "run", run, "err", msg)
		writeErr(w, 502, "upstream_unavailable", "the model server did not answer: "+msg)
		return
	}
	defer resp.Body.Close()
	u := Usage{Run: run, Alias: alias, Device: device, Generation: gen, Stream: stream, Status: resp.StatusCode}
	for _, h := range []string{"Content-Type", "Cache-Control"} {
		if v := resp.Header.Get(h); v != "" {
			w.Header().Set(h, v)
		}
	}
	// Usage is made durable before the answer's end reaches the caller (the usage chunk
	// and [DONE] of a stream, the body of an answer), so a run that ends when its last
	// answer does finds every request counted when its record is written.
	recorded := false
	durable := func() {
		if recorded {
			return
		}
		recorded = true
		u.Duration = time.Since(start)
		if g.Usage != nil {
			g.Usage.Record(context.WithoutCancel(r.Context()), u)
		}
	}
	defer durable() // a stream that broke before its end
	if stream && strings.HasPrefix(resp.Header.Get("Content-Type"), "text/event-stream") {
		w.WriteHeader(resp.StatusCode)
		g.pipe(r.Context(), w, resp.Body, key, &u, pol, run, durable)
	} else {
		b, _ := io.ReadAll(resp.Body)
		if key != "" && bytes.Contains(b, []byte(key)) {
			b = []byte(redact(string(b), key))
		}
		if tool := forbiddenCall(b, pol); tool != "" && resp.StatusCode == 200 {
			g.log().Warn("gateway refused an answer calling a tool outside the run's policy", "run", run, "route", alias, "tool", tool)
			b, u.RefusedTool = refusedCompletion(b, tool, run), tool
		} else if resp.StatusCode == 200 && g.ToolCalls != nil && run != "" && bytes.Contains(b, []byte(`"tool_calls"`)) {
			g.reportCalls(r.Context(), run, answerCalls(b))
		}
		// The model and usage members only (the answer's text is not decoded).
		if ans, ok := objectMembers(b); ok {
			var model string
			if json.Unmarshal(ans["model"], &model) == nil {
				u.EffectiveModel = model
			}
			var us usage
			if raw := ans["usage"]; raw != nil && json.Unmarshal(raw, &us) == nil {
				u.PromptTokens, u.CompletionTokens = us.Prompt, us.Completion
			}
		}
		durable()
		w.Header().Set("Content-Length", strconv.Itoa(len(b)))
		w.WriteHeader(resp.StatusCode)
		_, _ = w.Write(b)
	}
}

type usage struct {
	Prompt     int64 `json:"prompt_tokens"`
	Completion int64 `json:"completion_tokens"`
}

// pipeStream forwards SSE lines as they come and reads the model and usage from the
// chunks on the way. Each chunk is checked against the run's policy before it is
// forwarded; a cheap byte scan decides which chunks need decoding (most carry one
// token of text and no tool call, finish reason, usage or new model, and are passed
// through as they are). An event is flushed once it is complete, unless the next whole
// event has already arrived (then both go out together): nothing complete ever waits on
// a read from the upstream.
func (g *Gateway) pipeStream(ctx context.Context, w http.ResponseWriter, body io.Reader, key string, u *Usage, pol runconfig.ToolPolicy, run string) {
	g.pipe(ctx, w, body, key, u, pol, run, nil)
}

// pipe is pipeStream calling durable (when set) before it writes what ends the answer
// for the caller: the chunk carrying usage, [DONE], or a refusal.
func (g *Gateway) pipe(ctx context.Context, w http.ResponseWriter, body io.Reader, key string, u *Usage, pol runconfig.ToolPolicy, run string, durable func()) {
	if durable == nil {
		durable = func() {}
	}
	fl, _ := w.(http.Flusher)
	br := streamReaders.Get().(*bufio.Reader)
	br.Reset(body)
	defer func() { br.Reset(nil); streamReaders.Put(br) }()
	var acc callAcc          // the answer's tool calls, reported before the chunk that ends it
	var long []byte          // a line longer than br's buffer, joined
	var sameModel modelMatch // the chunks' model once read: its chunks need no decoding for it
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			long = append(long[:0], line...)
			for errors.Is(err, bufio.ErrBufferFull) {
				line, err = br.ReadSlice('\n')
				long = append(long, line...)
			}
			line = long
		}
		if len(line) > 0 {
			if key != "" && bytes.Contains(line, []byte(key)) {
				line = []byte(redact(string(line), key))
			}
			if data, ok := bytes.CutPrefix(line, []byte("data:")); ok {
				if data = bytes.TrimSpace(data); bytes.HasPrefix(data, []byte("[DONE]")) {
					durable()
				} else {
					if tool := forbiddenCall(data, pol); tool != "" {
						// The chunk naming the tool is not forwarded: the answer ends with the
						// refusal instead, so the caller never holds a call it could execute.
						g.log().Warn("gateway refused a streamed answer calling a tool outside the run's policy", "run", run, "route", u.Alias, "tool", tool)
						u.RefusedTool = tool
						durable()
						_, _ = w.Write(refusalChunks(data, tool, run))
						if fl != nil {
							fl.Flush()
						}
						return
					}
					if g.ToolCalls != nil && !acc.done {
						if bytes.Contains(data, []byte(`"tool_calls"`)) {
							acc.add(data)
						}
						if mayFinish(data) && finished(data) {
							acc.done = true
							g.reportCalls(ctx, run, acc.list())
						}
					}
					if bytes.Contains(data, []byte(`"usage"`)) || !sameModel.in(data) {
						var c struct {
							Model string `json:"model"`
							Usage *usage `json:"usage"`
						}
						if json.Unmarshal(data, &c) == nil {
							if c.Model != "" {
								u.EffectiveModel = c.Model
								sameModel.set(c.Model)
							}
							if c.Usage != nil {
								u.PromptTokens, u.CompletionTokens = c.Usage.Prompt, c.Usage.Completion
								durable()
							}
						}
					}
				}
			}
			if _, werr := w.Write(line); werr != nil {
				return
			}
			if fl != nil && len(bytes.TrimSpace(line)) == 0 && !nextEventBuffered(br) {
				fl.Flush()
			}
		}
		if err != nil {
			if fl != nil {
				fl.Flush()
			}
			if !errors.Is(err, io.EOF) {
				u.Status = 599 // the upstream broke mid-stream
			} else if g.ToolCalls != nil && !acc.done {
				g.reportCalls(ctx, run, acc.list()) // an answer that ended without a finish_reason
			}
			return
		}
	}
}

// streamReaders are pipe's read buffers, reused from stream to stream (64 KB each: one
// allocation and zeroing per streamed answer otherwise).
var streamReaders = sync.Pool{New: func() any { return bufio.NewReaderSize(nil, 64<<10) }}

// nextEventBuffered reports whether br already holds the whole next SSE event (its
// blank line included), so a flush can wait until that event is written too.
func nextEventBuffered(br *bufio.Reader) bool {
	n := br.Buffered()
	if n == 0 {
		return false
	}
	p, _ := br.Peek(n)
	return bytes.Contains(p, []byte("\n\n")) || bytes.Contains(p, []byte("\n\r\n"))
}

// modelMatch recognises, without decoding, a chunk naming the model already read: it
// holds the model's "model" member as upstreams write it (compact, or with a space after
// the colon). A chunk naming another model, or none, is decoded.
type modelMatch struct{ compact, spaced []byte }

func (m *modelMatch) set(model string) {
	v, _ := json.Marshal(model)
	m.compact = append([]byte(`"model":`), v...)
	m.spaced = append([]byte(`"model": `), v...)
}

func (m *modelMatch) in(chunk []byte) bool {
	return m.compact != nil && (bytes.Contains(chunk, m.compact) || bytes.Contains(chunk, m.spaced))
}

// mayFinish is finished's cheap pre-check: false only when no "finish_reason" member of
// chunk has a value other than null (then finished is false too).
func mayFinish(chunk []byte) bool {
	key := []byte(`"finish_reason"`)
	for {
		i := bytes.Index(chunk, key)
		if i < 0 {
			return false
		}
		chunk = bytes.TrimLeft(chunk[i+len(key):], " \t\r\n")
		if !bytes.HasPrefix(chunk, []byte(":")) {
			continue
		}
		if !bytes.HasPrefix(bytes.TrimLeft(chunk[1:], " \t\r\n"), []byte("null")) {
			return true
		}
	}
}

// encodeBody writes a request body decoded into its members back as one JSON object,
// keys in order, each value as it came (the decode validated it) or as the gateway set
// it: no second encoding pass over the messages.
func encodeBody(body map[string]json.RawMessage) []byte {
	keys := make([]string, 0, len(body))
	n := 2
	for k, v := range body {
		keys = append(keys, k)
		n += len(k) + len(v) + 8
	}
	sort.Strings(keys)
	out := make([]byte, 0, n)
	out = append(out, '{')
	for i, k := range keys {
		if i > 0 {
			out = append(out, ',')
		}
		if plainName(k) {
			out = append(append(append(out, '"'), k...), '"', ':')
		} else {
			kb, _ := json.Marshal(k)
			out = append(append(out, kb...), ':')
		}
		if v := body[k]; len(v) > 0 {
			out = append(out, v...)
		} else {
			out = append(out, "null"...)
		}
	}
	return append(out, '}')
}

// plainName reports whether k is written in JSON as it is between quotes.
func plainName(k string) bool {
	for i := 0; i < len(k); i++ {
		if c := k[i]; c < ' ' || c >= 0x80 || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			return false
		}
	}
	return true
}

// upstreamClient is the gateway's default client to model servers: keep-alive
// connections enough for every concurrent request to one server (the default transport
// keeps 2 per host, so a third concurrent stream would open, and then close, a new
// connection each time); a write buffer that takes a typical request (headers and a body
// of tens of KB) in one or two writes instead of one per 4 KB; no gzip (model servers are
// on the host or the LAN: compressing an answer only costs CPU on both ends).
var upstreamClient = func() *http.Client {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.MaxIdleConns = 256
	t.MaxIdleConnsPerHost = 64
	t.IdleConnTimeout = 90 * time.Second
	t.WriteBufferSize = 64 << 10
	t.ReadBufferSize = 16 << 10
	t.DisableCompression = true
	return &http.Client{Transport: t}
}()

// redact removes the upstream credential from anything passed back to callers.
func redact(s, key string) string {
	if key == "" {
		return s
	}
	return strings.ReplaceAll(s, key, "[redacted]")
}

// RedisSink keeps each run's gateway usage in Redis (pa:run:{id}:gateway, 30 days): token
// totals, requests, the model that last answered, and answers refused for calling a tool
// outside the run's policy (refusedToolCalls, lastRefusedTool).
type RedisSink struct {
	RDB interface {
		TxPipelined(ctx context.Context, fn func(redis.Pipeliner) error) ([]redis.Cmder, error)
	}
	Log *slog.Logger
}

// UsageKey is where a run's gateway usage lives.
func UsageKey(run string) string { return queue.GatewayUsageKey(run) }

// Record implements Sink.
func (s RedisSink) Record(ctx context.Context, u Usage) {
	if u.Run == "" {
		return
	}
	_, err := s.RDB.TxPipelined(ctx, func(p redis.Pipeliner) error {
		queueUsage(ctx, p, u)
		return nil
	})
	if err != nil && s.Log != nil {
		s.Log.Warn("gateway usage not recorded", "run", u.Run, "err", err)
	}
}
