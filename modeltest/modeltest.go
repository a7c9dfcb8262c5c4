// Package modeltest is a scripted OpenAI-compatible model backend: GET /v1/models and
// POST /v1/chat/completions (streaming SSE chat.completion.chunk frames with a usage
// chunk, and non-streaming), with tool calls. It stands in for llama-server, Ollama or
// a gateway in tests and in the demo stack; it is also runnable on its own
// (cmd/scripted-model).
//
// A conversation picks its script by a marker in the last user message (e.g. "#tool");
// without one the reply echoes the message. A script is a list of turns: the turn played
// is the number of tool results that follow the last user message, so a tool call, its
// result and the model's next answer form a real multi-turn exchange.
//
// Agents such as Hermes also make auxiliary calls to the same endpoint (a session title
// from the opening message). Those are recognised by their prompt and answered with a
// fixed, well-formed reply instead of a script turn: a script's tool call must never
// land in a title request. They are recorded with Request.Aux set and are not counted
// by MainCalls.
package modeltest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// ToolCall is a tool the model asks for.
type ToolCall struct {
	Name      string
	Arguments string // JSON
}

// Turn is one model answer: text tokens, or tool calls, or a failure.
type Turn struct {
	Tokens     []string
	ToolCalls  []ToolCall
	TokenDelay time.Duration // between tokens (overrides the backend default)
	// TokenText, when set, replaces token i's text at the moment it is sent (e.g. a
	// timestamp, to measure how long a token takes to reach a client). Tokens still sets
	// how many there are.
	TokenText  func(i int) string
	FirstDelay time.Duration // before the first token
	FailStatus int           // answer this HTTP status instead
	// DropAfter cuts the stream after this many tokens without a final chunk.
	DropAfter int
	// FromToolResult, when set, makes the turn's tokens from the text of the latest tool
	// result in the request (a model answering from what its tool read).
	FromToolResult func(result string) []string
}

// Script is a sequence of turns.
type Script struct {
	Turns []Turn
}

// Backend is the server.
type Backend struct {
	// Model is the id /v1/models reports; ContextLength its context window.
	Model         string
	ContextLength int
	// TokenDelay between streamed tokens by default.
	TokenDelay time.Duration
	// APIKey, when set, is required as a Bearer token.
	APIKey string

	// Title is the answer to a title-generation call (default "Scripted session").
	Title string

	// PromptTokenDelay is the prompt processing time per prompt token, spent before the
	// first token (0: instant); with TokenDelay it sets the backend's speed, which a GPU
	// qualification measures.
	PromptTokenDelay time.Duration
	// Timings, when set, makes the last streamed chunk carry llama-server's timings: the
	// prompt and generation speeds PromptTokenDelay and TokenDelay stand for (the device's
	// compute speed, as llama-server reports it, which a busy host's scheduler does not
	// change; a client timing the chunks measures the host too).
	Timings bool
	// BeforeRelease, when set, runs as a streamed generation ends, before the request gives
	// its KV cache back, with the request's context and its prompt tokens (a test keeps a
	// device full until its telemetry has been read).
	BeforeRelease func(ctx context.Context, promptTokens int)

	kvTokens atomic.Int64 // tokens held by requests in flight (prompt + generated so far)
	active   atomic.Int64 // requests in flight

	mu        sync.Mutex
	scripts   map[string]Script
	calls     atomic.Int64
	mainCalls atomic.Int64
	listCalls atomic.Int64
	callIDs   atomic.Int64
	Log       []Request // every chat request received (for assertions)
}

// Request is a recorded chat request.
type Request struct {
	Model    string
	Messages []Message
	Stream   bool
	Tools    int
	// Aux names an auxiliary call answered outside the scripts ("title"); "" for a
	// conversation turn.
	Aux string
}

// Request.Aux values.
const (
	AuxTitle  = "title"  // a session title
	AuxReview = "review" // a background memory/skill review of the conversation
)

// auxKind recognises an agent's auxiliary call. Hermes's title generator sends a system
// prompt that starts "You name chat sessions" (agent/title_generator.py) and asks for a
// json_schema response named session_title. Its background memory/skill review replays
// the conversation and appends a user message that starts "Review the conversation above"
// (agent/background_review.py), with tools.
func auxKind(msgs []Message, responseFormat json.RawMessage) string {
	if strings.Contains(string(responseFormat), `"session_title"`) {
		return AuxTitle
	}
	for _, m := range msgs {
		if m.Role == "system" && strings.HasPrefix(strings.TrimSpace(m.text()), "You name chat sessions") {
			return AuxTitle
		}
	}
	if n := len(msgs); n > 0 && msgs[n-1].Role == "user" &&
		strings.HasPrefix(strings.TrimSpace(msgs[n-1].text()), "Review the conversation above") {
		return AuxReview
	}
	return ""
}

// Message is an OpenAI chat message.
type Message struct {
	Role       string          `json:"role"`
	Content    any             `json:"content"`
	ToolCalls  json.RawMessage `json:"tool_calls,omitempty"`
	ToolCallID string          `json:"tool_call_id,omitempty"`
	Name       string          `json:"name,omitempty"`
}

func (m Message) text() string {
	switch c := m.Content.(type) {
	case string:
		return c
	case []any:
		var b strings.Builder
		for _, p := range c {
			if pm, ok := p.(map[string]any); ok {
				if t, ok := pm["text"].(string); ok {
					b.WriteString(t)
				}
			}
		}
		return b.String()
	}
	return ""
}

// New returns a backend with the built-in scripts.
func New(model string) *Backend {
	b := &Backend{Model: model, ContextLength: 131072, TokenDelay: 5 * time.Millisecond, scripts: map[string]Script{}}
	for k, s := range BuiltinScripts() {
		b.scripts[k] = s
	}
	return b
}

// BuiltinScripts are the markers every backend knows.
func BuiltinScripts() map[string]Script {
	words := func(s string) []string {
		var out []string
		for i, w := range strings.Fields(s) {
			if i > 0 {
				w = " " + w
			}
			out = append(out, w)
		}
		return out
	}
	return map[string]Script{
		// A tool that needs approval (Hermes asks before running a terminal command).
		"#tool": {Turns: []Turn{
			{Tokens: words("Let me check that."), ToolCalls: []ToolCall{{Name: "terminal", Arguments: `{"command":"ls -la /tmp"}`}}},
			{Tokens: words("The directory listing is done.")},
		}},
		// A tool that writes an artifact (file output on the Hermes host).
		"#artifact": {Turns: []Turn{
			{ToolCalls: []ToolCall{{Name: "write_file", Arguments: `{"path":"report.md","content":"# Report\n\nAll good.\n"}`}}},
			{Tokens: words("I wrote report.md for you.")},
		}},
		// A long answer, for cancellation and reload tests.
		"#long": {Turns: []Turn{{Tokens: words(strings.Repeat("streaming tokens for a long while ", 200)), TokenDelay: 20 * time.Millisecond}}},
		// A medium answer (about 3 s), for reload-and-resume tests.
		"#story": {Turns: []Turn{{Tokens: words(strings.Repeat("once upon a time there was a careful agent ", 12)), TokenDelay: 20 * time.Millisecond}}},
		// The backend fails.
		"#fail": {Turns: []Turn{{FailStatus: 500}}},
		// The stream breaks mid-answer.
		"#drop": {Turns: []Turn{{Tokens: words("this answer will be cut off before it ends"), DropAfter: 3}}},
		// Markdown and HTML the UI must render inert.
		"#xss": {Turns: []Turn{{Tokens: []string{
			"Here: <script>alert(1)</script> ", "<img src=x onerror=alert(2)> ",
			"[click](javascript:alert(3)) ", "<svg onload=alert(4)></svg> ", "**bold** done.",
		}}}},
	}
}

// SetScript registers (or replaces) a script for a marker.
func (b *Backend) SetScript(marker string, s Script) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.scripts[marker] = s
}

// Calls returns how many chat completions were requested (auxiliary calls included).
func (b *Backend) Calls() int64 { return b.calls.Load() }

// ModelListCalls returns how many times GET /v1/models (the model metadata an agent may
// probe for a context window) was requested.
func (b *Backend) ModelListCalls() int64 { return b.listCalls.Load() }

// MainCalls returns how many conversation turns were requested (auxiliary calls
// excluded): the number of model turns the agent's runs played.
func (b *Backend) MainCalls() int64 { return b.mainCalls.Load() }

func (b *Backend) pick(msgs []Message) (Turn, string) {
	lastUser, tools := -1, 0
	for i, m := range msgs {
		if m.Role == "user" {
			lastUser, tools = i, 0
		} else if m.Role == "tool" && lastUser >= 0 {
			tools++
		}
	}
	text := ""
	if lastUser >= 0 {
		text = msgs[lastUser].text()
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	// The marker written last wins (deterministic; a harness may merge earlier user turns
	// into the last message, e.g. a delegated job's text after the chat that asked for it;
	// at one place, the longer marker).
	best, at := "", -1
	for marker := range b.scripts {
		if i := strings.LastIndex(text, marker); i > at || (i == at && i >= 0 && len(marker) > len(best)) {
			best, at = marker, i
		}
	}
	if at >= 0 {
		s := b.scripts[best]
		if tools < len(s.Turns) {
			t := s.Turns[tools]
			if t.FromToolResult != nil {
				result := ""
				for _, m := range msgs {
					if m.Role == "tool" {
						result = m.text()
					}
				}
				t.Tokens = t.FromToolResult(result)
			}
			return t, text
		}
		return Turn{Tokens: []string{"Done."}}, text
	}
	if tools > 0 {
		return Turn{Tokens: []string{"Done."}}, text
	}
	// Echo: deterministic, so tests can predict the whole answer.
	reply := "You said: " + strings.TrimSpace(text)
	var toks []string
	for i, w := range strings.Fields(reply) {
		if i > 0 {
			w = " " + w
		}
		toks = append(toks, w)
	}
	return Turn{Tokens: toks}, text
}

// ServeHTTP implements the OpenAI-compatible API.
func (b *Backend) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if b.APIKey != "" && r.Header.Get("Authorization") != "Bearer "+b.APIKey {
		writeErr(w, 401, "invalid_api_key", "Incorrect API key provided")
		return
	}
	switch {
	case r.Method == "GET" && (r.URL.Path == "/v1/models" || r.URL.Path == "/models"):
		b.listCalls.Add(1)
		writeJSON(w, 200, map[string]any{"object": "list", "data": []any{map[string]any{
			"id": b.Model, "object": "model", "created": 1760000000, "owned_by": "scripted",
			"context_length": b.ContextLength, "meta": map[string]any{"n_ctx_train": b.ContextLength}}}})
	case r.Method == "GET" && r.URL.Path == "/health":
		writeJSON(w, 200, map[string]any{"status": "ok"})
	case r.Method == "POST" && r.URL.Path == "/v1/chat/completions":
		b.chat(w, r)
	default:
		writeErr(w, 404, "not_found", "no such endpoint")
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func writeErr(w http.ResponseWriter, status int, code, msg string) {
	writeJSON(w, status, map[string]any{"error": map[string]any{"message": msg, "type": "invalid_request_error", "code": code}})
}

func (b *Backend) chat(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Model          string            `json:"model"`
		Messages       []Message         `json:"messages"`
		Stream         bool              `json:"stream"`
		Tools          []json.RawMessage `json:"tools"`
		MaxTokens      int               `json:"max_tokens"`
		IgnoreEOS      bool              `json:"ignore_eos"` // llama-server's: generate max_tokens whatever the script says
		ResponseFormat json.RawMessage   `json:"response_format"`
		StreamOptions  *struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
	}
	body, _ := io.ReadAll(io.LimitReader(r.Body, 8<<20))
	if err := json.Unmarshal(body, &req); err != nil || len(req.Messages) == 0 {
		writeErr(w, 400, "invalid_request", "messages are required")
		return
	}
	b.calls.Add(1)
	aux := auxKind(req.Messages, req.ResponseFormat)
	if aux == "" {
		b.mainCalls.Add(1)
	}
	b.mu.Lock()
	b.Log = append(b.Log, Request{Model: req.Model, Messages: req.Messages, Stream: req.Stream, Tools: len(req.Tools), Aux: aux})
	title := b.Title
	b.mu.Unlock()
	var turn Turn
	switch aux {
	case AuxTitle:
		if title == "" {
			title = "Scripted session"
		}
		tb, _ := json.Marshal(map[string]string{"title": title})
		turn = Turn{Tokens: []string{string(tb)}}
	case AuxReview:
		turn = Turn{Tokens: []string{"Nothing to save."}}
	default:
		turn, _ = b.pick(req.Messages)
	}
	if turn.FailStatus != 0 {
		writeErr(w, turn.FailStatus, "backend_failure", "the scripted backend failed as asked")
		return
	}
	prompt := promptTokens(req.Messages)
	if b.ContextLength > 0 && prompt >= b.ContextLength {
		// As llama-server answers a prompt that does not fit its context.
		writeErr(w, 400, "exceed_context_size_error", fmt.Sprintf("the request (%d prompt tokens) exceeds the available context size (%d tokens), try increasing it", prompt, b.ContextLength))
		return
	}
	toks := turn.Tokens
	for req.IgnoreEOS && req.MaxTokens > len(toks) {
		toks = append(toks, " the")
	}
	if req.MaxTokens > 0 && len(toks) > req.MaxTokens {
		toks = toks[:req.MaxTokens]
	}
	// The KV cache this request holds while it runs (the fake GPU telemetry follows it).
	// It is given back once the generation ends, before the answer's last bytes go out (as
	// a model server frees its slot): a caller that reads the answer and sends its next
	// request at once never finds both counted (a qualification sampled a device running
	// two requests on one slot, 145 °C instead of 95, about once in a CI run).
	b.active.Add(1)
	b.kvTokens.Add(int64(prompt))
	held := int64(prompt)
	var releaseOnce sync.Once
	release := func() { releaseOnce.Do(func() { b.kvTokens.Add(-held); b.active.Add(-1) }) }
	defer release()
	firstDelay := turn.FirstDelay + time.Duration(prompt)*b.PromptTokenDelay
	delay := b.TokenDelay
	if turn.TokenDelay > 0 {
		delay = turn.TokenDelay
	}
	id := fmt.Sprintf("chatcmpl-%d", time.Now().UnixNano())
	usage := map[string]any{"prompt_tokens": prompt, "completion_tokens": len(toks), "total_tokens": prompt + len(toks)}
	finish := "stop"
	if len(turn.ToolCalls) > 0 {
		finish = "tool_calls"
	}
	var calls []map[string]any
	for i, tc := range turn.ToolCalls {
		// Unique per backend: agents keep tool-call ids in the history and may refuse a
		// repeated one.
		calls = append(calls, map[string]any{"index": i, "id": fmt.Sprintf("call_%d", b.callIDs.Add(1)), "type": "function",
			"function": map[string]any{"name": tc.Name, "arguments": tc.Arguments}})
	}
	if !req.Stream {
		text := strings.Join(toks, "")
		if turn.TokenText != nil {
			var b strings.Builder
			for i := range toks {
				b.WriteString(turn.TokenText(i))
			}
			text = b.String()
		}
		msg := map[string]any{"role": "assistant", "content": text}
		if calls != nil {
			msg["tool_calls"] = calls
		}
		if !sleep(r, firstDelay+delay*time.Duration(len(toks))) {
			return
		}
		b.kvTokens.Add(int64(len(toks)))
		held += int64(len(toks))
		release()
		writeJSON(w, 200, map[string]any{"id": id, "object": "chat.completion", "created": time.Now().Unix(), "model": b.Model,
			"choices": []any{map[string]any{"index": 0, "message": msg, "finish_reason": finish}}, "usage": usage})
		return
	}
	fl, _ := w.(http.Flusher)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(200)
	send := func(delta map[string]any, fin any) {
		chunk := map[string]any{"id": id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": b.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": fin}}}
		bb, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", bb)
		if fl != nil {
			fl.Flush()
		}
	}
	send(map[string]any{"role": "assistant", "content": ""}, nil)
	if firstDelay > 0 && !sleep(r, firstDelay) {
		return
	}
	for i, t := range toks {
		if i > 0 && !sleep(r, delay) {
			return
		}
		if turn.DropAfter > 0 && i >= turn.DropAfter {
			return // the connection ends without a final chunk or [DONE]
		}
		if turn.TokenText != nil {
			t = turn.TokenText(i)
		}
		b.kvTokens.Add(1)
		held++
		send(map[string]any{"content": t}, nil)
	}
	if calls != nil {
		send(map[string]any{"tool_calls": calls}, nil)
	}
	if b.BeforeRelease != nil {
		b.BeforeRelease(r.Context(), prompt)
	}
	release()
	if b.Timings {
		tm := map[string]any{"prompt_n": prompt, "predicted_n": len(toks)}
		if b.PromptTokenDelay > 0 {
			tm["prompt_per_second"] = float64(time.Second) / float64(b.PromptTokenDelay)
		}
		if delay > 0 {
			tm["predicted_per_second"] = float64(time.Second) / float64(delay)
		}
		chunk := map[string]any{"id": id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": b.Model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{}, "finish_reason": finish}}, "timings": tm}
		bb, _ := json.Marshal(chunk)
		fmt.Fprintf(w, "data: %s\n\n", bb)
	} else {
		send(map[string]any{}, finish)
	}
	if req.StreamOptions != nil && req.StreamOptions.IncludeUsage {
		bb, _ := json.Marshal(map[string]any{"id": id, "object": "chat.completion.chunk", "created": time.Now().Unix(), "model": b.Model, "choices": []any{}, "usage": usage})
		fmt.Fprintf(w, "data: %s\n\n", bb)
	}
	fmt.Fprint(w, "data: [DONE]\n\n")
	if fl != nil {
		fl.Flush()
	}
}

func sleep(r *http.Request, d time.Duration) bool {
	select {
	case <-time.After(d):
		return true
	case <-r.Context().Done():
		return false
	}
}

func promptTokens(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		n += len(strings.Fields(m.text()))
	}
	return n
}

// KVTokens returns the tokens the requests in flight hold (their prompts and what they
// generated so far): what a KV cache would hold. Fake GPU telemetry follows it.
func (b *Backend) KVTokens() int64 { return b.kvTokens.Load() }

// Active returns the chat requests in flight.
func (b *Backend) Active() int64 { return b.active.Load() }

// Requests returns a copy of the chat requests received so far.
func (b *Backend) Requests() []Request {
	b.mu.Lock()
	defer b.mu.Unlock()
	return append([]Request(nil), b.Log...)
}
