package runconfig

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"privateassistant/fault"
	"privateassistant/queue"
	"privateassistant/schema"
)

// A qualification request (issue 20; issue 31 item 3) is an asynq task (queue.QualifyTask)
// on the route's device queue, handed to the agent serving that device like any device
// job (agent/gpu Qualifier). Its progress is a hash per route (QualifyStatusKey) written
// by one script (qualifyStatusScript), once per transition: "queued" by the admin API as
// it enqueues, then by the agent: waiting (in the device's queue, with its position),
// running (each step), and one verdict (passed, failed, error). An agent killed at any
// point leaves the task active in asynq; asynq's recoverer hands it out again once the
// dead agent's lease on it has run out, and the next delivery runs it to a verdict.

// QualifyStatusKey is the Redis hash with the latest qualification request of a route and
// how far it got, kept QualifyStatusTTL.
func QualifyStatusKey(route string) string { return queue.QualifyStatusKey(route) }

// Qualification states in the status hash.
const (
	QualifyQueued  = "queued"  // in the device's asynq queue; no agent has reported on it yet
	QualifyWaiting = "waiting" // taken, waiting in the device's queue (reason, position)
	QualifyRunning = "running" // holds the device: loading and stressing
	QualifyPassed  = "passed"  // recorded on revision recordedRevision
	QualifyFailed  = "failed"  // recorded on revision recordedRevision, with reasons
	QualifyError   = "error"   // did not reach a verdict (reason): nothing recorded
)

// QualifyHeartbeat is how often the agent refreshes the status (updatedAt) of the request
// it works on; a waiting or running request whose status is older than
// QualifyAbandonedAfter lost its agent (QualifyStatusView says so).
const (
	QualifyHeartbeat      = 10 * time.Second
	QualifyAbandonedAfter = 6 * QualifyHeartbeat
)

// QualifyStatusTTL is how long a route's qualification status is kept in Redis (the
// result itself is on the route's revision for good).
const QualifyStatusTTL = 7 * 24 * time.Hour

// QualifyAbandoned is the reason a waiting or running request whose agent stopped beating
// shows: its task is still asynq's, and the next agent serving the device runs it.
const QualifyAbandoned = "its agent stopped answering during this qualification; nothing was recorded; " +
	"it starts again by itself once an agent serving the device is back (asking again says whether it is still queued)"

// QualifyCutOff is the reason a qualification whose agent stopped in the middle of it
// (a shutdown, or a lost lease on its task) shows until asynq hands it out again.
const QualifyCutOff = "its agent stopped during this qualification; nothing was recorded; it starts again by itself when the agent is back"

// QualifyStatusView is the status hash as users see it: a waiting or running request whose
// heartbeat is older than QualifyAbandonedAfter is waiting for an agent, and says so.
func QualifyStatusView(m map[string]string, now time.Time) map[string]string {
	if m["state"] != QualifyWaiting && m["state"] != QualifyRunning {
		return m
	}
	if at, err := time.Parse(time.RFC3339Nano, m["updatedAt"]); err != nil || now.Sub(at) < QualifyAbandonedAfter {
		return m // beating (or no beat to judge by: as stored)
	}
	out := maps.Clone(m)
	out["state"], out["reason"], out["step"], out["position"] = QualifyWaiting, QualifyAbandoned, "", "0"
	return out
}

// qualifyStatusScript writes a request's status fields in one step (no read-then-write).
// A request owns the hash when it is its own, or when the hash holds an older request
// (a lower route revision, or the same revision asked earlier): then the hash is cleared
// and becomes this request's. A newer request's status is never overwritten, and "new"
// (the admin API, right after the enqueue) never takes back a status its agent already
// wrote. KEYS[1] the status hash; ARGV request id, route revision, requestedAt (Unix ms),
// ttl ms, mode ("new" or "update"), then field, value pairs. Returns 1 when written.
var qualifyStatusScript = redis.NewScript(`
local cur = redis.call('HMGET', KEYS[1], 'requestId', 'routeRevision', 'requestedAtMs')
if cur[1] == ARGV[1] then
  if ARGV[5] == 'new' then return 0 end
else
  local rev, at = tonumber(cur[2]) or 0, tonumber(cur[3]) or 0
  local mrev, mat = tonumber(ARGV[2]), tonumber(ARGV[3])
  if cur[1] and (rev > mrev or (rev == mrev and at > mat)) then return 0 end
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'requestId', ARGV[1], 'routeRevision', ARGV[2], 'requestedAtMs', ARGV[3])
end
for i = 6, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[4])
return 1
`)

// WriteQualifyStatus records one transition of request p (its agent's progress) on the
// route's status hash, with updatedAt and the device; fields are field, value pairs
// (none: a heartbeat). It reports whether the hash was p's to write.
func WriteQualifyStatus(ctx context.Context, rdb redis.Scripter, p queue.QualifyTask, fields ...any) (bool, error) {
	return writeQualifyStatus(ctx, rdb, p, "update", fields...)
}

func writeQualifyStatus(ctx context.Context, rdb redis.Scripter, p queue.QualifyTask, mode string, fields ...any) (bool, error) {
	args := append([]any{p.RequestID, p.RouteRevision, p.RequestedAt.UnixMilli(), QualifyStatusTTL.Milliseconds(), mode}, fields...)
	args = append(args, "device", p.Device, "updatedAt", time.Now().UTC().Format(time.RFC3339Nano))
	n, err := qualifyStatusScript.Run(ctx, rdb, []string{QualifyStatusKey(p.Route)}, args...).Int()
	if err != nil {
		return false, fmt.Errorf("qualification status of %s: %w", p.Route, err)
	}
	return n == 1, nil
}

// QualifyTasks is what asking needs of asynq's inspector: the state of a route
// revision's task, and deleting one that has finished.
type QualifyTasks interface {
	GetTaskInfo(queue, id string) (*asynq.TaskInfo, error)
	DeleteTask(queue, id string) error
}

var _ QualifyTasks = (*asynq.Inspector)(nil)

// QualifyAsker asks the agent of a route's device to qualify the route (the admin API's
// POST /api/model-routes/{route}/qualify; pa admin gpu qualify ROUTE).
type QualifyAsker struct {
	RDB   redis.UniversalClient
	Enq   *queue.Enqueuer
	Tasks QualifyTasks
}

// errRedis is the answer when the device state or the queue cannot be reached.
func errRedis(err error) error {
	e := fault.E(fault.Unavailable, "redis_unavailable", "device state is unavailable; try again", err)
	e.RetryAfter = 2 * time.Second
	return e
}

// Ask queues a qualification of the route's latest revision on its device's queue and
// marks it queued. It refuses (fault.Conflict) a device no agent manages
// (device_not_managed) and a revision whose qualification is still queued or running
// (qualification_in_progress); a finished one (its task completed, or archived by asynq)
// is asked again. Route read errors are returned as the store gave them.
func (a *QualifyAsker) Ask(ctx context.Context, st *schema.Store, routeID, actor string) (queue.QualifyTask, *schema.ModelRoute, error) {
	route, err := LatestRoute(ctx, st, routeID)
	if err != nil {
		return queue.QualifyTask{}, nil, err
	}
	managed, err := a.RDB.SIsMember(ctx, queue.GPUDevicesKey(), route.Device).Result()
	if err != nil {
		return queue.QualifyTask{}, nil, errRedis(err)
	}
	if !managed {
		return queue.QualifyTask{}, nil, fault.Errorf(fault.Conflict, "device_not_managed",
			"no agent manages device %s (it has never reported status), so nothing can qualify route %s on it", route.Device, routeID)
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	p := queue.QualifyTask{RequestID: "q" + hex.EncodeToString(b[:]), Route: routeID, RouteRevision: route.Revision, Device: route.Device,
		RequestedBy: actor, RequestedAt: time.Now().UTC()}
	qname, id := queue.DeviceQueue(route.Device), queue.QualifyTaskID(routeID, route.Revision)
	for try := 0; ; try++ {
		created, err := a.Enq.EnqueueQualify(ctx, p)
		if err != nil {
			return p, nil, errRedis(err)
		}
		if created {
			break
		}
		// The revision's task exists: still to run (or running), or finished and kept.
		info, err := a.Tasks.GetTaskInfo(qname, id)
		switch {
		case errors.Is(err, asynq.ErrTaskNotFound) && try < 3:
			continue // it went meanwhile
		case err != nil:
			return p, nil, errRedis(err)
		}
		if (info.State == asynq.TaskStateCompleted || info.State == asynq.TaskStateArchived) && try < 3 {
			if err := a.Tasks.DeleteTask(qname, id); err != nil && !errors.Is(err, asynq.ErrTaskNotFound) {
				return p, nil, errRedis(err)
			}
			continue
		}
		cur, _ := a.RDB.HGetAll(ctx, QualifyStatusKey(routeID)).Result() // for the message only
		cur = QualifyStatusView(cur, time.Now())
		what := "queued for the agent of " + route.Device
		if cur["state"] != "" && cur["state"] != QualifyQueued {
			what = cur["state"] + ": " + cur["reason"]
		}
		return p, nil, fault.Errorf(fault.Conflict, "qualification_in_progress",
			"route %s revision %d is already being qualified (%s)", routeID, route.Revision, what)
	}
	// The task is queued: should this write fail, its agent writes the status from its
	// pick-up on.
	_, _ = writeQualifyStatus(ctx, a.RDB, p, "new", "state", QualifyQueued, "requestedBy", actor,
		"requestedAt", p.RequestedAt.Format(time.RFC3339Nano),
		"reason", fmt.Sprintf("queued for the agent of %s: it runs like a job, after the jobs holding or waiting for the device", route.Device))
	return p, route, nil
}

// QualifyStatus is a route's latest request as users see it (nil: none kept).
func QualifyStatus(ctx context.Context, rdb redis.Cmdable, route string) (map[string]string, error) {
	m, err := rdb.HGetAll(ctx, QualifyStatusKey(route)).Result()
	if err != nil || len(m) == 0 {
		return nil, err
	}
	delete(m, "requestedAtMs")
	return QualifyStatusView(m, time.Now()), nil
}
