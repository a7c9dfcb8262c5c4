// Package harness is what the executor drives: a native agent runtime that takes a
// submission (idempotent by the run id), streams events, reports status, stops and
// answers approvals. Two implementations: Hermes (its native runs API) and Direct (an
// OpenAI-compatible chat endpoint, streaming, no tools).
package harness

import (
	"context"
	"errors"
	"time"

	"privateassistant/hermes"
	"privateassistant/runconfig"
)

// Kind names a harness implementation (a harness profile's "kind").
type Kind string

// Harness kinds.
const (
	HermesKind Kind = "hermes" // Hermes Agent's native runs API
	DirectKind Kind = "direct" // an OpenAI-compatible chat endpoint: no tools, no native memory
)

// EventKind is the kind of a normalized native event.
type EventKind string

// Event kinds, normalized from the native stream.
const (
	KindDelta             EventKind = "delta"
	KindToolStarted       EventKind = "tool.started"
	KindToolCompleted     EventKind = "tool.completed"
	KindApprovalRequest   EventKind = "approval.request"
	KindApprovalResponded EventKind = "approval.responded"
	KindCompleted         EventKind = "completed"
	KindFailed            EventKind = "failed"
	KindCancelled         EventKind = "cancelled"
	KindInterrupted       EventKind = "interrupted"
	KindUnknown           EventKind = "unknown"
)

// Terminal reports whether a kind ends the run.
func Terminal(kind EventKind) bool {
	switch kind {
	case KindCompleted, KindFailed, KindCancelled, KindInterrupted:
		return true
	}
	return false
}

// Usage is token usage.
type Usage struct {
	InputTokens  int `json:"inputTokens"`
	OutputTokens int `json:"outputTokens"`
	TotalTokens  int `json:"totalTokens"`
}

// Event is one normalized native event.
type Event struct {
	Kind        EventKind
	Text        string // delta text, or the final output
	Tool        string
	Preview     string
	Duration    float64
	ToolError   bool
	RequestID   string
	Command     string
	Description string
	Choice      string
	Error       string
	Usage       *Usage
	NativeType  string // the native event name (for unknown kinds)
	// Seq is the native stream's number of this event (Hermes's `id:`/"seq"), -1 when the
	// harness does not number its events. A new attempt resumes after the last one it
	// published (Stream's after).
	Seq int64
}

// Message is one turn of portable context.
type Message struct {
	Role    string
	Content string
}

// Submission is one run to start.
type Submission struct {
	Key          string    // idempotency key: the run id, the same on every attempt
	Input        string    // the user's message
	History      []Message // portable context for a fresh session (empty when continuing one)
	SessionID    string    // a native session to continue ("" creates SessionSeed)
	SessionSeed  string    // the id to create a fresh session with (deterministic per run)
	Model        string    // the route alias
	Instructions string
	MaxTokens    int
	// Tools is the run's effective tool policy (pinned in its bindings). The inference
	// gateway enforces it on every model call of the run; the direct harness also refuses
	// an answer calling a tool outside it itself. The zero value allows no tool.
	Tools runconfig.ToolPolicy
	// Run is the run the model calls name (TagModel), when Key is not the run id (a
	// paused run's resumption is keyed "<run id>:p<n>"); "" means Key.
	Run string
}

// TagModel is the model a harness asks for on behalf of run: "<route alias>@<run id>".
// Hermes sends a run's requested model verbatim on every model call of that run, so the
// inference gateway knows the run, and so its tool policy, although Hermes cannot name
// the run any other way (agent/gateway/policy.go).
func TagModel(alias, run string) string {
	if alias == "" || run == "" {
		return alias
	}
	return alias + "@" + run
}

// Attached names the native run (and session) a submission maps to.
type Attached struct {
	NativeRunID string
	SessionID   string
	Replayed    bool // the key matched an earlier submission: re-attached
}

// State is a native run's state as its harness reports it (issue 31 item 4: one type where
// the harness and the executor meet, never compared as a bare string).
type State string

// Native run states (Hermes's run statuses; the direct harness uses the same words).
const (
	StateQueued             State = "queued"
	StateRunning            State = "running"
	StateWaitingForApproval State = "waiting_for_approval"
	StateStopping           State = "stopping"
	StateCompleted          State = "completed"
	StateFailed             State = "failed"
	StateCancelled          State = "cancelled"
	StateInterrupted        State = "interrupted"
)

// Kind is the event a state ends a run with (KindCompleted, …) for a terminal state, and
// the state's own word as a kind otherwise (never terminal).
func (s State) Kind() EventKind {
	switch s {
	case StateCompleted:
		return KindCompleted
	case StateFailed:
		return KindFailed
	case StateCancelled:
		return KindCancelled
	case StateInterrupted:
		return KindInterrupted
	}
	return EventKind(s)
}

// Terminal reports whether the native run has ended.
func (s State) Terminal() bool { return Terminal(s.Kind()) }

// Status is the native run as it is now.
type Status struct {
	State  State
	Output *string
	Error  string
	Usage  *Usage
	// Pending is the outstanding approval request while State is waiting_for_approval.
	Pending *Event
}

// Stream yields events until a terminal one; then io.EOF-like errors.
type Stream interface {
	Next() (Event, error)
	Close() error
}

// Errors a caller classifies.
var (
	// ErrNotAttachable: the event stream is gone (consumed, dropped or expired): reconcile
	// through Status instead.
	ErrNotAttachable = errors.New("harness: event stream cannot be attached")
	// ErrStreamEnded: the stream ended without a terminal event (EOF is not completion).
	ErrStreamEnded = errors.New("harness: stream ended without a terminal event")
	// ErrMalformed: one frame could not be read; the stream may continue.
	ErrMalformed = errors.New("harness: malformed event")
	// ErrUnavailable: the harness could not be reached or failed (5xx).
	ErrUnavailable = errors.New("harness: unavailable")
	// ErrNotFound: the native run is unknown.
	ErrNotFound = errors.New("harness: native run not found")
	// ErrApprovalExpired: the approval is no longer pending (Hermes answers 409
	// approval_not_pending; after an unanswered approval timed out, real Hermes denied the
	// tool and keeps the stale approval in the run's status). It must not be asked again.
	ErrApprovalExpired = errors.New("harness: the approval is no longer pending (expired or answered)")
)

// Harness is one native runtime.
type Harness interface {
	Kind() Kind
	// Ready checks reachability and the capabilities the executor relies on.
	Ready(ctx context.Context) (Info, error)
	Submit(ctx context.Context, s Submission) (Attached, error)
	// Stream opens the run's one event stream after the native event numbered after
	// (-1: from the start). A harness that does not number events ignores after.
	Stream(ctx context.Context, nativeRunID string, after int64) (Stream, error)
	Status(ctx context.Context, nativeRunID string) (Status, error)
	Stop(ctx context.Context, nativeRunID string) error
	Approve(ctx context.Context, nativeRunID, requestID, choice string) error
	// LastAssistant reads the final answer from the native transcript (reconciliation when
	// the status carries no output); "" when unknown.
	LastAssistant(ctx context.Context, sessionID string) (string, error)
}

// Retainer is a harness whose idempotency records expire: past Retention after a
// submission, a resubmission with the same key may start a second native run, so the
// executor never resubmits then (it reconciles the native run it knows, or marks the run
// interrupted). Direct keeps its runs in the agent's memory and is not a Retainer.
type Retainer interface {
	// Retention is how long the harness keeps a submission's idempotency record (0:
	// unknown).
	Retention(ctx context.Context) (time.Duration, error)
}

// CheckTTL is how long a harness trusts its last capability check before a submission
// checks again.
const CheckTTL = 30 * time.Second

// ErrIncapable: the harness no longer offers what the executor relies on (durable,
// retained run idempotency, run status, events and stop). Nothing is submitted to it.
var ErrIncapable = errors.New("harness: refused, it lacks a capability runs rely on")

// Check is what a capability check found: the build, the capability output and when.
// The executor records it on the run's binding (harnessCheck) at every submission.
type Check struct {
	Build        hermes.Build           `json:"build"`
	Capabilities map[string]any         `json:"capabilities"`
	Idempotency  hermes.RunsIdempotency `json:"-"`
	CheckedAt    time.Time              `json:"checkedAt"`
}

// Checker is a harness whose capabilities can change under a running agent (a Hermes
// restarted on another version, or its idempotency store fallen back to memory): the
// executor checks it before each submission and refuses to submit when Check fails with
// ErrIncapable.
type Checker interface {
	Check(ctx context.Context) (Check, error)
}

// Info is what Ready learned.
type Info struct {
	Version      string
	Capabilities map[string]any
}

// run is the run the submission's model calls name.
func (s Submission) run() string {
	if s.Run != "" {
		return s.Run
	}
	return s.Key
}
