package harness

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"privateassistant/hermes"
)

// Hermes drives a Hermes Agent API server.
type Hermes struct {
	Client *hermes.Client
	// Build reads the installed Hermes's version and commit for the version the server
	// reports (hermes.ReadBuild on the agent's host); nil: only the server's version is known.
	Build func(version string) hermes.Build
	// CheckTTL is how long a capability check is trusted (0: CheckTTL).
	CheckTTL time.Duration

	mu        sync.Mutex
	checked   *Check    // the last check, reused for CheckTTL
	checkOK   error     // its verdict
	checkedAt time.Time // when (monotonic)
}

var _ Harness = (*Hermes)(nil)

// Kind implements Harness.
func (h *Hermes) Kind() Kind { return HermesKind }

func mapErr(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, hermes.ErrNotFound):
		return fmt.Errorf("%w: %v", ErrNotFound, err)
	case errors.Is(err, hermes.ErrUnavailable), errors.Is(err, hermes.ErrRateLimited):
		return fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	return err
}

// Ready checks /health and refuses a Hermes without durable run idempotency.
func (h *Hermes) Ready(ctx context.Context) (Info, error) {
	hl, err := h.Client.Health(ctx)
	if err != nil {
		return Info{}, mapErr(err)
	}
	caps, err := h.Client.Capabilities(ctx)
	if err != nil {
		return Info{}, mapErr(err)
	}
	var raw map[string]any
	_ = json.Unmarshal(caps.Raw, &raw)
	info := Info{Version: hl.Version, Capabilities: raw}
	return info, caps.CheckRunnable()
}

var (
	_ Retainer = (*Hermes)(nil)
	_ Checker  = (*Hermes)(nil)
)

// Retention is the server's features.runs_idempotency.retention_seconds (Hermes 0.22:
// 86400; records are pruned once their run is terminal and this old), from the latest
// capability check.
func (h *Hermes) Retention(ctx context.Context) (time.Duration, error) {
	c, err := h.Check(ctx)
	if c.Capabilities == nil {
		return 0, err
	}
	return time.Duration(c.Idempotency.RetentionSeconds) * time.Second, nil
}

// Check reads the server's version (/health), its capabilities and the installed build,
// at most once per CheckTTL: ErrIncapable when Hermes no longer offers durable, retained
// run idempotency or a run feature the executor relies on.
func (h *Hermes) Check(ctx context.Context) (Check, error) {
	h.mu.Lock()
	defer h.mu.Unlock()
	ttl := h.CheckTTL
	if ttl <= 0 {
		ttl = CheckTTL
	}
	if h.checked != nil && time.Since(h.checkedAt) < ttl {
		return *h.checked, h.checkOK
	}
	hl, err := h.Client.Health(ctx)
	if err != nil {
		return Check{}, mapErr(err)
	}
	caps, err := h.Client.Capabilities(ctx)
	if err != nil {
		return Check{}, mapErr(err)
	}
	b := hermes.Build{Version: hl.Version, CommitUnknown: "the agent does not read this Hermes's installation"}
	if h.Build != nil {
		b = h.Build(hl.Version)
	}
	c := Check{Build: b, Capabilities: caps.Summary(), Idempotency: caps.Idempotency(), CheckedAt: time.Now().UTC()}
	verdict := caps.CheckRunnable()
	if verdict != nil {
		verdict = fmt.Errorf("%w: %v", ErrIncapable, verdict)
	}
	h.checked, h.checkOK, h.checkedAt = &c, verdict, time.Now()
	return c, verdict
}

// Submit re-checks the capabilities (Check) and refuses, before anything reaches Hermes,
// a server that lost durable run idempotency; then it creates the session when needed
// (with a deterministic id, so a retry finds it) and submits the run with
// Idempotency-Key = the run id.
func (h *Hermes) Submit(ctx context.Context, s Submission) (Attached, error) {
	if _, err := h.Check(ctx); err != nil {
		return Attached{}, err
	}
	sid := s.SessionID
	if sid == "" {
		sid = s.SessionSeed
		_, err := h.Client.CreateSession(ctx, hermes.CreateSessionRequest{ID: sid, Title: sid})
		var he *hermes.Error
		if err != nil && !(errors.As(err, &he) && (he.Code == "session_exists" || he.Code == "invalid_title")) {
			return Attached{}, mapErr(err)
		}
	}
	// The run names itself through its model, so the gateway applies its tool policy.
	req := hermes.RunRequest{Input: s.Input, SessionID: sid, Model: TagModel(s.Model, s.run()), Instructions: s.Instructions}
	for _, m := range s.History {
		req.ConversationHistory = append(req.ConversationHistory, hermes.HistoryMessage{Role: m.Role, Content: m.Content})
	}
	a, err := h.Client.SubmitRun(ctx, s.Key, req)
	if err != nil {
		return Attached{}, mapErr(err)
	}
	return Attached{NativeRunID: a.RunID, SessionID: sid, Replayed: a.Replayed}, nil
}

// Stream opens the one SSE consumer of the run, after the event numbered after (the
// client sends it as Last-Event-ID; -1 gets the whole retained backlog). A dropped
// connection is resumed by the client itself with Last-Event-ID (hermes.Stream).
// hermes.ErrAlreadyStreaming (this client already consumes the run: it never opens a
// second consumer) maps to ErrNotAttachable: the caller follows the run by its status.
func (h *Hermes) Stream(ctx context.Context, id string, after int64) (Stream, error) {
	if after < 0 {
		after = -1
	}
	st, err := h.Client.EventsAfter(ctx, id, after)
	if errors.Is(err, hermes.ErrNotFound) {
		return nil, ErrNotAttachable
	}
	if errors.Is(err, hermes.ErrAlreadyStreaming) {
		return nil, fmt.Errorf("%w: %w", ErrNotAttachable, err)
	}
	if err != nil {
		return nil, mapErr(err)
	}
	return &hermesStream{st: st}, nil
}

type hermesStream struct{ st *hermes.Stream }

func (s *hermesStream) Close() error { return s.st.Close() }

func (s *hermesStream) Next() (Event, error) {
	e, err := s.st.Next()
	switch {
	case errors.Is(err, hermes.ErrMalformed):
		return Event{}, fmt.Errorf("%w: %v", ErrMalformed, err)
	case errors.Is(err, hermes.ErrStreamClosed), errors.Is(err, io.ErrUnexpectedEOF), errors.Is(err, io.EOF):
		return Event{}, ErrStreamEnded
	case err != nil:
		return Event{}, fmt.Errorf("%w: %v", ErrStreamEnded, err)
	}
	return Normalize(e), nil
}

// Normalize maps a Hermes runs-stream event onto an Event.
func Normalize(e hermes.Event) Event {
	out := Event{NativeType: e.Type, Seq: e.Seq}
	switch e.Type {
	case "message.delta":
		out.Kind, out.Text = KindDelta, e.String("delta")
	case "tool.started":
		out.Kind, out.Tool, out.Preview = KindToolStarted, e.String("tool"), e.String("preview")
	case "tool.completed":
		out.Kind, out.Tool, out.Duration, out.ToolError = KindToolCompleted, e.String("tool"), e.Float("duration"), e.Bool("error")
	case "approval.request":
		out.Kind, out.RequestID, out.Command, out.Description = KindApprovalRequest, e.String("request_id"), e.String("command"), e.String("description")
		if out.RequestID == "" {
			out.RequestID = e.String("approval_id")
		}
	case "approval.responded":
		out.Kind, out.Choice, out.RequestID = KindApprovalResponded, e.String("choice"), e.String("request_id")
	case "run.completed":
		out.Kind, out.Text = KindCompleted, e.String("output")
		var u hermes.Usage
		if json.Unmarshal(e.Fields["usage"], &u) == nil {
			out.Usage = &Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, TotalTokens: u.TotalTokens}
		}
	case "run.failed":
		out.Kind, out.Error = KindFailed, e.String("error")
		if strings.TrimSpace(out.Error) == "" {
			// Hermes 0.22 can fail a run with no error text (its run's client went away, e.g.
			// the agent was killed): a failed run always says something.
			out.Error = "Hermes ended the run as failed without giving a reason"
		}
	case "run.cancelled":
		out.Kind = KindCancelled
	case "run.interrupted":
		out.Kind, out.Error = KindInterrupted, "Hermes restarted before this run settled"
	default:
		out.Kind = KindUnknown
	}
	return out
}

// Status reads the native run.
func (h *Hermes) Status(ctx context.Context, id string) (Status, error) {
	rs, err := h.Client.GetRun(ctx, id)
	if err != nil {
		return Status{}, mapErr(err)
	}
	st := Status{State: State(rs.Status), Output: rs.Output}
	if rs.Error != nil {
		st.Error = *rs.Error
	}
	if rs.Usage != nil {
		st.Usage = &Usage{InputTokens: rs.Usage.InputTokens, OutputTokens: rs.Usage.OutputTokens, TotalTokens: rs.Usage.TotalTokens}
	}
	if rs.Status == hermes.StatusWaitingForApproval && len(rs.Approval) > 0 {
		var a map[string]json.RawMessage
		if json.Unmarshal(rs.Approval, &a) == nil {
			ev := Normalize(hermes.Event{Type: "approval.request", Fields: a})
			st.Pending = &ev
		}
	}
	return st, nil
}

// Stop asks the run to stop (the status then moves to stopping, later cancelled).
func (h *Hermes) Stop(ctx context.Context, id string) error {
	_, err := h.Client.StopRun(ctx, id)
	var he *hermes.Error
	if errors.As(err, &he) && he.Code == "run_not_active" {
		return nil // not running in this gateway any more: its status settles it
	}
	return mapErr(err)
}

// Approve forwards one decision.
func (h *Hermes) Approve(ctx context.Context, id, requestID, choice string) error {
	_, err := h.Client.Approve(ctx, id, requestID, choice)
	var he *hermes.Error
	if errors.As(err, &he) && he.Code == "approval_not_pending" {
		return fmt.Errorf("%w: %v", ErrApprovalExpired, err)
	}
	return mapErr(err)
}

// LastAssistant returns the newest assistant message of the session.
func (h *Hermes) LastAssistant(ctx context.Context, sessionID string) (string, error) {
	msgs, err := h.Client.AllSessionMessages(ctx, sessionID)
	if err != nil {
		return "", mapErr(err)
	}
	for i := len(msgs) - 1; i >= 0; i-- {
		if msgs[i].Role == "assistant" && msgs[i].DisplayKind != "hidden" {
			return msgs[i].Content, nil
		}
	}
	return "", nil
}

// TaskLister is a harness that keeps the agent's own task list (Hermes's todo tool): Tasks
// returns the summary the nth todo call of the session's latest turn left (counted from 1
// after the last user message; 0, or an nth not yet stored, means the latest), ok false
// when the session has none. Hermes's tool.completed event names no call, and the model
// goes on while the agent reads, so "the latest" may already be a later call's list.
type TaskLister interface {
	Tasks(ctx context.Context, sessionID string, nth int) (done, total int, ok bool, err error)
}

// TodoTool reports whether tool is Hermes's task-list tool (todo_list; todo its legacy name).
func TodoTool(tool string) bool { return tool == "todo_list" || tool == "todo" }

// Tasks reads a todo tool result of the session: {"todos": […], "summary": {"total",
// "completed", "cancelled", …}}. Cancelled items are not counted: they will never be done.
// An error result (no summary) leaves the list as it was: the result before it counts.
func (h *Hermes) Tasks(ctx context.Context, sessionID string, nth int) (done, total int, ok bool, err error) {
	msgs, err := h.Client.AllSessionMessages(ctx, sessionID)
	if err != nil {
		return 0, 0, false, mapErr(err)
	}
	last := len(msgs) // the todo result to read back from: the latest unless nth is stored
	if nth > 0 {
		turn := 0
		for i := len(msgs) - 1; i >= 0; i-- {
			if msgs[i].Role == "user" {
				turn = i + 1
				break
			}
		}
		for i, n := turn, 0; i < len(msgs); i++ {
			if msgs[i].Role == "tool" && TodoTool(msgs[i].ToolName) {
				if n++; n == nth {
					last = i + 1
					break
				}
			}
		}
	}
	for i := last - 1; i >= 0; i-- {
		m := msgs[i]
		if m.Role != "tool" || !TodoTool(m.ToolName) {
			continue
		}
		var r struct {
			Summary *struct {
				Total     int `json:"total"`
				Completed int `json:"completed"`
				Cancelled int `json:"cancelled"`
			} `json:"summary"`
		}
		if json.Unmarshal([]byte(m.Content), &r) != nil || r.Summary == nil {
			continue // an error result: the list did not change
		}
		total = r.Summary.Total - r.Summary.Cancelled
		return min(r.Summary.Completed, max(total, 0)), max(total, 0), true, nil
	}
	return 0, 0, false, nil
}
