package executor

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"privateassistant/internal/startstop"
	"privateassistant/queue"
	"privateassistant/schema"
)

// Resumer finds runs whose executor vanished (a crashed or killed agent, an aborted
// shutdown: no live lease) and puts them back on their queue: it never executes a run
// itself. For each such run it enqueues a run task with a deterministic id
// (queue.ResumeTaskID: the run and the count of its leases) on the run's own queue, so the
// queue's ordinary workers run it, with their concurrency, priorities and shutdown, and
// two agents that find the same vanished lease enqueue one task. The new attempt
// re-attaches to the native run through its idempotency key, it never submits a second
// one; the run lease and the attempt fence keep the resume task and the original task
// (when asynq's recoverer hands it out again) from executing the run twice, and the one
// that comes second finds the run settled and completes.
//
// A scan reads only the expired entries of its queues' lease sets (queue.LeasesKey, kept
// by the lease scripts: lease.go): one Redis command per queue when nothing vanished,
// whatever the backlog. A full listing of the unfinished runs is the backstop: at Start,
// and every Backstop per queue among the agents serving it (queue.BackstopKey; at once
// after Redis lost its data). It finds a run that never had an indexed lease: a task an
// agent took off the queue and died before claiming (asynq's recoverer also hands that
// one out again, in one to two minutes), a run leased by an older agent.
type Resumer struct {
	RDB       redis.UniversalClient
	Store     *schema.Store
	Enq       *queue.Enqueuer
	Inspector *asynq.Inspector // the backstop's check of a queued run's task
	Queues    []string         // the queues this agent serves: only their runs are resumed here
	// Active, when set, reports the runs this process executes (never resumed).
	Active func(runID string) bool
	Every  time.Duration // between scans (default 5 s)
	// Backstop is the time between full listings of a queue's unfinished runs
	// (default DefaultBackstop).
	Backstop time.Duration
	// Recheck is how long a run the scan enqueued a resume task for is left alone before
	// it is looked at again, if no executor took its lease meanwhile (default 1 min).
	Recheck time.Duration
	Log     *slog.Logger

	scan      startstop.Runner
	backstops atomic.Int64 // full listings done
}

var _ startstop.Service = (*Resumer)(nil)

// DefaultBackstop is Resumer.Backstop's default.
const DefaultBackstop = 5 * time.Minute

// scanLimit bounds the expired entries one scan handles per queue; the rest wait for the
// next scan.
const scanLimit = 100

var resumable = []interface{}{schema.RunRunning, schema.RunWaitingForApproval, schema.RunWaitingForResource, schema.RunCancelling, schema.RunQueued}

// expiredScript returns whether the queue's backstop is due (and then holds it for
// ARGV[2] ms; ARGV[3] "1" forces it) and up to ARGV[1] runs whose lease expired. KEYS
// lease set, backstop key.
var expiredScript = redis.NewScript(nowMS + `
local due = 0
if ARGV[3] == '1' then
  redis.call('SET', KEYS[2], '1', 'PX', ARGV[2]) due = 1
elseif redis.call('SET', KEYS[2], '1', 'NX', 'PX', ARGV[2]) then due = 1 end
local ids = redis.call('ZRANGEBYSCORE', KEYS[1], '-inf', now, 'LIMIT', 0, ARGV[1])
table.insert(ids, 1, due)
return ids`)

// recheckScript moves an entry of a lease set ARGV[2] ms past now, if it is still there.
var recheckScript = redis.NewScript(nowMS + `return redis.call('ZADD', KEYS[1], 'XX', now + tonumber(ARGV[2]), ARGV[1])`)

// Once scans once and returns how many resume tasks it enqueued. Before Start, or after
// Stop, it scans all the same.
func (r *Resumer) Once(ctx context.Context) (int, error) {
	var due []string
	expired := map[string][]string{}
	for _, q := range r.Queues {
		force := "0"
		if r.backstops.Load() == 0 {
			force = "1" // the first scan of this process lists everything
		}
		res, err := expiredScript.Run(ctx, r.RDB, []string{queue.LeasesKey(q), queue.BackstopKey(q)},
			scanLimit, r.backstop().Milliseconds(), force).Slice()
		if err != nil {
			return 0, fmt.Errorf("resume scan %s: %w", q, err)
		}
		if n, _ := res[0].(int64); n == 1 {
			due = append(due, q)
		}
		for _, v := range res[1:] {
			if id, ok := v.(string); ok {
				expired[q] = append(expired[q], id)
			}
		}
	}
	n, err := r.resumeAll(ctx, expired)
	if len(due) > 0 {
		// A backstop taken is run even when an expired entry failed: its hold would
		// otherwise skip it for a whole Backstop.
		k, berr := r.backstopScan(ctx, due)
		n += k
		if berr == nil {
			r.backstops.Add(1)
		}
		err = errors.Join(err, berr)
	}
	return n, err
}

// resumeAll handles the expired entries; an error ends the queue's entries (the next scan
// takes them up again).
func (r *Resumer) resumeAll(ctx context.Context, expired map[string][]string) (int, error) {
	n := 0
	var errs []error
	for q, ids := range expired {
		for _, id := range ids {
			ok, err := r.resumeExpired(ctx, q, id)
			if err != nil {
				errs = append(errs, err)
				break
			}
			if ok {
				n++
			}
		}
	}
	return n, errors.Join(errs...)
}

// vanished reports whether nobody executes the run: not this process, no lease, no
// back-off; and the run's lease count.
func (r *Resumer) vanished(ctx context.Context, id string) (bool, int64, error) {
	if r.Active != nil && r.Active(id) {
		return false, 0, nil
	}
	pipe := r.RDB.Pipeline()
	exists := pipe.Exists(ctx, LeaseKey(id), BackoffKey(id))
	gen := pipe.Get(ctx, queue.LeaseGenKey(id))
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return false, 0, fmt.Errorf("resume scan %s: %w", id, err)
	}
	if exists.Val() > 0 {
		return false, 0, nil
	}
	g, _ := strconv.ParseInt(gen.Val(), 10, 64)
	return true, g, nil
}

// resumeExpired handles a run whose indexed lease expired: a run that settled leaves the
// set; one nobody executes gets its resume task and is looked at again after Recheck.
func (r *Resumer) resumeExpired(ctx context.Context, q, id string) (bool, error) {
	gone, gen, err := r.vanished(ctx, id)
	if err != nil {
		return false, err
	}
	if !gone {
		// Executed here, leased, or backing off: looked at again a scan later, after the
		// entries that expired before it (more than scanLimit never starve the rest).
		return false, r.later(ctx, q, id, r.every())
	}
	run, err := schema.For[schema.Run](r.Store, schema.CollRuns).Get(ctx, id)
	if errors.Is(err, schema.ErrNotFound) || (err == nil && run.Status.Terminal()) {
		// Settled (its executor's release did not say so: it lost the lease first).
		return false, r.RDB.ZRem(ctx, queue.LeasesKey(q), id).Err()
	}
	if err != nil {
		return false, fmt.Errorf("resume scan: read %s: %w", id, err)
	}
	created, err := r.enqueue(ctx, q, run, gen)
	if err != nil {
		return false, err
	}
	return created, r.later(ctx, q, id, r.recheck())
}

// later moves the run's entry in the queue's lease set d past now, if it is still there.
func (r *Resumer) later(ctx context.Context, q, id string, d time.Duration) error {
	if err := recheckScript.Run(ctx, r.RDB, []string{queue.LeasesKey(q)}, id, d.Milliseconds()).Err(); err != nil {
		return fmt.Errorf("resume scan %s: %w", id, err)
	}
	return nil
}

func (r *Resumer) enqueue(ctx context.Context, q string, run *schema.Run, gen int64) (bool, error) {
	created, err := r.Enq.EnqueueResume(ctx, q, queue.RunTask{RunID: run.ID, OwnerID: run.OwnerID, ConversationID: run.ConversationID, Role: run.Role}, gen)
	if err != nil {
		return false, fmt.Errorf("resume scan: %w", err)
	}
	if created {
		r.log().Info("resume: a run whose executor vanished is back on its queue", "run", run.ID, "queue", q, "task", queue.ResumeTaskID(run.ID, gen))
	}
	return created, nil
}

// backstopScan lists the unfinished runs of the queues given and enqueues a resume task
// for each one nobody executes. A queued run is asynq's unless one of its tasks is active
// with nobody on it (taken off the queue by an agent that died before leasing the run):
// the queues' active tasks are read once, so the queued backlog costs nothing per run.
func (r *Resumer) backstopScan(ctx context.Context, queues []string) (int, error) {
	active, err := r.activeRuns(queues)
	if err != nil {
		return 0, err
	}
	runs, err := schema.For[schema.Run](r.Store, schema.CollRuns).All(ctx, schema.ListQuery{
		AllOwners: true, Filters: []string{query.Equal("status", resumable)}, Limit: 100})
	if err != nil {
		return 0, fmt.Errorf("resume backstop: list: %w", err)
	}
	n := 0
	for _, run := range runs {
		q, taken := active[run.ID]
		if run.Status == schema.RunQueued && !taken {
			continue // its task waits in asynq (or the outbox gives it one)
		}
		gone, gen, err := r.vanished(ctx, run.ID)
		if err != nil {
			return n, err
		}
		if !gone {
			continue
		}
		if !taken {
			b, err := schema.For[schema.RunBinding](r.Store, schema.CollRunBindings).Get(ctx, run.ID)
			if err != nil || !slices.Contains(queues, b.Queue) {
				continue
			}
			q = b.Queue
		}
		created, err := r.enqueue(ctx, q, &run, gen)
		if err != nil {
			return n, err
		}
		if created {
			n++
		}
	}
	return n, nil
}

// activeRuns maps the runs of the queues' active run tasks (a run's own task or a resume
// task) to their queue.
func (r *Resumer) activeRuns(queues []string) (map[string]string, error) {
	out := map[string]string{}
	if r.Inspector == nil {
		return out, nil
	}
	for _, q := range queues {
		for page := 1; ; page++ {
			tasks, err := r.Inspector.ListActiveTasks(q, asynq.PageSize(500), asynq.Page(page))
			if errors.Is(err, asynq.ErrQueueNotFound) {
				break
			}
			if err != nil {
				return nil, fmt.Errorf("resume backstop: active tasks of %s: %w", q, err)
			}
			for _, ti := range tasks {
				if ti.Type != queue.TypeRun {
					continue
				}
				if p, err := queue.Decode[queue.RunTask](asynq.NewTask(ti.Type, ti.Payload)); err == nil {
					out[p.RunID] = q
				}
			}
			if len(tasks) < 500 {
				break
			}
		}
	}
	return out, nil
}

func (r *Resumer) backstop() time.Duration {
	if r.Backstop > 0 {
		return r.Backstop
	}
	return DefaultBackstop
}

func (r *Resumer) recheck() time.Duration {
	if r.Recheck > 0 {
		return r.Recheck
	}
	return time.Minute
}

func (r *Resumer) log() *slog.Logger {
	if r.Log == nil {
		return slog.Default()
	}
	return r.Log
}

func (r *Resumer) every() time.Duration {
	if r.Every > 0 {
		return r.Every
	}
	return 5 * time.Second
}

// Start scans at once (with the full listing) and then every Every (default 5 s) in
// the background, until Stop.
func (r *Resumer) Start(ctx context.Context) error {
	return r.scan.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, r.every(), r.log(), "resume scan", func(ctx context.Context) error {
			_, err := r.Once(ctx)
			return err
		})
	})
}

// StopScan ends the scans (stage one of shutdown: no new work is taken) and waits for the
// one in progress. Idempotent. (The resumer runs nothing itself: what it enqueued is the
// asynq servers'.)
func (r *Resumer) StopScan() { r.scan.Stop() }

// Stop is StopScan. Idempotent, safe before Start.
func (r *Resumer) Stop() { r.scan.Stop() }
