package gpu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/internal/startstop"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// Qualifier runs the qualifications the admin API queues for this agent's devices
// (POST /api/model-routes/{route}/qualify, pa admin gpu qualify ROUTE): it takes each
// device's requests from runconfig.QualifyQueueKey one at a time, qualifies the route's
// latest revision on the device (Manager.Qualify: it waits in the device's queue like a
// job), records the result on a new revision of the route, and keeps the request's
// progress in runconfig.QualifyStatusKey for the admin API and /api/system.
type Qualifier struct {
	RDB    redis.UniversalClient
	Store  *schema.Store
	Pool   Pool
	Config *Config       // the devices' limits (nil: the defaults)
	Every  time.Duration // how often an idle device's list is polled (default 1 s)
	Log    *slog.Logger
	r      startstop.Runner
}

// Start polls every device's list until Stop.
func (q *Qualifier) Start(ctx context.Context) error {
	every := q.Every
	if every <= 0 {
		every = time.Second
	}
	if err := q.r.Start(ctx, nil); err != nil {
		return err
	}
	for name := range q.Pool {
		q.r.Go(func(ctx context.Context) {
			q.recover(ctx, name)
			startstop.Every(ctx, every, q.log().With("device", name), "gpu qualification", func(ctx context.Context) error {
				return q.Next(ctx, name)
			})
		})
	}
	return nil
}

func (q *Qualifier) log() *slog.Logger {
	if q.Log != nil {
		return q.Log
	}
	return slog.Default()
}

// Stop ends polling and waits; a qualification in flight ends (its status says so).
func (q *Qualifier) Stop() { q.r.Stop() }

var _ startstop.Service = (*Qualifier)(nil)

func (q *Qualifier) limits(device string) (runconfig.QualificationLimits, time.Duration) {
	if q.Config == nil {
		return (&Config{}).QualifyLimits(device)
	}
	return q.Config.QualifyLimits(device)
}

// statusScript writes a qualification's status fields only while the hash is its
// request's, in one step (no read-then-write: a newer request taking the hash between a
// read and a write is never overwritten). KEYS status hash; ARGV request id, ttl ms, then
// field, value pairs. Returns 1 when written.
var statusScript = redis.NewScript(`
if redis.call('HGET', KEYS[1], 'requestId') ~= ARGV[1] then return 0 end
for i = 3, #ARGV, 2 do redis.call('HSET', KEYS[1], ARGV[i], ARGV[i+1]) end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return 1
`)

// status writes fields to the route's status hash (only for the request it is about: a
// newer request owns the hash).
func (q *Qualifier) status(ctx context.Context, req runconfig.QualifyRequest, fields ...any) {
	args := append([]any{req.ID, runconfig.QualifyStatusTTL.Milliseconds()}, fields...)
	args = append(args, "requestId", req.ID, "device", req.Device, "updatedAt", time.Now().UTC().Format(time.RFC3339Nano))
	if err := statusScript.Run(ctx, q.RDB, []string{runconfig.QualifyStatusKey(req.Route)}, args...).Err(); err != nil {
		q.log().Warn("qualification status not written", "route", req.Route, "err", err)
	}
}

// recover settles the request an earlier run of this agent took from device's list and did
// not finish (it was killed, at any step from the pick-up on): its status says plainly that
// nothing was recorded and it must be asked again. The device's control lease makes this
// agent its only qualifier, so a request in the active list is nobody else's.
func (q *Qualifier) recover(ctx context.Context, device string) {
	active := runconfig.QualifyActiveKey(device)
	raws, err := q.RDB.LRange(ctx, active, 0, -1).Result()
	if err != nil {
		q.log().Warn("qualifications cut off by a restart could not be read", "device", device, "err", err)
		return
	}
	for _, raw := range raws {
		var req runconfig.QualifyRequest
		if json.Unmarshal([]byte(raw), &req) == nil && req.Route != "" {
			req.Device = device
			q.status(ctx, req, "state", runconfig.QualifyError, "reason", runconfig.QualifyCutOff, "position", 0, "step", "")
			q.log().Warn("a qualification was cut off by a restart", "route", req.Route, "device", device, "request", req.ID)
		}
		q.RDB.LRem(ctx, active, 1, raw)
	}
}

// Next takes one request for device, if any, and runs it to its end. The request moves to
// the device's active list atomically as it is taken and leaves it only once settled.
func (q *Qualifier) Next(ctx context.Context, device string) error {
	m := q.Pool[device]
	if m == nil {
		return fmt.Errorf("no device %s", device)
	}
	active := runconfig.QualifyActiveKey(device)
	raw, err := q.RDB.LMove(ctx, runconfig.QualifyQueueKey(device), active, "LEFT", "RIGHT").Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return err
	}
	defer q.RDB.LRem(context.WithoutCancel(ctx), active, 1, raw)
	var req runconfig.QualifyRequest
	if err := json.Unmarshal([]byte(raw), &req); err != nil || req.Route == "" {
		return fmt.Errorf("a qualification request that cannot be read was dropped: %q", raw)
	}
	req.Device = device
	fail := func(err error) error {
		q.status(context.WithoutCancel(ctx), req, "state", runconfig.QualifyError, "reason", err.Error(), "position", 0)
		return err
	}
	route, err := runconfig.LatestRoute(ctx, q.Store, req.Route)
	if err != nil {
		return fail(fmt.Errorf("route %s could not be read: %w", req.Route, err))
	}
	if route.Device != device {
		return fail(fmt.Errorf("route %s now runs on %s, not %s; ask again", req.Route, route.Device, device))
	}
	lim, timeout := q.limits(device)
	qr := QualifyRequest{Route: route.RouteID, RouteRevision: route.Revision, Model: route.BackendModel, Budget: route.ContextBudget, Timeout: timeout,
		OnStart: func() {
			q.status(ctx, req, "state", runconfig.QualifyRunning, "position", 0,
				"reason", fmt.Sprintf("qualifying %s on %s at %d tokens", route.BackendModel, device, route.ContextBudget))
		},
		// Each step as it goes (load, fill n of N tokens, generate, slots, thermal).
		OnStep: func(step, detail string) {
			q.status(ctx, req, "state", runconfig.QualifyRunning, "step", step, "reason", detail)
		}}
	if route.MaxOutput != nil {
		qr.MaxOutput = *route.MaxOutput
	}
	q.status(ctx, req, "state", runconfig.QualifyWaiting, "routeRevision", route.Revision, "reason", "waiting for the device")
	// A heartbeat on the status while it waits and runs: the admin API reads a request
	// whose status stopped beating (this agent died) as abandoned and takes a new one.
	hctx, stopBeat := context.WithCancel(ctx)
	beat := make(chan struct{})
	go func() {
		defer close(beat)
		startstop.Every(hctx, runconfig.QualifyHeartbeat, nil, "", func(ctx context.Context) error {
			q.status(ctx, req)
			return nil
		})
	}()
	defer func() { stopBeat(); <-beat }()
	res, err := m.Qualify(ctx, qr, lim, func(pos int, reason string) {
		q.status(ctx, req, "state", runconfig.QualifyWaiting, "position", pos, "reason", "queued like a job: "+reason)
	})
	if err != nil {
		return fail(fmt.Errorf("the qualification did not finish (%v); nothing was recorded; ask again", err))
	}
	actor := req.RequestedBy
	if actor == "" {
		actor = "agent"
	}
	body, _ := json.Marshal(res)
	rec, err := runconfig.RecordQualification(context.WithoutCancel(ctx), q.Store, actor, res)
	if err != nil {
		q.status(context.WithoutCancel(ctx), req, "state", runconfig.QualifyError, "reason", "not recorded: "+err.Error(), "result", string(body))
		return err
	}
	state := runconfig.QualifyPassed
	if !res.Passed {
		state = runconfig.QualifyFailed
	}
	q.status(context.WithoutCancel(ctx), req, "state", state, "reason", res.Summary(), "result", string(body),
		"recordedRevision", strconv.FormatInt(rec.Revision, 10), "position", 0, "step", "")
	q.log().Info("route qualified", "route", req.Route, "device", device, "model", res.Model, "passed", res.Passed, "revision", rec.Revision, "summary", res.Summary())
	return nil
}
