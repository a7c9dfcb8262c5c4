package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Normalized, user-safe event types. Hermes's native events are mapped onto these by the
// executor; nothing else reaches a browser.
const (
	EventRunQueued        = "run.queued"
	EventRunStatus        = "run.status" // status, phase, queue reason/position, progress
	EventMessageDelta     = "message.delta"
	EventMessageReset     = "message.reset" // discard the partial text: the answer restarts
	EventToolStarted      = "tool.started"
	EventToolCompleted    = "tool.completed"
	EventApprovalRequest  = "approval.request"
	EventApprovalResponse = "approval.responded"
	EventArtifact         = "artifact.created"
	EventRunCompleted     = "run.completed"
	EventRunFailed        = "run.failed"
	EventRunCancelled     = "run.cancelled"
	EventRunInterrupted   = "run.interrupted"
)

// IsTerminalEvent reports whether an event ends its run.
func IsTerminalEvent(t string) bool {
	switch t {
	case EventRunCompleted, EventRunFailed, EventRunCancelled, EventRunInterrupted:
		return true
	}
	return false
}

// EventData is the typed data of one event type: each event type has exactly one data
// struct, and the struct names its type, so a writer cannot pair a type with the wrong data.
type EventData interface{ EventType() string }

// Usage is a run's token usage as events report it.
type Usage struct {
	InputTokens  int `json:"inputTokens"`
	OutputTokens int `json:"outputTokens"`
	TotalTokens  int `json:"totalTokens"`
}

// RunStatusData is run.status: the run's status and phase changed. QueueReason and
// QueuePosition are null outside waiting_for_resource.
type RunStatusData struct {
	Status        string    `json:"status"`
	Phase         string    `json:"phase"`
	QueueReason   *string   `json:"queueReason"`
	QueuePosition *int64    `json:"queuePosition"`
	Progress      *Progress `json:"progress,omitempty"` // absent: unchanged
}

// Progress counts a run's work in real units only (issue 32 item 6): Hermes's own task
// list (its todo tool's items, unit "tasks"), artifacts uploaded, files staged. Never
// tokens, never a percentage.
type Progress struct {
	Completed int64  `json:"completed"`
	Total     int64  `json:"total"`
	Unit      string `json:"unit"`
}

// MessageDeltaData is message.delta: more assistant text.
type MessageDeltaData struct {
	Text string `json:"text"`
}

// MessageResetData is message.reset: the client drops the partial text.
type MessageResetData struct {
	Reason string `json:"reason"`
}

// ToolStartedData is tool.started.
type ToolStartedData struct {
	Tool    string `json:"tool"`
	Preview string `json:"preview"`
}

// ToolCompletedData is tool.completed.
type ToolCompletedData struct {
	Tool        string  `json:"tool"`
	DurationSec float64 `json:"durationSec"`
	Error       bool    `json:"error"`
}

// ApprovalRequestData is approval.request: a tool call waits for the user's decision.
type ApprovalRequestData struct {
	RequestID   string   `json:"requestId"`
	Command     string   `json:"command"`
	Description string   `json:"description"`
	Choices     []string `json:"choices"`
}

// ApprovalRespondedData is approval.responded.
type ApprovalRespondedData struct {
	RequestID string `json:"requestId"`
	Choice    string `json:"choice"`
	// Reason says why when the user did not decide (e.g. the approval expired and the
	// harness denied the command).
	Reason string `json:"reason,omitempty"`
}

// ArtifactData is artifact.created.
type ArtifactData struct {
	ArtifactID string `json:"artifactId"`
	Filename   string `json:"filename"`
	MimeType   string `json:"mimeType"`
	Size       int64  `json:"size"`
	Checksum   string `json:"checksum"`
}

// RunEndData is the data of every terminal event; Type picks which one (run.completed,
// run.failed, run.cancelled or run.interrupted).
type RunEndData struct {
	Type             string            `json:"-"`
	Status           string            `json:"status"`
	Usage            *Usage            `json:"usage,omitempty"`
	Error            string            `json:"error,omitempty"`
	Reason           string            `json:"reason,omitempty"`
	MessageID        string            `json:"messageId,omitempty"`
	SkippedArtifacts []SkippedArtifact `json:"skippedArtifacts,omitempty"`
}

// SkippedArtifact names a file that was not uploaded and why (its JSON keys are
// capitalized, as they always were).
type SkippedArtifact struct {
	Name, Reason string
}

func (RunStatusData) EventType() string         { return EventRunStatus }
func (MessageDeltaData) EventType() string      { return EventMessageDelta }
func (MessageResetData) EventType() string      { return EventMessageReset }
func (ToolStartedData) EventType() string       { return EventToolStarted }
func (ToolCompletedData) EventType() string     { return EventToolCompleted }
func (ApprovalRequestData) EventType() string   { return EventApprovalRequest }
func (ApprovalRespondedData) EventType() string { return EventApprovalResponse }
func (ArtifactData) EventType() string          { return EventArtifact }
func (d RunEndData) EventType() string          { return d.Type }

// RunEndType returns the terminal event type for a terminal run status ("" otherwise).
func RunEndType(status string) string {
	switch status {
	case "completed":
		return EventRunCompleted
	case "failed":
		return EventRunFailed
	case "cancelled":
		return EventRunCancelled
	case "interrupted":
		return EventRunInterrupted
	}
	return ""
}

// Event is one normalized run event with its per-run sequence (1, 2, 3, … no gaps).
type Event struct {
	Sequence int64           `json:"sequence"`
	Type     string          `json:"type"`
	Data     json.RawMessage `json:"data,omitempty"`
	At       time.Time       `json:"at"`
}

// ErrDuplicateEvent: the stream already holds this sequence (or a later one).
var ErrDuplicateEvent = errors.New("event sequence already appended")

// AppendEvent adds ev to the run's stream with the entry id "<sequence>-0". Redis refuses
// an id that is not above the stream's last one, which makes a replayed append (a ghost
// handler, a retry) a detectable no-op instead of a duplicate.
//
// It is unfenced and numbers nothing: it exists for test fixtures. Production code writes
// a run's stream only through queue/eventlog, the run's one fenced writer.
func AppendEvent(ctx context.Context, rdb redis.Cmdable, runID string, ev Event) error {
	if ev.Sequence < 1 {
		return fmt.Errorf("append event: sequence must be ≥ 1, got %d", ev.Sequence)
	}
	b, err := json.Marshal(ev)
	if err != nil {
		return err
	}
	err = rdb.XAdd(ctx, &redis.XAddArgs{Stream: EventsKey(runID), ID: strconv.FormatInt(ev.Sequence, 10) + "-0", Values: []any{"e", b}}).Err()
	if err != nil && strings.Contains(err.Error(), "equal or smaller") {
		return fmt.Errorf("append event %d to %s: %w", ev.Sequence, runID, ErrDuplicateEvent)
	}
	return err
}

// ReadEvents returns events with sequence > after, at most count (0: all), oldest first.
// first is the lowest sequence the stream still holds (0 when empty), so a caller can tell
// whether the range it wanted was trimmed away.
func ReadEvents(ctx context.Context, rdb redis.Cmdable, runID string, after int64, count int64) (evs []Event, first int64, err error) {
	start := "(" + strconv.FormatInt(after, 10) + "-0"
	if after <= 0 {
		start = "-"
	}
	var msgs []redis.XMessage
	if count > 0 {
		msgs, err = rdb.XRangeN(ctx, EventsKey(runID), start, "+", count).Result()
	} else {
		msgs, err = rdb.XRange(ctx, EventsKey(runID), start, "+").Result()
	}
	if err != nil {
		return nil, 0, err
	}
	evs, err = decodeMessages(msgs)
	if err != nil {
		return nil, 0, err
	}
	head, err := rdb.XRangeN(ctx, EventsKey(runID), "-", "+", 1).Result()
	if err != nil {
		return nil, 0, err
	}
	if len(head) == 1 {
		first = entrySeq(head[0].ID)
	}
	return evs, first, nil
}

// LatestEvents returns the run's newest events, at most count, newest first.
func LatestEvents(ctx context.Context, rdb redis.Cmdable, runID string, count int64) ([]Event, error) {
	msgs, err := rdb.XRevRangeN(ctx, EventsKey(runID), "+", "-", count).Result()
	if err != nil {
		return nil, err
	}
	return decodeMessages(msgs)
}

func decodeMessages(msgs []redis.XMessage) ([]Event, error) {
	out := make([]Event, 0, len(msgs))
	for _, m := range msgs {
		raw, _ := m.Values["e"].(string)
		var ev Event
		if err := json.Unmarshal([]byte(raw), &ev); err != nil {
			return nil, fmt.Errorf("decode event %s: %w", m.ID, err)
		}
		out = append(out, ev)
	}
	return out, nil
}

func entrySeq(id string) int64 {
	ms, _, _ := strings.Cut(id, "-")
	n, _ := strconv.ParseInt(ms, 10, 64)
	return n
}

// WaitEvents blocks up to wait for events after the given sequence (XREAD BLOCK).
func WaitEvents(ctx context.Context, rdb redis.Cmdable, runID string, after int64, wait time.Duration) ([]Event, error) {
	res, err := rdb.XRead(ctx, &redis.XReadArgs{
		Streams: []string{EventsKey(runID), strconv.FormatInt(max(after, 0), 10) + "-0"},
		Block:   wait, Count: 1000,
	}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, nil
	}
	return decodeMessages(res[0].Messages)
}

// Control is a command to a run's executor.
type Control struct {
	Type      string `json:"type"` // "cancel" or "approval"
	RequestID string `json:"requestId,omitempty"`
	Choice    string `json:"choice,omitempty"` // once | deny
	By        string `json:"by,omitempty"`     // the verified user id
}

// Control command types.
const (
	ControlCancel   = "cancel"
	ControlApproval = "approval"
)

// SendControl appends a command to the run's control stream.
func SendControl(ctx context.Context, rdb redis.Cmdable, runID string, c Control) error {
	b, err := json.Marshal(c)
	if err != nil {
		return err
	}
	return rdb.XAdd(ctx, &redis.XAddArgs{Stream: ControlKey(runID), Values: []any{"c", b}}).Err()
}

// ReadControl blocks up to wait for commands after the stream id lastID ("0" for all).
// It returns the commands and the id to continue from.
func ReadControl(ctx context.Context, rdb redis.Cmdable, runID, lastID string, wait time.Duration) ([]Control, string, error) {
	res, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{ControlKey(runID), lastID}, Block: wait, Count: 100}).Result()
	if errors.Is(err, redis.Nil) {
		return nil, lastID, nil
	}
	if err != nil {
		return nil, lastID, err
	}
	var out []Control
	for _, s := range res {
		for _, m := range s.Messages {
			raw, _ := m.Values["c"].(string)
			var c Control
			if json.Unmarshal([]byte(raw), &c) == nil {
				out = append(out, c)
			}
			lastID = m.ID
		}
	}
	return out, lastID, nil
}

// RunState is the hot copy of a run's status kept in Redis by the executor.
type RunState struct {
	Status       string
	Terminal     bool
	HeartbeatAt  time.Time
	LastSequence int64 // the highest event sequence appended
}

// SetRunState writes the hot state of a run. Like AppendEvent it is for test fixtures:
// production code moves the hot state only through queue/eventlog (fenced).
func SetRunState(ctx context.Context, rdb redis.Cmdable, runID string, st RunState) error {
	return rdb.HSet(ctx, StateKey(runID), "status", st.Status, "terminal", strconv.FormatBool(st.Terminal),
		"heartbeatAt", st.HeartbeatAt.UTC().Format(time.RFC3339Nano), "lastSeq", st.LastSequence).Err()
}

// GetRunState reads the hot state; ok is false when Redis does not hold it.
func GetRunState(ctx context.Context, rdb redis.Cmdable, runID string) (st RunState, ok bool, err error) {
	m, err := rdb.HGetAll(ctx, StateKey(runID)).Result()
	if err != nil || len(m) == 0 {
		return st, false, err
	}
	st.Status = m["status"]
	st.Terminal = m["terminal"] == "true"
	st.HeartbeatAt, _ = time.Parse(time.RFC3339Nano, m["heartbeatAt"])
	st.LastSequence, _ = strconv.ParseInt(m["lastSeq"], 10, 64)
	return st, true, nil
}

// Snapshot is what a long-poll needs from Redis in one round trip: the events after a
// cursor, the stream's first sequence, and the run's hot state.
type Snapshot struct {
	Events    []Event
	First     int64
	State     RunState
	HaveState bool
}

// ReadSnapshot reads events after `after` (at most count), the stream head and the hot
// state in a single pipelined round trip.
func ReadSnapshot(ctx context.Context, rdb redis.Cmdable, runID string, after, count int64) (Snapshot, error) {
	var s Snapshot
	start := "(" + strconv.FormatInt(after, 10) + "-0"
	if after <= 0 {
		start = "-"
	}
	pipe := rdb.Pipeline()
	evs := pipe.XRangeN(ctx, EventsKey(runID), start, "+", count)
	head := pipe.XRangeN(ctx, EventsKey(runID), "-", "+", 1)
	st := pipe.HGetAll(ctx, StateKey(runID))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return s, err
	}
	var err error
	if s.Events, err = decodeMessages(evs.Val()); err != nil {
		return s, err
	}
	if h := head.Val(); len(h) == 1 {
		s.First = entrySeq(h[0].ID)
	}
	if m := st.Val(); len(m) > 0 {
		s.HaveState = true
		s.State.Status = m["status"]
		s.State.Terminal = m["terminal"] == "true"
		s.State.HeartbeatAt, _ = time.Parse(time.RFC3339Nano, m["heartbeatAt"])
		s.State.LastSequence, _ = strconv.ParseInt(m["lastSeq"], 10, 64)
	}
	return s, nil
}
