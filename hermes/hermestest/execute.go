package hermestest

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

var toolSchemas = []any{
	map[string]any{"type": "function", "function": map[string]any{"name": "terminal", "description": "Run a shell command",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"command": map[string]any{"type": "string"}}, "required": []string{"command"}}}},
	map[string]any{"type": "function", "function": map[string]any{"name": "write_file", "description": "Write a file in the workspace",
		"parameters": map[string]any{"type": "object", "properties": map[string]any{"path": map[string]any{"type": "string"}, "content": map[string]any{"type": "string"}}, "required": []string{"path", "content"}}}},
}

// emit queues an event on the run's stream (whether or not anyone listens yet).
func (s *Server) emit(x *run, typ string, fields map[string]any) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.emitLocked(x, typ, fields)
}

// quietEvents do not touch the run status's last_event: real Hermes puts deltas and
// interim text straight on the stream (SP/gateway/platforms/api_server_runs.py:921-935),
// while tool and reasoning events go through _push, which records last_event and keeps
// the current status, whatever it is (api_server_runs.py:319-322).
var quietEvents = map[string]bool{"message.delta": true, "message.interim": true}

func (s *Server) emitLocked(x *run, typ string, fields map[string]any) {
	ev := map[string]any{}
	for k, v := range fields {
		ev[k] = v
	}
	ev["event"], ev["run_id"], ev["timestamp"] = typ, x.id, now()
	if s.opts.OnEmit != nil {
		s.opts.OnEmit(x.id, typ, fields, time.Now())
	}
	if !quietEvents[typ] {
		x.lastEvent, x.updated = typ, now()
	}
	if x.stream != nil {
		x.stream.put(ev)
		if strings.HasPrefix(typ, "run.") {
			x.stream.put(nil) // the close sentinel after the terminal event (api_server_runs.py:993-997)
		}
	}
}

func (s *Server) finishLocked(x *run, status, event string, fields map[string]any, extra map[string]any) {
	if terminal(x.status) {
		return
	}
	x.status = status
	x.pending = ""
	x.terminalFields = extra
	all := map[string]any{}
	for k, v := range fields {
		all[k] = v
	}
	for k, v := range extra {
		all[k] = v
	}
	s.emitLocked(x, event, all)
	s.recordLocked(x)
}

// cancelledFields are what a stopped turn's terminal status and event carry
// (api_server_runs.py:181-200 terminal_run_status with interrupted=true).
var cancelledFields = map[string]any{"completed": false, "partial": false, "interrupted": true}

// InterruptPlaceholder is the assistant text real Hermes stores for a stopped turn that
// produced no output (SP/agent/agent_runtime_helpers_placeholders.py:16).
const InterruptPlaceholder = "[interrupt: no assistant output for this turn]"

type chatMsg struct {
	Role       string `json:"role"`
	Content    string `json:"content"`
	ToolCalls  []any  `json:"tool_calls,omitempty"`
	ToolCallID string `json:"tool_call_id,omitempty"`
}

type toolCall struct {
	ID   string
	Name string
	Args string
}

// execute is the agent loop: take the session's turn lease, call the model, stream
// deltas, run (or ask to run) tools, repeat until a final answer.
func (s *Server) execute(ctx context.Context, x *run, input string, history []message, instructions string, hasHistory bool) {
	s.mu.Lock()
	if x.status != "queued" {
		s.mu.Unlock()
		return
	}
	// The run reports running as soon as its task starts (api_server_runs.py:957), even
	// while its turn waits for the session below.
	x.status, x.updated = "running", now()
	s.recordLocked(x)
	lock := s.locks[x.sessionID]
	if lock == nil {
		lock = make(chan struct{}, 1)
		s.locks[x.sessionID] = lock
	}
	s.mu.Unlock()
	// One turn at a time per session: a second run on a busy session waits for the first
	// to end, then reloads the transcript it left (SP/agent/turn_facade_lease.py:297-350
	// admit_durable_turn_lease, :378-396 the reload after the wait).
	select {
	case lock <- struct{}{}:
	case <-ctx.Done():
		if s.ctx.Err() == nil {
			s.mu.Lock()
			s.finishLocked(x, "cancelled", "run.cancelled", nil, cancelledFields)
			s.mu.Unlock()
		}
		return
	}
	defer func() { <-lock }()

	s.mu.Lock()
	msgs := []chatMsg{{Role: "system", Content: "You are Hermes, a helpful agent." + prefix(" ", instructions)}}
	if !hasHistory {
		if se := s.sessions[x.sessionID]; se != nil {
			for _, m := range se.Messages {
				msgs = append(msgs, chatMsg{Role: m.Role, Content: m.Content})
			}
		}
	}
	for _, m := range history {
		msgs = append(msgs, chatMsg{Role: m.Role, Content: m.Content})
	}
	s.mu.Unlock()
	msgs = append(msgs, chatMsg{Role: "user", Content: input})

	var total usage
	// A stopped turn leaves its user row and an assistant row with what it had streamed,
	// or the interrupt placeholder (observed: hermesreal TestSameSessionRunsAreSerialized).
	stopped := func(partial string) {
		s.mu.Lock()
		if partial == "" {
			partial = InterruptPlaceholder
		}
		if !terminal(x.status) {
			s.appendTranscript(x, input, partial, "")
		}
		s.finishLocked(x, "cancelled", "run.cancelled", nil, cancelledFields)
		s.mu.Unlock()
	}
	for turn := 0; turn < 8; turn++ {
		text, calls, u, err := s.callModel(ctx, x, msgs)
		total.InputTokens += u.InputTokens
		total.OutputTokens += u.OutputTokens
		total.TotalTokens += u.TotalTokens
		if ctx.Err() != nil {
			if s.ctx.Err() != nil {
				return // the gateway is shutting down: the run is left unsettled
			}
			stopped(text)
			return
		}
		if err != nil {
			msg := err.Error()
			s.mu.Lock()
			x.errMsg = &msg
			s.finishLocked(x, "failed", "run.failed", map[string]any{"error": msg}, nil)
			s.mu.Unlock()
			return
		}
		if len(calls) == 0 {
			s.mu.Lock()
			// A finished turn also announces its final text as reasoning.available before
			// run.completed (api_server_runs.py:93-97; observed on every plain completion).
			s.emitLocked(x, "reasoning.available", map[string]any{"text": text})
			x.output, x.usage = &text, &total
			s.appendTranscript(x, input, text, "stop")
			// run.completed and the completed status carry completed/partial/interrupted and
			// runtime (api_server_runs.py:181-200, :986-992).
			extra := map[string]any{"completed": true, "partial": false, "interrupted": false,
				"runtime": map[string]any{"provider": "custom", "model": s.upstreamModel(x), "route_source": "global"}}
			s.finishLocked(x, "completed", "run.completed", map[string]any{"output": text, "usage": total}, extra)
			s.mu.Unlock()
			return
		}
		if strings.TrimSpace(text) != "" {
			// Text beside tool calls is also sent as message.interim (api_server_runs.py:927-935).
			s.emit(x, "message.interim", map[string]any{"text": text, "already_streamed": true})
		}
		tcs := []any{}
		for _, c := range calls {
			tcs = append(tcs, map[string]any{"id": c.ID, "type": "function", "function": map[string]any{"name": c.Name, "arguments": c.Args}})
		}
		msgs = append(msgs, chatMsg{Role: "assistant", Content: text, ToolCalls: tcs})
		for _, c := range calls {
			result, ok := s.runTool(ctx, x, c)
			if !ok {
				if s.ctx.Err() != nil {
					return
				}
				stopped(text)
				return
			}
			msgs = append(msgs, chatMsg{Role: "tool", Content: result, ToolCallID: c.ID})
		}
	}
	msg := "iteration budget exhausted"
	s.mu.Lock()
	x.errMsg = &msg
	s.finishLocked(x, "failed", "run.failed", map[string]any{"error": msg}, map[string]any{"completed": false, "partial": false, "interrupted": false})
	s.mu.Unlock()
}

func (s *Server) upstreamModel(x *run) string {
	if x.model == "" || x.model == "hermes-agent" {
		return s.opts.Model
	}
	return x.model
}

func prefix(p, s string) string {
	if s == "" {
		return ""
	}
	return p + s
}

func (s *Server) appendTranscript(x *run, input, output, finish string) {
	se := s.sessions[x.sessionID]
	if se == nil {
		se = &session{ID: x.sessionID, Source: "api_server", StartedAt: now()}
		s.sessions[x.sessionID] = se
	}
	next := int64(len(se.Messages) + 1)
	se.Messages = append(se.Messages, message{ID: next, Role: "user", Content: input, Timestamp: now()},
		message{ID: next + 1, Role: "assistant", Content: output, Timestamp: now(), Finish: finish})
	s.saveLocked()
}

// runTool asks for approval when needed, then "executes" the tool. ok=false means the
// run was stopped meanwhile.
func (s *Server) runTool(ctx context.Context, x *run, c toolCall) (string, bool) {
	var args map[string]any
	_ = json.Unmarshal([]byte(c.Args), &args)
	preview := c.Args
	if cmd, ok := args["command"].(string); ok {
		preview = cmd
	} else if p, ok := args["path"].(string); ok {
		preview = p
	}
	if slices.Contains(s.opts.ApprovalTools, c.Name) {
		// The approval.request event is the approval data (command, pattern_key(s),
		// description, allow_permanent, allow_session: SP/tools/approval.py:838-843) plus a
		// request_id (uuid4 hex, SP/tools/approval_gateway_wait.py:32), the envelope and
		// choices (SP/gateway/platforms/api_server.py:107-126). No approval_id, no expires_at.
		reqID := newHex(16)
		s.mu.Lock()
		ev := map[string]any{"command": preview, "pattern_key": "dangerous " + c.Name, "pattern_keys": []string{"dangerous " + c.Name},
			"description": "dangerous command: " + c.Name, "allow_permanent": true, "allow_session": true,
			"request_id": reqID, "choices": []string{"once", "session", "always", "deny"}}
		x.status, x.pending = "waiting_for_approval", reqID
		s.emitLocked(x, "approval.request", ev)
		ev["event"], ev["run_id"], ev["timestamp"] = "approval.request", x.id, now()
		x.approval = ev
		s.recordLocked(x)
		s.mu.Unlock()
		var ans approvalAnswer
		timer := time.NewTimer(s.opts.ApprovalTTL)
		defer timer.Stop()
		select {
		case ans = <-x.approvalCh: // approve() answered it and queued approval.responded
		case <-ctx.Done():
			return "", false
		case <-timer.C:
			// An expiry denies the command and announces nothing: the status stays
			// waiting_for_approval with the stale approval object until something sets a
			// new status (api_server_runs.py:854-860 sets it; _push at :319-322 keeps it;
			// only the approval POST, :1156-1158 and :1213, resets it to running). Answering
			// the expired request then gets 409 approval_not_pending (:1208-1211).
			s.mu.Lock()
			if x.pending == reqID {
				x.pending = ""
			}
			s.mu.Unlock()
			return "BLOCKED: the user did not answer the approval request in time (timed out without user response). Silence is not consent.", true
		}
		if ans.choice == "deny" {
			return "The user denied this command.", true
		}
	}
	start := time.Now()
	s.emit(x, "tool.started", map[string]any{"tool": c.Name, "preview": preview})
	out, failed := "ok", false
	switch c.Name {
	case "write_file":
		out, failed = s.writeFile(x, args)
	case "terminal":
		out = "(the double runs nothing) exit 0"
	default:
		out, failed = "unknown tool", true
	}
	select {
	case <-ctx.Done():
		return "", false
	default:
	}
	// tool.completed carries a bounded result preview (api_server_runs.py:333-335, 101-109).
	p := out
	if len(p) > 500 {
		p = p[:497] + "..."
	}
	s.emit(x, "tool.completed", map[string]any{"tool": c.Name, "duration": float64(time.Since(start).Milliseconds()) / 1000, "error": failed, "preview": p})
	return out, true
}

func (s *Server) writeFile(x *run, args map[string]any) (string, bool) {
	if s.opts.ArtifactDir == "" {
		return "no workspace", true
	}
	p, _ := args["path"].(string)
	content, _ := args["content"].(string)
	clean := filepath.Clean("/" + p)[1:]
	if clean == "" {
		return "bad path", true
	}
	full := filepath.Join(s.opts.ArtifactDir, x.id, clean)
	if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
		return err.Error(), true
	}
	if size, ok := args["size"].(float64); ok && size > 0 {
		// Large synthetic outputs: a deterministic byte pattern of the given size.
		buf := make([]byte, int(size))
		for i := range buf {
			buf[i] = byte(i*31 + i/1024)
		}
		if err := os.WriteFile(full, buf, 0o644); err != nil {
			return err.Error(), true
		}
		return "wrote " + clean, false
	}
	if err := os.WriteFile(full, []byte(content), 0o644); err != nil {
		return err.Error(), true
	}
	return "wrote " + clean, false
}

// callModel streams one completion, emitting message.delta for each content chunk.
func (s *Server) callModel(ctx context.Context, x *run, msgs []chatMsg) (string, []toolCall, usage, error) {
	model := x.model
	if model == "" || model == "hermes-agent" {
		model = s.opts.Model
	}
	body, _ := json.Marshal(map[string]any{"model": model, "messages": msgs, "stream": true,
		"stream_options": map[string]any{"include_usage": true}, "tools": toolSchemas})
	req, err := http.NewRequestWithContext(ctx, "POST", strings.TrimRight(s.opts.ModelURL, "/")+"/chat/completions", bytes.NewReader(body))
	if err != nil {
		return "", nil, usage{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	if s.opts.ModelKey != "" {
		req.Header.Set("Authorization", "Bearer "+s.opts.ModelKey)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", nil, usage{}, fmt.Errorf("model endpoint unreachable: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", nil, usage{}, fmt.Errorf("model endpoint answered %d", resp.StatusCode)
	}
	var text strings.Builder
	calls := map[int]*toolCall{}
	var u usage
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 8<<20)
	sawDone := false
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "data: ") {
			continue
		}
		data := strings.TrimPrefix(line, "data: ")
		if data == "[DONE]" {
			sawDone = true
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
				} `json:"delta"`
			} `json:"choices"`
			Usage *struct {
				Prompt     int `json:"prompt_tokens"`
				Completion int `json:"completion_tokens"`
				Total      int `json:"total_tokens"`
			} `json:"usage"`
		}
		if json.Unmarshal([]byte(data), &chunk) != nil {
			continue
		}
		if chunk.Usage != nil {
			u = usage{InputTokens: chunk.Usage.Prompt, OutputTokens: chunk.Usage.Completion, TotalTokens: chunk.Usage.Total}
		}
		for _, ch := range chunk.Choices {
			if ch.Delta.Content != "" {
				text.WriteString(ch.Delta.Content)
				s.emit(x, "message.delta", map[string]any{"delta": ch.Delta.Content})
			}
			for _, tc := range ch.Delta.ToolCalls {
				c := calls[tc.Index]
				if c == nil {
					c = &toolCall{}
					calls[tc.Index] = c
				}
				if tc.ID != "" {
					c.ID = tc.ID
				}
				c.Name += tc.Function.Name
				c.Args += tc.Function.Arguments
			}
		}
	}
	if ctx.Err() != nil {
		return text.String(), nil, u, ctx.Err() // what was streamed before the stop
	}
	if !sawDone {
		return "", nil, u, errors.New("the model stream ended early")
	}
	var out []toolCall
	for i := 0; i < len(calls); i++ {
		if c := calls[i]; c != nil {
			out = append(out, *c)
		}
	}
	return text.String(), out, u, nil
}
