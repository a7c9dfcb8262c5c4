package harness

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"

	"privateassistant/runconfig"
)

// RunHeader names the run a model request is made for (the inference gateway serves it
// under that run's grant and tool policy).
const RunHeader = "X-PA-Run"

// Direct runs plain chat against an OpenAI-compatible endpoint (the inference gateway in
// production, the scripted backend in the demo): streaming, no approvals. It names its
// run to the gateway (X-PA-Run), which applies the run's tool policy, and refuses an
// answer that calls a tool outside the run's policy itself too (the run fails saying which
// tool). With Tools (the agent's MCP job server: enqueue_job, …) it offers the model those
// tools the run's policy allows, runs the calls through Tools and answers the model with
// their results (at most maxToolRounds answers); without, it offers none and ignores a
// call inside the policy. Its
// runs live in this process, so after an agent restart a resubmission runs inference
// again (inference has no side effects); the executor tells the client to reset the
// partial text when that happens.
type Direct struct {
	BaseURL string // e.g. http://127.0.0.1:8081/v1
	APIKey  string
	HTTP    *http.Client
	// Tools, when set, are the tools a run may offer its model (filtered by its policy).
	Tools ToolCaller

	mu   sync.Mutex
	runs map[string]*directRun
}

var _ Harness = (*Direct)(nil)

// ToolCaller runs the tools a direct run may offer its model. The agent's is its MCP job
// server, its tools named as Hermes names MCP tools (mcp__pa__enqueue_job): the gateway's
// tool policy and the job server's matching of a call to the run whose answer made it
// apply exactly as they do to Hermes.
type ToolCaller interface {
	Tools(ctx context.Context) ([]ToolDef, error)
	Call(ctx context.Context, name, arguments string) (string, error)
}

// ToolDef is a tool as the model is offered it.
type ToolDef struct {
	Name        string
	Description string
	Parameters  json.RawMessage
}

type directRun struct {
	mu       sync.Mutex
	backlog  []Event
	notify   chan struct{}
	consumed bool
	status   State
	output   string
	errMsg   string
	usage    *Usage
	cancel   context.CancelFunc
	created  time.Time
}

// Kind implements Harness.
func (d *Direct) Kind() Kind { return DirectKind }

func (d *Direct) client() *http.Client {
	if d.HTTP != nil {
		return d.HTTP
	}
	return &http.Client{}
}

func (d *Direct) request(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var b []byte
	if body != nil {
		b, _ = json.Marshal(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(d.BaseURL, "/")+path, bytes.NewReader(b))
	if err != nil {
		return nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	if d.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+d.APIKey)
	}
	return req, nil
}

// Ready lists the endpoint's models.
func (d *Direct) Ready(ctx context.Context) (Info, error) {
	req, err := d.request(ctx, "GET", "/models", nil)
	if err != nil {
		return Info{}, err
	}
	resp, err := d.client().Do(req)
	if err != nil {
		return Info{}, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return Info{}, fmt.Errorf("%w: GET /models answered %d", ErrUnavailable, resp.StatusCode)
	}
	var m map[string]any
	_ = json.NewDecoder(resp.Body).Decode(&m)
	return Info{Capabilities: m}, nil
}

// Submit starts a streaming completion keyed by s.Key (a repeat re-attaches).
func (d *Direct) Submit(ctx context.Context, s Submission) (Attached, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.runs == nil {
		d.runs = map[string]*directRun{}
	}
	id := "direct-" + s.Key
	if _, ok := d.runs[id]; ok {
		return Attached{NativeRunID: id, Replayed: true}, nil
	}
	rctx, cancel := context.WithCancel(context.Background())
	r := &directRun{notify: make(chan struct{}, 1), status: StateRunning, cancel: cancel, created: time.Now()}
	d.runs[id] = r
	// Forget finished runs after a while.
	for k, x := range d.runs {
		x.mu.Lock()
		old := x.status.Terminal() && time.Since(x.created) > time.Hour
		x.mu.Unlock()
		if old {
			delete(d.runs, k)
		}
	}
	msgs := []any{}
	if s.Instructions != "" {
		msgs = append(msgs, map[string]string{"role": "system", "content": s.Instructions})
	}
	for _, m := range s.History {
		msgs = append(msgs, map[string]string{"role": m.Role, "content": m.Content})
	}
	msgs = append(msgs, map[string]string{"role": "user", "content": s.Input})
	body := map[string]any{"model": s.Model, "messages": msgs, "stream": true, "stream_options": map[string]any{"include_usage": true}}
	if s.MaxTokens > 0 {
		body["max_tokens"] = s.MaxTokens
	}
	offered := map[string]bool{}
	if d.Tools != nil {
		// The tools of Tools the run's policy allows (none: the model is offered none). A
		// listing that fails leaves the run without tools rather than failing it.
		defs, err := d.Tools.Tools(ctx)
		var tools []any
		for _, t := range defs {
			if err == nil && s.Tools.Allows(t.Name) {
				offered[t.Name] = true
				tools = append(tools, map[string]any{"type": "function", "function": map[string]any{"name": t.Name, "description": t.Description, "parameters": t.Parameters}})
			}
		}
		if len(tools) > 0 {
			body["tools"] = tools
		}
	}
	run := s.Run
	if run == "" {
		run = s.Key
	}
	go d.run(rctx, r, body, run, s.Tools, offered)
	return Attached{NativeRunID: id}, nil
}

func (r *directRun) push(e Event) {
	r.mu.Lock()
	r.backlog = append(r.backlog, e)
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
}

func (r *directRun) finish(status State, e Event) {
	r.mu.Lock()
	if r.status.Terminal() {
		r.mu.Unlock()
		return
	}
	r.status, r.errMsg, r.usage = status, e.Error, e.Usage
	if status == StateCompleted {
		r.output = e.Text
	}
	r.mu.Unlock()
	r.push(e)
}

// maxToolRounds bounds the model answers of one direct run that call tools.
const maxToolRounds = 4

func (d *Direct) run(ctx context.Context, r *directRun, body map[string]any, run string, pol runconfig.ToolPolicy, offered map[string]bool) {
	var usage *Usage
	var all strings.Builder
	for round := 0; ; round++ {
		res, end := d.complete(ctx, r, body, run, pol)
		if end != nil {
			r.finish(stateOf(end.Kind), *end)
			return
		}
		all.WriteString(res.text)
		usage = addUsage(usage, res.usage)
		if len(res.calls) == 0 || d.Tools == nil {
			// No call, or (without Tools) a call inside the policy the direct harness ignores.
			r.finish("completed", Event{Kind: KindCompleted, Text: all.String(), Usage: usage})
			return
		}
		if round+1 >= maxToolRounds {
			r.finish("failed", Event{Kind: KindFailed, Error: fmt.Sprintf("the model called tools in %d answers in a row; the run was stopped", maxToolRounds)})
			return
		}
		msgs, _ := body["messages"].([]any)
		tc := make([]any, 0, len(res.calls))
		for _, c := range res.calls {
			tc = append(tc, map[string]any{"id": c.id, "type": "function", "function": map[string]any{"name": c.name, "arguments": c.args}})
		}
		msgs = append(msgs, map[string]any{"role": "assistant", "content": res.text, "tool_calls": tc})
		for _, c := range res.calls {
			r.push(Event{Kind: KindToolStarted, Tool: c.name, Preview: c.args})
			t0 := time.Now()
			out, err := "", error(nil)
			if offered[c.name] {
				out, err = d.Tools.Call(ctx, c.name, c.args)
			} else {
				err = fmt.Errorf("no tool %q is offered to this run", c.name)
			}
			if ctx.Err() != nil {
				r.finish("cancelled", Event{Kind: KindCancelled})
				return
			}
			if err != nil {
				out = "error: " + err.Error()
			}
			r.push(Event{Kind: KindToolCompleted, Tool: c.name, Duration: time.Since(t0).Seconds(), ToolError: err != nil})
			msgs = append(msgs, map[string]any{"role": "tool", "tool_call_id": c.id, "content": out})
		}
		body["messages"] = msgs
	}
}

func stateOf(k EventKind) State {
	switch k {
	case KindCancelled:
		return StateCancelled
	case KindCompleted:
		return StateCompleted
	}
	return StateFailed
}

func addUsage(a, b *Usage) *Usage {
	if b == nil {
		return a
	}
	if a == nil {
		u := *b
		return &u
	}
	return &Usage{InputTokens: a.InputTokens + b.InputTokens, OutputTokens: a.OutputTokens + b.OutputTokens, TotalTokens: a.TotalTokens + b.TotalTokens}
}

type directCall struct{ id, name, args string }

type answer struct {
	text  string
	calls []directCall
	usage *Usage
}

// complete streams one model answer: its text as deltas, its tool calls gathered. A
// terminal event is returned when the run ends here (failed, cancelled).
func (d *Direct) complete(ctx context.Context, r *directRun, body map[string]any, run string, pol runconfig.ToolPolicy) (answer, *Event) {
	fail := func(msg string) (answer, *Event) { return answer{}, &Event{Kind: KindFailed, Error: msg} }
	req, err := d.request(ctx, "POST", "/chat/completions", body)
	if err != nil {
		return fail(err.Error())
	}
	if run != "" {
		req.Header.Set(RunHeader, run)
	}
	resp, err := d.client().Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return answer{}, &Event{Kind: KindCancelled}
		}
		return fail("the model endpoint is unreachable")
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		var eb struct {
			Error struct{ Message string } `json:"error"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&eb)
		msg := fmt.Sprintf("the model endpoint answered %d", resp.StatusCode)
		if eb.Error.Message != "" {
			msg += ": " + eb.Error.Message
		}
		return fail(msg)
	}
	var text strings.Builder
	var a answer
	calls := map[int]*directCall{}
	var order []int
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	done := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data:") {
			continue
		}
		data := strings.TrimSpace(line[5:])
		if data == "[DONE]" {
			done = true
			break
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   string `json:"content"`
					ToolCalls []struct {
						Index    int    `json:"index"`
						ID       string `json:"id"`
						Function struct {
							Name      string `json:"name"`
							Arguments string `json:"arguments"`
						} `json:"function"`
					} `json:"tool_calls"`
					FunctionCall *struct {
						Name string `json:"name"`
					} `json:"function_call"`
				} `json:"delta"`
			} `json:"choices"`
			Error *struct {
				Code    string `json:"code"`
				Message string `json:"message"`
			} `json:"error"`
			Usage *struct {
				P int `json:"prompt_tokens"`
				C int `json:"completion_tokens"`
				T int `json:"total_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(data), &chunk) != nil {
			continue
		}
		if chunk.Error != nil {
			// The endpoint ended the answer with an error (the gateway refusing a tool call).
			return fail("the model endpoint refused the answer: " + chunk.Error.Message)
		}
		if chunk.Usage != nil {
			a.usage = &Usage{InputTokens: chunk.Usage.P, OutputTokens: chunk.Usage.C, TotalTokens: chunk.Usage.T}
		}
		for _, c := range chunk.Choices {
			names := []string{}
			for _, tc := range c.Delta.ToolCalls {
				names = append(names, tc.Function.Name)
				dc := calls[tc.Index]
				if dc == nil {
					dc = &directCall{}
					calls[tc.Index] = dc
					order = append(order, tc.Index)
				}
				if tc.ID != "" {
					dc.id = tc.ID
				}
				dc.name += tc.Function.Name
				dc.args += tc.Function.Arguments
			}
			if c.Delta.FunctionCall != nil {
				names = append(names, c.Delta.FunctionCall.Name)
			}
			for _, n := range names {
				if n != "" && !pol.Allows(n) {
					return fail(fmt.Sprintf("the model called the tool %q, which this run's tool policy does not allow; the answer was refused", n))
				}
			}
			if c.Delta.Content != "" {
				text.WriteString(c.Delta.Content)
				r.push(Event{Kind: KindDelta, Text: c.Delta.Content})
			}
		}
	}
	switch {
	case ctx.Err() != nil:
		return answer{}, &Event{Kind: KindCancelled}
	case !done:
		return fail("the model stream ended before the answer was complete")
	}
	a.text = text.String()
	for _, i := range order {
		if c := calls[i]; c.name != "" {
			a.calls = append(a.calls, *c)
		}
	}
	return a, nil
}

func (d *Direct) get(id string) (*directRun, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	r := d.runs[id]
	if r == nil {
		return nil, ErrNotFound
	}
	return r, nil
}

// Stream returns the one consumer of a direct run: its backlog after the event numbered
// after (events are numbered by their place in the backlog, from 0), then live events.
func (d *Direct) Stream(ctx context.Context, id string, after int64) (Stream, error) {
	r, err := d.get(id)
	if err != nil {
		return nil, ErrNotAttachable
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.consumed {
		return nil, ErrNotAttachable
	}
	r.consumed = true
	return &directStream{ctx: ctx, r: r, next: int(max(after+1, 0))}, nil
}

type directStream struct {
	ctx  context.Context
	r    *directRun
	next int
	done bool
}

func (s *directStream) Close() error { return nil }

func (s *directStream) Next() (Event, error) {
	for {
		if s.done {
			return Event{}, ErrStreamEnded
		}
		s.r.mu.Lock()
		if s.next < len(s.r.backlog) {
			e := s.r.backlog[s.next]
			e.Seq = int64(s.next)
			s.next++
			s.r.mu.Unlock()
			if Terminal(e.Kind) {
				s.done = true
			}
			return e, nil
		}
		s.r.mu.Unlock()
		select {
		case <-s.r.notify:
		case <-time.After(200 * time.Millisecond):
		case <-s.ctx.Done():
			return Event{}, ErrStreamEnded
		}
	}
}

// Status reports the direct run.
func (d *Direct) Status(ctx context.Context, id string) (Status, error) {
	r, err := d.get(id)
	if err != nil {
		return Status{}, err
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	st := Status{State: r.status, Error: r.errMsg, Usage: r.usage}
	if r.status == StateCompleted {
		out := r.output
		st.Output = &out
	}
	return st, nil
}

// Stop cancels the completion.
func (d *Direct) Stop(ctx context.Context, id string) error {
	r, err := d.get(id)
	if err != nil {
		return nil
	}
	r.cancel()
	return nil
}

// Approve: the direct harness runs no tools, so it never asks.
func (d *Direct) Approve(ctx context.Context, id, requestID, choice string) error {
	return errors.New("harness: the direct harness has no approvals")
}

// LastAssistant: the direct harness keeps no transcript.
func (d *Direct) LastAssistant(ctx context.Context, sessionID string) (string, error) { return "", nil }
