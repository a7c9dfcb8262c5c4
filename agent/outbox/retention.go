package outbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"privateassistant/internal/startstop"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
)

// Retention defaults (PA_AGENT_REDIS_RETENTION, PA_AGENT_RETENTION_EVERY).
const (
	DefaultRetention      = 24 * time.Hour
	DefaultRetentionEvery = time.Minute
)

// Expirer bounds Redis: the per-run keys of a run (events and control streams, hot state,
// owner, fence, gateway usage, re-enqueue count) get an expiry Retention after the run is
// terminal and Appwrite holds its whole record, and the run's completed asynq task is
// deleted at the same time. Redis is the hot copy: a follower of an expired run reads its
// events from Appwrite (longpoll), a late ghost writer finds no fence and is
// refused, and nothing recreates the keys (control and approval refuse a terminal run).
//
// Each sweep SCANs the hot states (pa:run:{id}:state). A state without an expiry that is
// terminal (or whose heartbeat is older than Retention: its terminal append was lost) is
// checked against Appwrite: the run record must be terminal with lastSequence at least the
// hot lastSeq, and the event with that sequence must be stored (events are copied in
// order, so the last one stored means every one is). Then one script sets the expiry on
// every key of the run (only shortening an existing one), and the run goes on the
// pa:retention:tasks schedule, whose due entries the next sweeps delete from asynq. A
// startstop.Service: Start sweeps at once and every Every, Stop waits.
type Expirer struct {
	RDB       redis.UniversalClient
	Store     *schema.Store
	Inspector *asynq.Inspector
	Retention time.Duration // default DefaultRetention
	Every     time.Duration // default DefaultRetentionEvery
	// ForgetHome, when set, deletes a forgotten user's Hermes home on this host unless it
	// was made after the forget (agent/homes ForgetBefore): each sweep applies every entry
	// of queue.PurgeHomesKey (every agent keeps its own homes), and drops the entries
	// older than HomesPurgeKeep.
	ForgetHome func(ctx context.Context, owner string, forgotAt time.Time) error
	Log        *slog.Logger

	run startstop.Runner
}

var _ startstop.Service = (*Expirer)(nil)

// HomesPurgeKeep is how long a forget stays in queue.PurgeHomesKey: a GPU host down longer
// than this keeps the forgotten user's Hermes home until an operator removes it.
const HomesPurgeKeep = 30 * 24 * time.Hour

// TasksDueKey is the schedule of asynq tasks to delete: member runId, score the Unix
// millisecond at which its retention ends.
const TasksDueKey = queue.RetentionTasksKey

// RunKeys are the per-run keys the Expirer expires (approval decisions and the executor's
// lease and back-off keys carry short expiries of their own).
func RunKeys(runID string) []string {
	return []string{queue.EventsKey(runID), queue.ControlKey(runID), queue.StateKey(runID), queue.RunOwnerKey(runID),
		eventlog.AttemptKey(runID), queue.GatewayUsageKey(runID), queue.RequeueKey(runID), queue.BackoffCountKey(runID), queue.LeaseGenKey(runID)}
}

// expireScript sets PEXPIRE ARGV[1] on every key that exists and has no expiry or a later
// one; it returns how many it set.
var expireScript = redis.NewScript(`
local n = 0
for _, k in ipairs(KEYS) do
  local t = redis.call('PTTL', k)
  if t == -1 or t > tonumber(ARGV[1]) then
    redis.call('PEXPIRE', k, ARGV[1])
    n = n + 1
  end
end
return n
`)

func (x *Expirer) retention() time.Duration {
	if x.Retention > 0 {
		return x.Retention
	}
	return DefaultRetention
}

func (x *Expirer) log() *slog.Logger {
	if x.Log == nil {
		return slog.Default()
	}
	return x.Log
}

// Sweep is what one sweep did.
type Sweep struct {
	Scanned int // hot states seen
	Expired int // runs whose keys got their expiry
	Tasks   int // asynq tasks deleted
	Purged  int // runs of deleted conversations whose events were deleted
	Homes   int // forgotten users' homes applied (deleted, or already gone)
}

// Once runs one sweep. A Redis or Appwrite error ends it; the next one goes on.
func (x *Expirer) Once(ctx context.Context) (Sweep, error) {
	var sw Sweep
	n, err := x.deleteDueTasks(ctx)
	sw.Tasks = n
	if err != nil {
		return sw, err
	}
	var cursor uint64
	for {
		keys, next, err := x.RDB.Scan(ctx, cursor, queue.RunStateKeyPattern, 1000).Result()
		if err != nil {
			return sw, fmt.Errorf("retention: scan: %w", err)
		}
		if err := x.sweepStates(ctx, keys, &sw); err != nil {
			return sw, err
		}
		if cursor = next; cursor == 0 {
			if err := x.purge(ctx, &sw); err != nil {
				return sw, err
			}
			return sw, x.forgetHomes(ctx, &sw)
		}
	}
}

// sweepStates handles one SCAN page of hot-state keys.
func (x *Expirer) sweepStates(ctx context.Context, keys []string, sw *Sweep) error {
	if len(keys) == 0 {
		return nil
	}
	pipe := x.RDB.Pipeline()
	fields := make([]*redis.SliceCmd, len(keys))
	ttls := make([]*redis.DurationCmd, len(keys))
	for i, k := range keys {
		fields[i] = pipe.HMGet(ctx, k, "terminal", "lastSeq", "heartbeatAt")
		ttls[i] = pipe.PTTL(ctx, k)
	}
	if _, err := pipe.Exec(ctx); err != nil && !errors.Is(err, redis.Nil) {
		return fmt.Errorf("retention: read states: %w", err)
	}
	keep := x.retention()
	for i, k := range keys {
		sw.Scanned++
		if ttls[i].Val() != -1 { // gone, or already expiring
			continue
		}
		id, ok := stateRunID(k)
		if !ok {
			continue
		}
		v := fields[i].Val()
		terminal := str(v[0]) == "true"
		lastSeq, _ := strconv.ParseInt(str(v[1]), 10, 64)
		beat, _ := time.Parse(time.RFC3339Nano, str(v[2]))
		if !terminal && (beat.IsZero() || time.Since(beat) < keep) {
			continue // live (or too recently seen to ask Appwrite)
		}
		held, err := x.appwriteHolds(ctx, id, lastSeq)
		if err != nil {
			return err
		}
		if !held {
			continue
		}
		if err := expireScript.Run(ctx, x.RDB, RunKeys(id), keep.Milliseconds()).Err(); err != nil {
			return fmt.Errorf("retention: expire %s: %w", id, err)
		}
		due := float64(time.Now().Add(keep).UnixMilli())
		if err := x.RDB.ZAdd(ctx, TasksDueKey, redis.Z{Score: due, Member: id}).Err(); err != nil {
			return fmt.Errorf("retention: schedule task of %s: %w", id, err)
		}
		sw.Expired++
	}
	return nil
}

// purge deletes the events of the runs of deleted conversations (queue.PurgeRunsKey) once
// each has settled: its hot state is expiring (this sweep found Appwrite holding its whole
// record) or gone. A run still going (its state has no expiry) waits for a later sweep, so
// no event it appends afterwards is left behind. The events go from Appwrite, then the
// Redis stream, then (once terminal in Appwrite) the run's record (purgeRecord); the run
// leaves the set last, so a purge cut short is finished by the next.
func (x *Expirer) purge(ctx context.Context, sw *Sweep) error {
	ids, err := x.RDB.ZRange(ctx, queue.PurgeRunsKey, 0, 999).Result()
	if err != nil {
		return fmt.Errorf("retention: purge: %w", err)
	}
	events := schema.For[schema.Event](x.Store, schema.CollEvents)
	for _, id := range ids {
		ttl, err := x.RDB.PTTL(ctx, queue.StateKey(id)).Result()
		if err != nil {
			return fmt.Errorf("retention: purge %s: %w", id, err)
		}
		if ttl == -1 {
			continue // not settled (or not yet held by Appwrite)
		}
		for {
			page, err := events.List(ctx, schema.ListQuery{AllOwners: true, Filters: []string{query.Equal("runId", id)}, Limit: 100})
			if err != nil {
				return fmt.Errorf("retention: purge %s: %w", id, err)
			}
			for _, ev := range page.Items {
				if err := events.Delete(ctx, ev.ID); err != nil && !errors.Is(err, schema.ErrNotFound) {
					return fmt.Errorf("retention: purge %s: %w", id, err)
				}
			}
			if len(page.Items) < 100 {
				break
			}
		}
		if err := x.RDB.Del(ctx, queue.EventsKey(id)).Err(); err != nil {
			return fmt.Errorf("retention: purge %s: %w", id, err)
		}
		if done, err := x.purgeRecord(ctx, id); err != nil {
			return fmt.Errorf("retention: purge %s: %w", id, err)
		} else if !done {
			continue // not terminal in Appwrite yet: a later sweep deletes it
		}
		if err := x.RDB.ZRem(ctx, queue.PurgeRunsKey, id).Err(); err != nil {
			return fmt.Errorf("retention: purge %s: %w", id, err)
		}
		sw.Purged++
	}
	return nil
}

// forgetHomes applies the forgotten users (queue.PurgeHomesKey) to this host's homes and
// drops the entries past HomesPurgeKeep.
func (x *Expirer) forgetHomes(ctx context.Context, sw *Sweep) error {
	if x.ForgetHome == nil {
		return nil
	}
	old := strconv.FormatInt(time.Now().Add(-HomesPurgeKeep).UnixMilli(), 10)
	if err := x.RDB.ZRemRangeByScore(ctx, queue.PurgeHomesKey, "-inf", "("+old).Err(); err != nil {
		return fmt.Errorf("retention: forget homes: %w", err)
	}
	zs, err := x.RDB.ZRangeWithScores(ctx, queue.PurgeHomesKey, 0, -1).Result()
	if err != nil {
		return fmt.Errorf("retention: forget homes: %w", err)
	}
	for _, z := range zs {
		owner, _ := z.Member.(string)
		if err := x.ForgetHome(ctx, owner, time.UnixMilli(int64(z.Score))); err != nil {
			return fmt.Errorf("retention: forget the home of %s: %w", owner, err)
		}
		sw.Homes++
	}
	return nil
}

// purgeRecord deletes a deleted conversation's settled run: its context snapshot, its
// bindings, then its record (issue 30: nothing of the conversation stays readable, not even
// through Appwrite's own API). A run not yet terminal in Appwrite is kept (false).
func (x *Expirer) purgeRecord(ctx context.Context, id string) (bool, error) {
	runs := schema.For[schema.Run](x.Store, schema.CollRuns)
	run, err := runs.Get(ctx, id)
	if errors.Is(err, schema.ErrNotFound) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	if !run.Status.Terminal() {
		return false, nil
	}
	binds := schema.For[schema.RunBinding](x.Store, schema.CollRunBindings)
	b, err := binds.Get(ctx, id)
	switch {
	case err == nil:
		if b.ContextSnapshotID != "" {
			if err := schema.For[schema.ContextSnapshot](x.Store, schema.CollContextSnapshots).Delete(ctx, b.ContextSnapshotID); err != nil && !errors.Is(err, schema.ErrNotFound) {
				return false, err
			}
		}
		if err := binds.Delete(ctx, id); err != nil && !errors.Is(err, schema.ErrNotFound) {
			return false, err
		}
	case !errors.Is(err, schema.ErrNotFound):
		return false, err
	}
	if err := runs.Delete(ctx, id); err != nil && !errors.Is(err, schema.ErrNotFound) {
		return false, err
	}
	return true, nil
}

// appwriteHolds reports whether Appwrite holds the run's whole record: terminal, with
// every event up to lastSeq stored. A run Appwrite does not know is not expired here.
func (x *Expirer) appwriteHolds(ctx context.Context, runID string, lastSeq int64) (bool, error) {
	run, err := schema.For[schema.Run](x.Store, schema.CollRuns).Get(ctx, runID)
	if errors.Is(err, schema.ErrNotFound) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("retention: read run %s: %w", runID, err)
	}
	if !run.Status.Terminal() || run.LastSequence == nil || *run.LastSequence < lastSeq {
		return false, nil
	}
	if last := *run.LastSequence; last > 0 {
		_, err := schema.For[schema.Event](x.Store, schema.CollEvents).Get(ctx, schema.EventDocID(runID, last))
		if errors.Is(err, schema.ErrNotFound) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("retention: read event %s/%d: %w", runID, last, err)
		}
	}
	return true, nil
}

// deleteDueTasks deletes the asynq tasks whose retention ended (a task still active or
// already gone is dropped from the schedule alike: its own retention bounds it).
func (x *Expirer) deleteDueTasks(ctx context.Context) (int, error) {
	now := strconv.FormatInt(time.Now().UnixMilli(), 10)
	ids, err := x.RDB.ZRangeByScore(ctx, TasksDueKey, &redis.ZRangeBy{Min: "-inf", Max: now, Count: 1000}).Result()
	if err != nil || len(ids) == 0 {
		return 0, err
	}
	queues, err := x.RDB.SMembers(ctx, "asynq:queues").Result()
	if err != nil {
		return 0, fmt.Errorf("retention: queues: %w", err)
	}
	n := 0
	for _, id := range ids {
		for _, q := range queues {
			if err := x.Inspector.DeleteTask(q, id); err == nil {
				n++
				break
			}
		}
		if err := x.RDB.ZRem(ctx, TasksDueKey, id).Err(); err != nil {
			return n, fmt.Errorf("retention: %w", err)
		}
	}
	return n, nil
}

func stateRunID(key string) (string, bool) {
	s, ok := strings.CutPrefix(key, queue.RunKeyPrefix)
	if !ok {
		return "", false
	}
	id, ok := strings.CutSuffix(s, "}:state")
	return id, ok && queue.ValidID(id)
}

func str(v any) string {
	s, _ := v.(string)
	return s
}

// Start sweeps at once and then every Every in the background, until Stop.
func (x *Expirer) Start(ctx context.Context) error {
	every := x.Every
	if every <= 0 {
		every = DefaultRetentionEvery
	}
	return x.run.Start(ctx, func(ctx context.Context) {
		startstop.Every(ctx, every, x.log(), "retention sweep", func(ctx context.Context) error {
			sw, err := x.Once(ctx)
			if sw.Expired > 0 || sw.Tasks > 0 || sw.Purged > 0 {
				x.log().Info("retention: runs set to expire", "runs", sw.Expired, "tasksDeleted", sw.Tasks, "purged", sw.Purged, "scanned", sw.Scanned)
			}
			return err
		})
	})
}

// Stop ends the sweeps and waits for the one in progress. Idempotent, safe before Start.
func (x *Expirer) Stop() { x.run.Stop() }
