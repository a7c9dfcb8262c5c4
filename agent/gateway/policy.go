package gateway

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"

	"privateassistant/runconfig"
	"privateassistant/schema"
)

// The tool policy at the gateway. Every chat-completion request is served under the
// effective tool policy of the run it names (the admin ceiling ∩ the role's narrowing,
// pinned in the run's bindings at admission); a request naming no run is refused
// (binding.go). The gateway removes every tool the policy does not allow from the request
// (tools, functions, and a tool_choice naming a removed tool) before the model sees it,
// and refuses an answer that calls a tool outside the policy: the calls are taken out and
// the answer ends ("stop") with a notice naming the refused tool in its text — for a
// streamed answer in place of the chunk that named the tool, so nothing of that call
// reaches the caller. The harness never gets a call it could execute, and the user sees
// why. Usage records the refused tool.
//
// Hermes cannot name its run in a header or the base URL (one provider per profile), so
// the Hermes harness submits each run with the model "<route alias>@<run id>"
// (harness.TagModel): real Hermes 0.22.2 sends a run's requested model verbatim on every
// call of that run, its auxiliary title call included. A request naming no run (another
// auxiliary call, a native subagent on the plain alias) is refused (binding.go).

// ErrUnknownRun is returned by a policy or route loader for a run it has no bindings
// for: the request is refused (403 unknown_run), and the answer is not cached.
var ErrUnknownRun = errors.New("gateway: no bindings for the run")

// PolicyCache answers a run's tool policy from Load, keeping each answer (a run's policy
// is pinned at admission and never changes). At most Max runs are kept (default 4096;
// past that the cache starts over).
type PolicyCache struct {
	Load func(ctx context.Context, run string) (runconfig.ToolPolicy, error)
	Max  int

	mu sync.Mutex
	m  map[string]runconfig.ToolPolicy
}

// Policy implements Gateway.Tools.
func (c *PolicyCache) Policy(ctx context.Context, run string) (runconfig.ToolPolicy, error) {
	c.mu.Lock()
	p, ok := c.m[run]
	c.mu.Unlock()
	if ok {
		return p, nil
	}
	p, err := c.Load(ctx, run)
	if err != nil {
		return nil, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	max := c.Max
	if max <= 0 {
		max = 4096
	}
	if c.m == nil || len(c.m) >= max {
		c.m = map[string]runconfig.ToolPolicy{}
	}
	c.m[run] = p
	return p, nil
}

// splitRunModel reads "<alias>@<run>" (harness.TagModel) when no route has the whole name.
func splitRunModel(model string) (alias, run string) {
	i := strings.LastIndexByte(model, '@')
	if i <= 0 || i == len(model)-1 {
		return model, ""
	}
	return model[:i], model[i+1:]
}

// toolName is the function name of one entry of "tools" ({type:function, function:{name}})
// or "functions" ({name}).
func toolName(raw json.RawMessage) string {
	var t struct {
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	_ = json.Unmarshal(raw, &t)
	if t.Function.Name != "" {
		return t.Function.Name
	}
	return t.Name
}

// allAllowed reports whether raw is a non-empty list of tools pol all allows, read in
// one decode (the common case: nothing to remove, the list is passed on as it came).
// Anything else is left to restrictTools's element-by-element reading.
func allAllowed(raw json.RawMessage, pol runconfig.ToolPolicy) bool {
	var list []struct {
		Name     string `json:"name"`
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	}
	if json.Unmarshal(raw, &list) != nil || len(list) == 0 {
		return false
	}
	for _, t := range list {
		n := t.Function.Name
		if n == "" {
			n = t.Name
		}
		if !pol.Allows(n) {
			return false
		}
	}
	return true
}

// restrictTools removes from body every tool pol does not allow and returns the names
// removed. A choice naming a removed tool falls back to "auto" (or goes, with the tools).
func restrictTools(body map[string]json.RawMessage, pol runconfig.ToolPolicy) []string {
	var removed []string
	kept := 0
	for _, field := range []string{"tools", "functions"} {
		raw, ok := body[field]
		if !ok {
			continue
		}
		if listAllowed(raw, pol) {
			kept++ // the list goes on as it came (it is not empty)
			continue
		}
		var list []json.RawMessage
		if json.Unmarshal(raw, &list) != nil {
			removed = append(removed, field+" (unreadable)")
			delete(body, field)
			continue
		}
		keep := list[:0:0]
		for _, t := range list {
			if n := toolName(t); pol.Allows(n) {
				keep = append(keep, t)
			} else {
				removed = append(removed, n)
			}
		}
		kept += len(keep)
		switch {
		case len(keep) == 0:
			delete(body, field)
		case len(keep) < len(list): // else the list goes on as it came
			body[field], _ = json.Marshal(keep)
		}
	}
	for _, field := range []string{"tool_choice", "function_call"} {
		raw, ok := body[field]
		if !ok {
			continue
		}
		var named struct {
			Name     string `json:"name"`
			Function struct {
				Name string `json:"name"`
			} `json:"function"`
		}
		name := ""
		if json.Unmarshal(raw, &named) == nil {
			name = named.Function.Name
			if name == "" {
				name = named.Name
			}
		}
		switch {
		case kept == 0:
			delete(body, field)
		case name != "" && !pol.Allows(name):
			body[field] = json.RawMessage(`"auto"`)
		}
	}
	if kept == 0 {
		delete(body, "parallel_tool_calls")
	}
	return removed
}

// calledTools returns the tools an answer (a whole completion, or one streamed chunk)
// calls by name.
func calledTools(b []byte) []string {
	var c struct {
		Choices []struct {
			Message *callHolder `json:"message"`
			Delta   *callHolder `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal(b, &c) != nil {
		return nil
	}
	var out []string
	for _, ch := range c.Choices {
		for _, h := range []*callHolder{ch.Message, ch.Delta} {
			if h == nil {
				continue
			}
			for _, tc := range h.ToolCalls {
				if tc.Function.Name != "" {
					out = append(out, tc.Function.Name)
				}
			}
			if h.FunctionCall != nil && h.FunctionCall.Name != "" {
				out = append(out, h.FunctionCall.Name)
			}
		}
	}
	return out
}

type callHolder struct {
	ToolCalls []struct {
		Function struct {
			Name string `json:"name"`
		} `json:"function"`
	} `json:"tool_calls"`
	FunctionCall *struct {
		Name string `json:"name"`
	} `json:"function_call"`
}

// forbiddenCall returns the first tool b calls that pol does not allow, or "".
func forbiddenCall(b []byte, pol runconfig.ToolPolicy) string {
	if !bytes.Contains(b, []byte(`"tool_calls"`)) && !bytes.Contains(b, []byte(`"function_call"`)) {
		return ""
	}
	for _, n := range calledTools(b) {
		if !pol.Allows(n) {
			return n
		}
	}
	return ""
}

// refusalNotice is what a refused answer says in place of the call.
func refusalNotice(tool, run string) string {
	who := "this request names no run, so no tool is allowed"
	if run != "" {
		who = "this run's tool policy does not allow it"
	}
	return fmt.Sprintf("[Refused: the model asked to use the tool %q, but %s. Nothing was run.]", tool, who)
}

// refusedCompletion is a whole answer with its tool calls taken out: every choice ends
// ("stop") with its text and the notice, so the harness has nothing to execute.
func refusedCompletion(b []byte, tool, run string) []byte {
	var c map[string]any
	if json.Unmarshal(b, &c) != nil {
		c = map[string]any{"object": "chat.completion"}
	}
	choices, _ := c["choices"].([]any)
	if len(choices) == 0 {
		choices = []any{map[string]any{"index": 0, "message": map[string]any{"role": "assistant"}}}
	}
	for i, x := range choices {
		ch, _ := x.(map[string]any)
		if ch == nil {
			ch = map[string]any{"index": i}
		}
		msg, _ := ch["message"].(map[string]any)
		if msg == nil {
			msg = map[string]any{"role": "assistant"}
		}
		text, _ := msg["content"].(string)
		if text != "" {
			text += "\n\n"
		}
		delete(msg, "tool_calls")
		delete(msg, "function_call")
		msg["content"] = text + refusalNotice(tool, run)
		ch["message"], ch["finish_reason"] = msg, "stop"
		choices[i] = ch
	}
	c["choices"] = choices
	out, _ := json.Marshal(c)
	return out
}

// refusalChunks end a streamed answer in place of the chunk that named a forbidden tool:
// the notice as text, a "stop" chunk, [DONE]. The stream ends as a normal answer (an
// error event mid-stream reads to Hermes as a dropped connection: it retries and asks the
// model to continue).
func refusalChunks(chunk []byte, tool, run string) []byte {
	var c struct {
		ID      string `json:"id"`
		Created int64  `json:"created"`
		Model   string `json:"model"`
	}
	_ = json.Unmarshal(chunk, &c)
	mk := func(delta map[string]any, finish any) []byte {
		b, _ := json.Marshal(map[string]any{"id": c.ID, "object": "chat.completion.chunk", "created": c.Created, "model": c.Model,
			"choices": []any{map[string]any{"index": 0, "delta": delta, "finish_reason": finish}}})
		return append(append([]byte("data: "), b...), '\n', '\n')
	}
	var out []byte
	out = append(out, mk(map[string]any{"content": "\n\n" + refusalNotice(tool, run)}, nil)...)
	out = append(out, mk(map[string]any{}, "stop")...)
	return append(out, "data: [DONE]\n\n"...)
}

// BindingPolicies reads a run's tool policy from its bindings (pinned at admission),
// cached: the agent's Gateway.Tools. store is read at each miss (the agent may replace
// its store before it starts). A run without bindings, or a run id Appwrite refuses, is
// ErrUnknownRun (no tools); a policy that cannot be parsed allows nothing.
func BindingPolicies(store func() *schema.Store) func(ctx context.Context, run string) (runconfig.ToolPolicy, error) {
	c := &PolicyCache{Load: func(ctx context.Context, run string) (runconfig.ToolPolicy, error) {
		b, err := schema.For[schema.RunBinding](store(), schema.CollRunBindings).Get(ctx, run)
		if errors.Is(err, schema.ErrNotFound) || errors.Is(err, schema.ErrInvalid) {
			return nil, ErrUnknownRun
		}
		if err != nil {
			return nil, err
		}
		p, _ := runconfig.ParseToolPolicy(b.ToolPolicy)
		return p, nil
	}}
	return c.Policy
}
