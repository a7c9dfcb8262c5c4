package service

import (
	"context"
	"errors"
	"sort"
	"strings"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// SystemReader reads what the system panel shows (the body of GET /api/system): devices
// as their agents last reported them, the device queues, the routes' qualifications. The
// function and the stream service (which pushes it over the change feed) share it, so
// both show the same thing by the same rules: no member's name or text is in it, and a
// route's figures and request progress are for an admin only (View's admin).
type SystemReader struct {
	Store *schema.Store // the gpu_status and model_routes records
	RDB   redis.Cmdable // the hot heartbeats, the runs' hot state, qualification progress
	// Inspector reads the device queues (asynq's own reader, which needs scripts); nil:
	// read them with plain read commands (queueViews), as the stream service does under
	// its read-only Redis user.
	Inspector *asynq.Inspector
	Stale     time.Duration // a heartbeat older than this reads "unknown"
}

// View is the body of GET /api/system for a member (admin: with the routes' figures).
func (y SystemReader) View(ctx context.Context, now time.Time, admin bool) (map[string]any, error) {
	recs, err := y.GPURecords(ctx)
	if err != nil {
		return nil, err
	}
	routes, rerr := y.RouteRecords(ctx)
	if rerr != nil {
		routes = nil
	}
	body := y.Assemble(ctx, now, recs, routes, rerr == nil)
	if !admin {
		StripAdmin(body)
	}
	return body, nil
}

// GPURecords reads the gpu_status records (the slow copy of the heartbeats).
func (y SystemReader) GPURecords(ctx context.Context) ([]schema.GPUStatus, error) {
	return schema.For[schema.GPUStatus](y.Store, schema.CollGPUStatus).All(ctx, schema.ListQuery{})
}

// RouteRecords reads every route revision.
func (y SystemReader) RouteRecords(ctx context.Context) ([]schema.ModelRoute, error) {
	return schema.For[schema.ModelRoute](y.Store, schema.CollModelRoutes).All(ctx, schema.ListQuery{})
}

// Assemble builds the admin's body from records read before (the stream service reads
// them less often than Redis) and Redis now. routesOK false: the routes could not be read
// ("routes": null).
func (y SystemReader) Assemble(ctx context.Context, now time.Time, recs []schema.GPUStatus, routes []schema.ModelRoute, routesOK bool) map[string]any {
	devs := y.Devices(ctx, now, recs)
	qs, qerr := y.Queues(ctx)
	body := map[string]any{"devices": devs, "queues": qs, "generatedAt": now.Format(time.RFC3339Nano),
		"staleAfterMs": y.Stale.Milliseconds()}
	if qerr != nil {
		body["queues"] = nil
		body["queueError"] = "queue state is unavailable"
	}
	if routesOK {
		body["routes"] = y.Routes(ctx, routes)
	} else {
		body["routes"] = []RouteQualificationView(nil)
	}
	return body
}

// StripAdmin removes from an admin's body what only an admin sees (a route's figures,
// its request in flight and the reason it is not qualified), in place.
func StripAdmin(body map[string]any) {
	rs, _ := body["routes"].([]RouteQualificationView)
	if rs == nil {
		return
	}
	out := make([]RouteQualificationView, len(rs))
	for i, v := range rs {
		v.Last, v.Request, v.Reason = nil, nil, ""
		out[i] = v
	}
	body["routes"] = out
}

// Devices merges the hot Redis heartbeats with the gpu_status records.
func (y SystemReader) Devices(ctx context.Context, now time.Time, recs []schema.GPUStatus) []DeviceView {
	byName := map[string]DeviceView{}
	for _, g := range recs {
		byName[g.Device] = DeviceView{Device: g.Device, Host: g.Host, State: g.State, LoadedModel: g.LoadedModel,
			ActiveModel: g.ActiveModel, MemoryUsedBytes: g.MemoryUsedBytes, MemoryTotalBytes: g.MemoryTotalBytes,
			TemperatureC: g.TemperatureC, PowerW: g.PowerW, QueueDepth: g.QueueDepth, HeartbeatAt: g.HeartbeatAt}
	}
	names, err := y.RDB.SMembers(ctx, queue.GPUDevicesKey()).Result()
	if err == nil {
		for _, n := range names {
			m, err := y.RDB.HGetAll(ctx, queue.GPUKey(n)).Result()
			if err != nil || len(m) == 0 {
				continue
			}
			hot := DeviceView{Device: n, Host: m["host"], State: m["state"], LoadedModel: ptrStr(m, "loadedModel"),
				ActiveModel: ptrStr(m, "activeModel"), MemoryUsedBytes: ptrInt(m, "memoryUsedBytes"),
				MemoryTotalBytes: ptrInt(m, "memoryTotalBytes"), TemperatureC: ptrFloat(m, "temperatureC"),
				PowerW: ptrFloat(m, "powerW"), QueueDepth: ptrInt(m, "queueDepth"), HeartbeatAt: m["heartbeatAt"], Reason: m["reason"]}
			if cur, ok := byName[n]; !ok || !beatBefore(hot.HeartbeatAt, cur.HeartbeatAt) {
				byName[n] = hot
			}
		}
	}
	out := make([]DeviceView, 0, len(byName))
	for _, d := range byName {
		hb, err := time.Parse(time.RFC3339Nano, d.HeartbeatAt)
		if err != nil || now.Sub(hb) > y.Stale {
			d.Stale, d.State, d.ActiveModel = true, "unknown", nil
			d.Reason = "no heartbeat from the device's agent for more than " + y.Stale.String()
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out
}

// Queues is each device queue's depth.
func (y SystemReader) Queues(ctx context.Context) ([]QueueView, error) {
	if y.Inspector == nil {
		return queueViews(ctx, y.RDB, time.Now())
	}
	names, err := y.Inspector.Queues()
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := []QueueView{}
	for _, n := range names {
		if !strings.HasPrefix(n, "gpu:") {
			continue
		}
		qi, err := y.Inspector.GetQueueInfo(n)
		if err != nil {
			continue
		}
		t := y.runningTasks(ctx, n, qi.Active)
		out = append(out, QueueView{Name: n, Pending: qi.Pending, Active: t.running, Waiting: t.waiting, Approval: t.approval, Scheduled: qi.Scheduled,
			Retry: qi.Retry, LatencyMs: qi.Latency.Milliseconds(), Paused: qi.Paused})
	}
	return out, nil
}

// queueViews reads the device queues as Queues does, with read commands only (SMEMBERS,
// LLEN, LRANGE, ZCARD, EXISTS, HGET) on asynq's keys (asynq v0.26's layout, which
// TestQueueViewsMatchTheInspector checks against the inspector).
func queueViews(ctx context.Context, rdb redis.Cmdable, now time.Time) ([]QueueView, error) {
	names, err := rdb.SMembers(ctx, "asynq:queues").Result()
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := []QueueView{}
	for _, n := range names {
		if !strings.HasPrefix(n, "gpu:") {
			continue
		}
		k := "asynq:{" + n + "}:"
		var pending *redis.IntCmd
		var active, oldest *redis.StringSliceCmd
		var scheduled, retry, paused *redis.IntCmd
		if _, err := rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			pending = p.LLen(ctx, k+"pending")
			oldest = p.LRange(ctx, k+"pending", -1, -1)
			active = p.LRange(ctx, k+"active", 0, -1)
			scheduled = p.ZCard(ctx, k+"scheduled")
			retry = p.ZCard(ctx, k+"retry")
			paused = p.Exists(ctx, k+"paused")
			return nil
		}); err != nil {
			return nil, err
		}
		v := QueueView{Name: n, Pending: int(pending.Val()), Scheduled: int(scheduled.Val()), Retry: int(retry.Val()), Paused: paused.Val() > 0}
		if ids := oldest.Val(); len(ids) == 1 {
			if ns, err := rdb.HGet(ctx, k+"t:"+ids[0], "pending_since").Int64(); err == nil && ns > 0 {
				v.LatencyMs = now.Sub(time.Unix(0, ns)).Milliseconds()
			}
		}
		t := takenBy(ctx, rdb, active.Val())
		v.Active, v.Waiting, v.Approval = t.running, t.waiting, t.approval
		out = append(out, v)
	}
	return out, nil
}

// taken is what a device queue's active tasks (taken by an agent) are doing, from each
// run's hot state, so that the panel's counts agree with the cards: a run waiting in the
// GPU manager for the device (waiting_for_resource) is waiting, one waiting for its
// owner's approval holds nothing (issue 32 item 1), and only the rest run.
type taken struct{ running, waiting, approval int }

// takenBy counts the tasks (runs) whose hot state is not terminal, by what they do
// (runningTasks). A task without hot state yet (just claimed) runs.
func takenBy(ctx context.Context, rdb redis.Cmdable, ids []string) taken {
	if len(ids) == 0 {
		return taken{}
	}
	// HGET, not HMGET: the stream service's Redis user may read with HGET only.
	terms, stats := make([]*redis.StringCmd, len(ids)), make([]*redis.StringCmd, len(ids))
	if _, err := rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, id := range ids {
			terms[i] = pipe.HGet(ctx, queue.StateKey(id), "terminal")
			stats[i] = pipe.HGet(ctx, queue.StateKey(id), "status")
		}
		return nil
	}); err != nil && !errors.Is(err, redis.Nil) {
		return taken{running: len(ids)}
	}
	var t taken
	for i := range ids {
		if v, err := terms[i].Result(); err == nil && v == "true" {
			continue
		}
		switch st, _ := stats[i].Result(); st {
		case "waiting_for_resource":
			t.waiting++
		case "waiting_for_approval":
			t.approval++
		default:
			t.running++
		}
	}
	return t
}

// runningTasks counts a device queue's active tasks whose run is still going, by what they
// do. asynq's active list also holds finished work: a task whose run already settled until
// its worker returns and acks it (the agent settles the record first), and an orphan of a
// stopped worker until its lease runs out. The System panel showed "1 running" on an idle
// machine. A task counts unless its run's hot state says terminal. active is asynq's own
// count, returned as running when the list cannot be read.
func (y SystemReader) runningTasks(ctx context.Context, queueName string, active int) taken {
	if active == 0 {
		return taken{}
	}
	tasks, err := y.Inspector.ListActiveTasks(queueName, asynq.PageSize(500))
	if err != nil {
		return taken{running: active}
	}
	ids := make([]string, len(tasks))
	for i, t := range tasks {
		ids[i] = t.ID
	}
	return takenBy(ctx, y.RDB, ids)
}

// Routes is each route's last GPU qualification (its latest revision), with the figures
// and any request in flight (StripAdmin removes them for a member).
func (y SystemReader) Routes(ctx context.Context, rs []schema.ModelRoute) []RouteQualificationView {
	latest := map[string]*schema.ModelRoute{}
	for i := range rs {
		if cur, ok := latest[rs[i].RouteID]; !ok || rs[i].Revision > cur.Revision {
			latest[rs[i].RouteID] = &rs[i]
		}
	}
	out := make([]RouteQualificationView, 0, len(latest))
	for _, r := range latest {
		out = append(out, routeQualification(ctx, y.RDB, r))
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Route < out[j].Route })
	return out
}

func routeQualification(ctx context.Context, rdb redis.Cmdable, r *schema.ModelRoute) RouteQualificationView {
	v := RouteQualificationView{Route: r.RouteID, Revision: r.Revision, Device: r.Device, Model: r.BackendModel, ContextBudget: r.ContextBudget}
	q, err := runconfig.RouteQualification(r)
	v.Last = q
	v.Summary = q.Summary()
	if err == nil {
		err = runconfig.CheckQualified(r)
	}
	v.Qualified = err == nil
	if err != nil {
		v.Reason = err.Error()
	}
	if m, err := runconfig.QualifyStatus(ctx, rdb, r.RouteID); err == nil && m != nil {
		delete(m, "result") // the recorded one is Last
		v.Request = m
	}
	return v
}

// beatBefore reports whether heartbeat a is older than b, read as times (Appwrite gives a
// record's datetime back in its own format, at millisecond precision, so the strings do not
// compare). The hot heartbeat, with its reason, is shown unless the record is newer; an
// unreadable one loses.
func beatBefore(a, b string) bool {
	ta, errA := time.Parse(time.RFC3339Nano, a)
	tb, errB := time.Parse(time.RFC3339Nano, b)
	switch {
	case errA != nil:
		return true
	case errB != nil:
		return false
	}
	return ta.Add(time.Millisecond).Before(tb) // the same beat differs by less than its rounding
}
