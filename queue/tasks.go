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
	"strconv"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// Task type names. Never rename a value: queued tasks carry it.
const (
	TypeRun     = "pa:run"
	TypeProbe   = "pa:probe"
	TypeQualify = "pa:qualify" // a route's GPU qualification (QualifyTask)
)

// Payload is implemented by every task payload.
type Payload interface {
	TaskType() string
	Validate() error
}

// Payload versions. A payload carries its major version in "v". Decoding is tolerant
// (river's rule): unknown fields are ignored, so a producer that adds a field (a minor
// change, no new major) never breaks an older agent. A change an older agent cannot
// honour (a field it must act on, a removed or re-meant field) bumps the major version;
// an agent that meets a major newer than it supports returns ErrNewerVersion, which the
// daemon does not count as a failure: the task is retried later (by this agent, or by an
// upgraded one serving the same queue) and never archived, so its reserved TaskID never
// blocks the outbox. Golden fixtures of every version ever produced live in
// queue/testdata/run_task/ and must keep decoding (TestRunTaskGoldenFixtures).
const (
	// RunTaskVersion is the newest run payload major this code writes and understands.
	// Payloads written before versioning have no "v" and are version 1.
	RunTaskVersion = 1
)

// ErrNewerVersion: the payload's major version is newer than this agent supports. It is
// retryable (not asynq.SkipRetry): an upgraded agent will run the task.
var ErrNewerVersion = errors.New("payload version newer than this agent supports")

// ErrMalformed: the payload cannot be decoded or is invalid. It wraps asynq.SkipRetry:
// retrying the same bytes cannot help.
var ErrMalformed = errors.New("malformed payload")

// RunTask asks the agent to execute one admitted run.
type RunTask struct {
	// V is the payload's major version (RunTaskVersion when built here; 0 in payloads
	// written before versioning, read as 1).
	V              int    `json:"v"`
	RunID          string `json:"runId"`
	OwnerID        string `json:"ownerId"`
	ConversationID string `json:"conversationId"`
	Role           string `json:"role"`
	// Attachments are the ids of the files attached to the run's message (issue 17), in the
	// order the user gave them; omitted when none. A minor addition: an older agent ignores
	// it. The message record holds the same list and is what the agent acts on (the outbox
	// re-enqueues runs from their records, which this field does not survive).
	Attachments []string `json:"attachments,omitempty"`
}

// TaskType implements Payload.
func (RunTask) TaskType() string { return TypeRun }

// Validate implements Payload. A major version above RunTaskVersion is ErrNewerVersion:
// the other fields may mean something this code does not know.
func (p RunTask) Validate() error {
	if p.V > RunTaskVersion {
		return fmt.Errorf("run task version %d (this agent supports up to %d): %w", p.V, RunTaskVersion, ErrNewerVersion)
	}
	if p.V < 0 {
		return errors.New("run task: negative version")
	}
	if p.RunID == "" || p.OwnerID == "" || p.ConversationID == "" {
		return errors.New("run task: runId, ownerId and conversationId are required")
	}
	for _, id := range p.Attachments {
		if !ValidID(id) {
			return fmt.Errorf("run task: attachment id %q is not valid", id)
		}
	}
	return nil
}

func (p *RunTask) stampVersion() { p.V = RunTaskVersion }

// versioned is a payload that Build stamps with its current major version.
type versioned interface{ stampVersion() }

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

// Build turns a payload into an asynq task, stamped with the payload's current version.
func Build[T Payload](p T) (*asynq.Task, error) {
	if v, ok := any(&p).(versioned); ok {
		v.stampVersion()
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	b, err := json.Marshal(p)
	if err != nil {
		return nil, err
	}
	return asynq.NewTask(p.TaskType(), b), nil
}

// Decode reads a task's payload tolerantly (plain json.Unmarshal: unknown fields are
// ignored) and classifies failures for asynq: a wrong type, undecodable bytes or an
// invalid payload is ErrMalformed and wraps asynq.SkipRetry; a newer major version is
// ErrNewerVersion and is retryable. A handler returns the error as it is.
func Decode[T Payload](t *asynq.Task) (T, error) {
	var p T
	if t.Type() != p.TaskType() {
		return p, fmt.Errorf("%w: %w: task type %q is not %q", ErrMalformed, asynq.SkipRetry, t.Type(), p.TaskType())
	}
	if err := json.Unmarshal(t.Payload(), &p); err != nil {
		return p, fmt.Errorf("%w: %w: decode %s: %v", ErrMalformed, asynq.SkipRetry, p.TaskType(), err)
	}
	if err := p.Validate(); err != nil {
		if errors.Is(err, ErrNewerVersion) {
			return p, err
		}
		return p, fmt.Errorf("%w: %w: %v", ErrMalformed, asynq.SkipRetry, err)
	}
	return p, nil
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
	_, err := e.EnqueueRunNew(ctx, queueName, p)
	return err
}

// EnqueueRunNew is EnqueueRun that also reports whether this call created the task
// (false: a task with TaskID(runId) already existed).
func (e *Enqueuer) EnqueueRunNew(ctx context.Context, queueName string, p RunTask) (bool, error) {
	return e.enqueueRun(ctx, queueName, p, p.RunID)
}

// ResumeTaskID is the task id of the resume task of a run whose executor vanished after
// the run's gen-th lease (LeaseGenKey): every agent that finds the same vanished lease
// names the same task, so it is enqueued once.
func ResumeTaskID(runID string, gen int64) string {
	return runID + ":resume:" + strconv.FormatInt(gen, 10)
}

// EnqueueResume enqueues a run task with ResumeTaskID(runId, gen) on the run's queue: the
// resume scan's way to have a run whose executor vanished executed again by the queue's
// ordinary workers (agent/executor Resumer). It reports whether this call created the
// task (false: it was already there).
func (e *Enqueuer) EnqueueResume(ctx context.Context, queueName string, p RunTask, gen int64) (bool, error) {
	return e.enqueueRun(ctx, queueName, p, ResumeTaskID(p.RunID, gen))
}

func (e *Enqueuer) enqueueRun(ctx context.Context, queueName string, p RunTask, id string) (bool, error) {
	t, err := Build(p)
	if err != nil {
		return false, err
	}
	o := RunOptions(p.Role)
	_, err = e.c.EnqueueContext(ctx, t, asynq.TaskID(id), asynq.Queue(queueName),
		asynq.Timeout(o.Timeout), asynq.MaxRetry(o.MaxRetry), asynq.Retention(o.Retention))
	if errors.Is(err, asynq.ErrTaskIDConflict) || errors.Is(err, asynq.ErrDuplicateTask) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("enqueue run %s on %s: %w", id, queueName, err)
	}
	return true, nil
}

// ProbeTask asks the agent serving a route's device for a release's probe run (issue 33):
// one short real run of a role's plan (the harness and route revisions the release names)
// whose outcome goes to ProbeKey(Fingerprint, Role) for the reconciler's next pass.
type ProbeTask struct {
	V               int    `json:"v"`
	Fingerprint     string `json:"fingerprint"`
	Role            string `json:"role"`
	Harness         string `json:"harness"`
	HarnessRevision int64  `json:"harnessRevision"`
	Route           string `json:"route"`
	RouteRevision   int64  `json:"routeRevision"`
}

// ProbeTaskVersion is the newest probe payload major this code writes and understands.
const ProbeTaskVersion = 1

// ProbeKeyTTL is how long a probe's record (ProbeKey) lives.
const ProbeKeyTTL = 24 * time.Hour

// TaskType implements Payload.
func (ProbeTask) TaskType() string { return TypeProbe }

// Validate implements Payload.
func (p ProbeTask) Validate() error {
	if p.V > ProbeTaskVersion {
		return fmt.Errorf("probe task version %d (this agent supports up to %d): %w", p.V, ProbeTaskVersion, ErrNewerVersion)
	}
	if !ValidID(p.Fingerprint) || !ValidID(p.Role) || !ValidID(p.Harness) || !ValidID(p.Route) || p.HarnessRevision < 1 || p.RouteRevision < 1 {
		return errors.New("probe task: fingerprint, role, harness, route and their revisions are required")
	}
	return nil
}

func (p *ProbeTask) stampVersion() { p.V = ProbeTaskVersion }

// ProbeRunID is the run id a probe's model calls name (and its task id): one per release
// fingerprint and role, so repeated reconciler passes never enqueue it twice.
func (p ProbeTask) ProbeRunID() string { return ProbeRunID(p.Fingerprint, p.Role) }

// ProbeRunID is the probe run id of a release fingerprint and role.
func ProbeRunID(fingerprint, role string) string {
	if len(fingerprint) > 16 {
		fingerprint = fingerprint[:16]
	}
	id := "probe-" + fingerprint + "-" + role
	if len(id) > 36 {
		id = id[:36]
	}
	return id
}

// EnqueueProbe enqueues a probe on queueName with TaskID(ProbeRunID); an existing task
// with that id is success (false: it already existed).
func (e *Enqueuer) EnqueueProbe(ctx context.Context, queueName string, p ProbeTask) (bool, error) {
	t, err := Build(p)
	if err != nil {
		return false, err
	}
	_, err = e.c.EnqueueContext(ctx, t, asynq.TaskID(p.ProbeRunID()), asynq.Queue(queueName),
		asynq.Timeout(5*time.Minute), asynq.MaxRetry(2), asynq.Retention(ProbeKeyTTL))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("enqueue probe %s on %s: %w", p.ProbeRunID(), queueName, err)
	}
	return true, nil
}

// asynqQueuesKey is asynq's set of known queue names (asynq/internal/base.AllQueues). The
// inspector answers ErrQueueNotFound for a queue missing from it, even when the queue
// holds tasks.
const asynqQueuesKey = "asynq:queues"

// RegisterQueue adds a queue to asynq's set of known queues. An asynq client registers a
// queue only on its first enqueue in the process, so after Redis lost its data the
// queues it refills stay invisible to the inspector (and to asynqmon and the queue
// metrics) until something registers them again: the outbox does, when it heals.
func RegisterQueue(ctx context.Context, rdb redis.UniversalClient, name string) error {
	if err := rdb.SAdd(ctx, asynqQueuesKey, name).Err(); err != nil {
		return fmt.Errorf("register queue %s: %w", name, err)
	}
	return nil
}

// QualifyTask asks the agent serving a device to qualify a route on it (issue 20; issue
// 31 item 3): a measured check of the route's model at its context budget (agent/gpu
// Qualifier). It is a device job like a run: on the device's queue, handed out by asynq,
// redelivered by asynq's recoverer when the agent that took it died. Its task id is
// QualifyTaskID(Route, RouteRevision), so one request per route revision is ever queued.
type QualifyTask struct {
	V int `json:"v"`
	// RequestID names this request in the route's status hash (queue.QualifyStatusKey):
	// only its own request writes there, never an older one.
	RequestID     string    `json:"requestId"`
	Route         string    `json:"route"`
	RouteRevision int64     `json:"routeRevision"` // the latest revision when it was asked
	Device        string    `json:"device"`
	RequestedBy   string    `json:"requestedBy"`
	RequestedAt   time.Time `json:"requestedAt"`
}

// QualifyTaskVersion is the newest qualification payload major this code writes and
// understands.
const QualifyTaskVersion = 1

// QualifyOptions: a qualification waits in the device's queue behind users' jobs (hours,
// on a busy device) and then measures for minutes; each death of the agent that holds it
// uses one retry (asynq's recoverer), so the budget is generous; the finished task stays
// a day for asynqmon (asking again deletes it first).
var QualifyOptions = Options{Timeout: 24 * time.Hour, MaxRetry: 10, Retention: 24 * time.Hour}

// TaskType implements Payload.
func (QualifyTask) TaskType() string { return TypeQualify }

// Validate implements Payload.
func (p QualifyTask) Validate() error {
	if p.V > QualifyTaskVersion {
		return fmt.Errorf("qualify task version %d (this agent supports up to %d): %w", p.V, QualifyTaskVersion, ErrNewerVersion)
	}
	if !ValidID(p.Route) || !ValidID(p.Device) || p.RouteRevision < 1 || p.RequestID == "" || p.RequestedAt.IsZero() {
		return errors.New("qualify task: requestId, route, routeRevision, device and requestedAt are required")
	}
	return nil
}

func (p *QualifyTask) stampVersion() { p.V = QualifyTaskVersion }

// QualifyTaskID is the task id of a route revision's qualification.
func QualifyTaskID(route string, revision int64) string {
	return "qualify:" + route + ":" + strconv.FormatInt(revision, 10)
}

// EnqueueQualify enqueues a qualification on its device's queue with
// TaskID(QualifyTaskID); false (and no error) when a task with that id exists.
func (e *Enqueuer) EnqueueQualify(ctx context.Context, p QualifyTask) (bool, error) {
	t, err := Build(p)
	if err != nil {
		return false, err
	}
	o := QualifyOptions
	_, err = e.c.EnqueueContext(ctx, t, asynq.TaskID(QualifyTaskID(p.Route, p.RouteRevision)), asynq.Queue(DeviceQueue(p.Device)),
		asynq.Timeout(o.Timeout), asynq.MaxRetry(o.MaxRetry), asynq.Retention(o.Retention))
	if errors.Is(err, asynq.ErrTaskIDConflict) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("enqueue qualification of %s revision %d on %s: %w", p.Route, p.RouteRevision, p.Device, err)
	}
	return true, nil
}
