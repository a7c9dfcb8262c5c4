// Package queue is the contract between the Appwrite Functions and the resident agent:
// task type names, typed payloads, queue names, the enqueue client, and the Redis key
// layout of each run's event stream, control stream and hot state.
//
// Task type names are wire constants: they never change when Go types are renamed.
// Payloads carry ids only; Appwrite holds the records they point at.
package queue

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hibiken/asynq"
)

// Task type names. Never rename a value: queued tasks carry it.
const (
	TypeRun = "pa:run"
)

// Payload is implemented by every task payload.
type Payload interface {
	TaskType() string
	Validate() error
}

// RunTask asks the agent to execute one admitted run.
type RunTask struct {
	RunID          string `json:"runId"`
	OwnerID        string `json:"ownerId"`
	ConversationID string `json:"conversationId"`
	Role           string `json:"role"`
}

// TaskType implements Payload.
func (RunTask) TaskType() string { return TypeRun }

// Validate implements Payload.
func (p RunTask) Validate() error {
	if p.RunID == "" || p.OwnerID == "" || p.ConversationID == "" {
		return errors.New("run task: runId, ownerId and conversationId are required")
	}
	return nil
}

// Options per task type: an explicit timeout (asynq's default of 30 min is never what we
// want), a small retry budget, and a long retention so the task id stays reserved (and
// the result inspectable) long after completion.
type Options struct {
	Timeout   time.Duration
	MaxRetry  int
	Retention time.Duration
}

// RunOptions are the options of run tasks for a work role. Chat turns are short; work
// jobs (research, coding) may run for hours.
func RunOptions(role string) Options {
	if role == "" || role == RoleChat {
		return Options{Timeout: 30 * time.Minute, MaxRetry: 3, Retention: 7 * 24 * time.Hour}
	}
	return Options{Timeout: 12 * time.Hour, MaxRetry: 3, Retention: 7 * 24 * time.Hour}
}

// Build turns a payload into an asynq task.
func Build[T Payload](p T) (*asynq.Task, error) {
	if err := p.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return asynq.NewTask(p.TaskType(), b), nil
}

// Decode reads a task's payload, checking its type.
func Decode[T Payload](t *asynq.Task) (T, error) {
	var p T
	if t.Type() != p.TaskType() {
		return p, fmt.Errorf("task type %q is not %q", t.Type(), p.TaskType())
	}
	dec := json.NewDecoder(strings.NewReader(string(t.Payload())))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&p); err != nil {
		return p, fmt.Errorf("decode %s: %w", p.TaskType(), err)
	}
	return p, p.Validate()
}

// Enqueuer puts run tasks on the dedicated Redis.
type Enqueuer struct {
	c *asynq.Client
}

// NewEnqueuer wraps an asynq client (create it once per process and reuse it).
func NewEnqueuer(c *asynq.Client) *Enqueuer { return &Enqueuer{c: c} }

// EnqueueRun enqueues a run with TaskID(runId). An existing task with that id means the
// run is already enqueued: that is success, not an error.
func (e *Enqueuer) EnqueueRun(ctx context.Context, queueName string, p RunTask) error {
	t, err := Build(p)
	if err != nil {
		return err
	}
	o := RunOptions(p.Role)
	_, err = e.c.EnqueueContext(ctx, t, asynq.TaskID(p.RunID), asynq.Queue(queueName),
		asynq.Timeout(o.Timeout), asynq.MaxRetry(o.MaxRetry), asynq.Retention(o.Retention))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("enqueue run %s on %s: %w", p.RunID, queueName, err)
	}
	return nil
}
