package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"privateassistant/agent/artifacts"
	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
)

// HarnessFor returns the harness that serves a harness profile revision.
type HarnessFor func(p *schema.HarnessProfile) (harness.Harness, error)

// MemberHome is a member's own harness and work folder, held by one run until Release.
type MemberHome struct {
	Harness harness.Harness
	// WorkDir is the member's work folder as this host sees it; Cwd as the harness names it.
	WorkDir, Cwd string
	Release      func()
}

// Metrics receives counters (nil: none).
type Metrics interface {
	RunStarted(role string)
	RunFinished(role, status string)
	EventEmitted(kind string)
	HarnessError(kind string)
}

// Executor executes runs.
type Executor struct {
	Store   *schema.Store
	RDB     redis.UniversalClient
	Harness HarnessFor
	Slots   *Slots
	// GPU, when set, grants the devices it manages (model swaps, leases, Immich); the
	// others use Slots.
	GPU      DeviceAcquirer
	Uploader *artifacts.Uploader
	// UsageSettled, when set, returns once every gateway usage record of the run sent so
	// far is applied in Redis (agent/gateway UsageWriter.Settle: the gateway's records leave
	// before an answer ends but are acknowledged after it); the run's usage is read after it.
	UsageSettled func(ctx context.Context, run string) error
	Log          *slog.Logger
	Metrics      Metrics
	AgentID      string
	Inspector    *asynq.Inspector
	// Instructions, when set, are a run's instructions to its harness (a host app's tools
	// for the runs that app started: apptools.Instructions); "": none.
	Instructions func(ctx context.Context, run *schema.Run) string

	// ArtifactRoot is where harnesses leave a run's files: <root>/<native run id>/.
	ArtifactRoot string
	// CheckpointRoot holds the work-folder checkpoints taken before a pause
	// (checkpoint.go; default <tmp>/pa-checkpoints).
	CheckpointRoot string
	// HermesWorkDir is a harness's work folder (real Hermes's terminal.cwd) as this host
	// sees it; HermesCwd is the same folder as the harness names it (default HermesWorkDir).
	// Each run gets its own folder in it (runfolder.go), and its artifacts are exactly the
	// files its own file tools wrote (harness.FileCollector, artifacts.UploadFiles).
	HermesWorkDir, HermesCwd string
	// MemberHome, when set, runs every run of a Hermes profile on its owner's own Hermes
	// (agent/homes: a home, a process and a sandbox per member), with that member's work
	// folder in place of HermesWorkDir/HermesCwd.
	MemberHome func(ctx context.Context, p *schema.HarnessProfile, owner string) (MemberHome, error)

	// ProbeBinding, when set, lets the inference gateway serve a release probe's model
	// calls (run is the probe's run id) on route r with no tool until unbind (probe.go).
	ProbeBinding func(run string, r *schema.ModelRoute) (unbind func())
	// ProbeHome, set with MemberHome, runs f with a Hermes of no member made like a
	// member's: a release probe of a Hermes profile runs there (its runs never use the
	// profile's own address then).
	ProbeHome func(ctx context.Context, f func(harness.Harness) error) error

	LeaseTTL       time.Duration // default 15 s
	HeartbeatEvery time.Duration // default 2 s
	DeltaWindow    time.Duration // text deltas are coalesced for this long (default 100 ms)
	StopWait       time.Duration // how long a stop may take to settle (default 60 s)
	ReconcileEvery time.Duration // status polling when the stream is gone (default 500 ms)
	ControlEvery   time.Duration // how often the run's control stream is read (default 100 ms)

	once   sync.Once
	mu     sync.Mutex
	active map[string]bool
}

func (e *Executor) log() *slog.Logger {
	if e.Log == nil {
		return slog.Default()
	}
	return e.Log
}

// defaults fills the zero settings once: Execute runs on many goroutines at a time.
func (e *Executor) defaults() { e.once.Do(e.setDefaults) }

func (e *Executor) setDefaults() {
	if e.LeaseTTL == 0 {
		e.LeaseTTL = 15 * time.Second
	}
	if e.HeartbeatEvery == 0 {
		e.HeartbeatEvery = 2 * time.Second
	}
	if e.DeltaWindow == 0 {
		e.DeltaWindow = 100 * time.Millisecond
	}
	if e.StopWait == 0 {
		e.StopWait = 60 * time.Second
	}
	if e.ReconcileEvery == 0 {
		e.ReconcileEvery = 500 * time.Millisecond
	}
	if e.ControlEvery == 0 {
		e.ControlEvery = 100 * time.Millisecond
	}
}

// ErrBusy: another live executor holds the run; asynq retries later.
var ErrBusy = errors.New("executor: run is being executed elsewhere")

// HandleTask is the asynq handler for queue.TypeRun: a run's own task and its resume
// tasks (queue.ResumeTaskID; the same payload) alike.
func (e *Executor) HandleTask(ctx context.Context, t *asynq.Task) error {
	p, err := queue.Decode[queue.RunTask](t)
	if err != nil {
		return fmt.Errorf("run task: %w", err) // malformed wraps asynq.SkipRetry; a newer version is retried (queue.Decode)
	}
	return e.Execute(ctx, p.RunID)
}

// Running returns how many runs this process is executing.
func (e *Executor) Running() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.active)
}

// Active reports whether this process is executing the run.
func (e *Executor) Active(runID string) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.active[runID]
}

// Execute runs one attempt of a run to a terminal state, or until ctx ends. Under an
// asynq handler the run's lease is indexed in the lease set of the task's queue (the
// resume scan's index, lease.go); called otherwise, in the set of the queue its bindings
// name.
func (e *Executor) Execute(ctx context.Context, runID string) (err error) {
	e.defaults()
	e.mu.Lock()
	if e.active == nil {
		e.active = map[string]bool{}
	}
	if e.active[runID] {
		e.mu.Unlock()
		return ErrBusy // a ghost of this process still owns it
	}
	e.active[runID] = true
	e.mu.Unlock()
	defer func() {
		e.mu.Lock()
		delete(e.active, runID)
		e.mu.Unlock()
	}()

	lease, err := acquireLease(ctx, e.RDB, runID, e.leaseSet(ctx, runID), e.AgentID, e.LeaseTTL)
	if err != nil {
		return err
	}
	a := &attempt{e: e, runID: runID, lease: lease, m: state{stopWait: e.StopWait}}
	// A run this attempt settled (or found settled, or gone) leaves the lease set; any
	// other end (an error, an abort, a lost fence: Redis lost its data) leaves it for the
	// resume scan.
	defer func() { lease.release(context.WithoutCancel(ctx), err == nil && a.done()) }()
	err = a.execute(ctx)
	if err != nil && ctx.Err() == nil && !errors.Is(err, ErrBusy) {
		// A transient failure (harness or Appwrite unavailable): back off before the
		// resume scan tries again (RetryBackoff; the count is shared through Redis).
		n, _ := e.RDB.Incr(context.WithoutCancel(ctx), BackoffKey(runID)+":n").Result()
		d := RetryBackoff.Delay(n)
		_ = e.RDB.Set(context.WithoutCancel(ctx), BackoffKey(runID), "1", d).Err()
		_ = e.RDB.Expire(context.WithoutCancel(ctx), BackoffKey(runID)+":n", time.Hour).Err()
	}
	return err
}

// done reports whether the run needs no executor any more, as the attempt last saw it:
// gone, or its record terminal.
func (a *attempt) done() bool {
	if a.run == nil {
		return true // not found (an error to read it is returned, so never settled)
	}
	if a.rec != nil {
		return a.rec.Status().Terminal()
	}
	return a.status.Terminal()
}

// leaseSet is the lease set of the run's queue: the asynq task's queue, else the one in
// the run's bindings ("" when they cannot be read: the lease is then not indexed, and the
// resume scan's full listing is what finds the run if its executor vanishes).
func (e *Executor) leaseSet(ctx context.Context, runID string) string {
	if q, ok := asynq.GetQueueName(ctx); ok {
		return queue.LeasesKey(q)
	}
	b, err := schema.For[schema.RunBinding](e.Store, schema.CollRunBindings).Get(ctx, runID)
	if err != nil {
		return ""
	}
	return queue.LeasesKey(b.Queue)
}

// DeviceAcquirer grants a run a managed device with its route's model loaded.
type DeviceAcquirer interface {
	Manages(device string) bool
	// AcquireRun waits (onWait sees position and reason) and returns the release and a
	// channel that closes if the grant is revoked mid-run (a swap's drain bound passed,
	// the model server crashed, another agent took the device, or the run's lease
	// stopped being renewed). The grant is the run's: the gateway serves requests naming
	// the run only under it (gpu.Pool.AcquireRun).
	AcquireRun(ctx context.Context, device, run, model string, onWait func(pos int, reason string)) (release func(), revoked <-chan struct{}, err error)
}
