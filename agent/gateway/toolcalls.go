package gateway

import (
	"context"
	"encoding/json"
	"sort"
)

// ToolCall is one tool call a model's answer made, as the harness will receive it: the
// call's id, the function name and its arguments (the JSON text, streamed fragments
// joined).
type ToolCall struct {
	ID        string
	Name      string
	Arguments string
}

// CallSink learns the tool calls each answer served for a run makes (Gateway.ToolCalls),
// before the harness receives the answer's end. The agent's MCP job server
// (agent/mcpjobs) registers its own tools' calls there: a call it later receives from
// Hermes is accepted only when it matches one, which names the calling run.
type CallSink func(ctx context.Context, run string, calls []ToolCall)

// callAcc joins a streamed answer's tool-call fragments by their index.
type callAcc struct {
	calls map[int]*ToolCall
	done  bool
}

func (a *callAcc) add(chunk []byte) {
	var c struct {
		Choices []struct {
			Delta *struct {
				ToolCalls []struct {
					Index    int    `json:"index"`
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"delta"`
		} `json:"choices"`
	}
	if json.Unmarshal(chunk, &c) != nil {
		return
	}
	for _, ch := range c.Choices {
		if ch.Delta == nil {
			continue
		}
		for _, tc := range ch.Delta.ToolCalls {
			if a.calls == nil {
				a.calls = map[int]*ToolCall{}
			}
			cur := a.calls[tc.Index]
			if cur == nil {
				cur = &ToolCall{}
				a.calls[tc.Index] = cur
			}
			if tc.ID != "" {
				cur.ID = tc.ID
			}
			if tc.Function.Name != "" {
				cur.Name = tc.Function.Name
			}
			cur.Arguments += tc.Function.Arguments
		}
	}
}

// finished reports whether chunk ends a choice (a finish_reason).
func finished(chunk []byte) bool {
	var c struct {
		Choices []struct {
			FinishReason *string `json:"finish_reason"`
		} `json:"choices"`
	}
	if json.Unmarshal(chunk, &c) != nil {
		return false
	}
	for _, ch := range c.Choices {
		if ch.FinishReason != nil && *ch.FinishReason != "" {
			return true
		}
	}
	return false
}

func (a *callAcc) list() []ToolCall {
	idx := make([]int, 0, len(a.calls))
	for i := range a.calls {
		idx = append(idx, i)
	}
	sort.Ints(idx)
	out := make([]ToolCall, 0, len(idx))
	for _, i := range idx {
		if c := a.calls[i]; c.Name != "" {
			out = append(out, *c)
		}
	}
	return out
}

// answerCalls reads the tool calls of a whole (non-streamed) completion.
func answerCalls(b []byte) []ToolCall {
	var c struct {
		Choices []struct {
			Message *struct {
				ToolCalls []struct {
					ID       string `json:"id"`
					Function struct {
						Name      string `json:"name"`
						Arguments string `json:"arguments"`
					} `json:"function"`
				} `json:"tool_calls"`
			} `json:"message"`
		} `json:"choices"`
	}
	if json.Unmarshal(b, &c) != nil {
		return nil
	}
	var out []ToolCall
	for _, ch := range c.Choices {
		if ch.Message == nil {
			continue
		}
		for _, tc := range ch.Message.ToolCalls {
			if tc.Function.Name != "" {
				out = append(out, ToolCall{ID: tc.ID, Name: tc.Function.Name, Arguments: tc.Function.Arguments})
			}
		}
	}
	return out
}

// reportCalls hands calls to the sink (a request naming no run reports nothing).
func (g *Gateway) reportCalls(ctx context.Context, run string, calls []ToolCall) {
	if g.ToolCalls == nil || run == "" || len(calls) == 0 {
		return
	}
	g.ToolCalls(context.WithoutCancel(ctx), run, calls)
}
