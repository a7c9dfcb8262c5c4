package service

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"privateassistant/functions/httpapi"
	"privateassistant/queue"
	"privateassistant/schema"
)

// DeviceView is one GPU as last observed. A heartbeat older than the stale bound reads
// "unknown": never idle, never safe.
type DeviceView struct {
	Device           string   `json:"device"`
	Host             string   `json:"host"`
	State            string   `json:"state"`
	LoadedModel      *string  `json:"loadedModel"`
	ActiveModel      *string  `json:"activeModel"`
	MemoryUsedBytes  *int64   `json:"memoryUsedBytes"`
	MemoryTotalBytes *int64   `json:"memoryTotalBytes"`
	TemperatureC     *float64 `json:"temperatureC"`
	PowerW           *float64 `json:"powerW"`
	QueueDepth       *int64   `json:"queueDepth"`
	HeartbeatAt      string   `json:"heartbeatAt"`
	Stale            bool     `json:"stale"`
	// Reason says why the device is in its state (why it is unknown, what a swap waits
	// for), from the agent's heartbeat; for a stale heartbeat, that it is stale.
	Reason string `json:"reason,omitempty"`
}

// QueueView is one device queue's depth.
type QueueView struct {
	Name      string `json:"name"`
	Pending   int    `json:"pending"`
	Active    int    `json:"active"` // tasks whose run is still going (not asynq's raw count: runningTasks)
	Scheduled int    `json:"scheduled"`
	Retry     int    `json:"retry"`
	LatencyMs int64  `json:"latencyMs"`
	Paused    bool   `json:"paused"`
}

func ptrStr(m map[string]string, k string) *string {
	if v, ok := m[k]; ok && v != "" {
		return &v
	}
	return nil
}

func ptrInt(m map[string]string, k string) *int64 {
	if v, err := strconv.ParseInt(m[k], 10, 64); err == nil {
		return &v
	}
	return nil
}

func ptrFloat(m map[string]string, k string) *float64 {
	if v, err := strconv.ParseFloat(m[k], 64); err == nil {
		return &v
	}
	return nil
}

// devices merges the hot Redis heartbeats with the gpu_status records.
func (s *Service) devices(ctx context.Context, st *schema.Store, now time.Time) ([]DeviceView, error) {
	byName := map[string]DeviceView{}
	recs, err := schema.For[schema.GPUStatus](st, schema.CollGPUStatus).All(ctx, schema.ListQuery{})
	if err != nil {
		return nil, err
	}
	for _, g := range recs {
		byName[g.Device] = DeviceView{Device: g.Device, Host: g.Host, State: g.State, LoadedModel: g.LoadedModel,
			ActiveModel: g.ActiveModel, MemoryUsedBytes: g.MemoryUsedBytes, MemoryTotalBytes: g.MemoryTotalBytes,
			TemperatureC: g.TemperatureC, PowerW: g.PowerW, QueueDepth: g.QueueDepth, HeartbeatAt: g.HeartbeatAt}
	}
	names, err := s.rdb.SMembers(ctx, queue.GPUDevicesKey()).Result()
	if err == nil {
		for _, n := range names {
			m, err := s.rdb.HGetAll(ctx, queue.GPUKey(n)).Result()
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
		if err != nil || now.Sub(hb) > s.cfg.HeartbeatStale {
			d.Stale, d.State, d.ActiveModel = true, "unknown", nil
			d.Reason = "no heartbeat from the device's agent for more than " + s.cfg.HeartbeatStale.String()
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Device < out[j].Device })
	return out, nil
}

func (s *Service) queues(ctx context.Context) ([]QueueView, error) {
	names, err := s.inspector.Queues()
	if err != nil {
		return nil, err
	}
	sort.Strings(names)
	out := []QueueView{}
	for _, n := range names {
		if !strings.HasPrefix(n, "gpu:") {
			continue
		}
		qi, err := s.inspector.GetQueueInfo(n)
		if err != nil {
			continue
		}
		out = append(out, QueueView{Name: n, Pending: qi.Pending, Active: s.runningTasks(ctx, n, qi.Active), Scheduled: qi.Scheduled,
			Retry: qi.Retry, LatencyMs: qi.Latency.Milliseconds(), Paused: qi.Paused})
	}
	return out, nil
}

func (s *Service) systemRoutes(a *httpapi.API) {
	a.Handle("GET /api/system", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		st, err := s.store(c)
		if err != nil {
			return err
		}
		now := time.Now().UTC()
		devs, err := s.devices(r.Context(), st, now)
		if err != nil {
			return storeErr(err, "device")
		}
		qs, qerr := s.queues(r.Context())
		body := map[string]any{"devices": devs, "queues": qs, "generatedAt": now.Format(time.RFC3339Nano),
			"staleAfterMs": s.cfg.HeartbeatStale.Milliseconds()}
		if qerr != nil {
			body["queues"] = nil
			body["queueError"] = "queue state is unavailable"
		}
		body["routes"] = s.routeQualifications(r.Context(), st, s.requireAdmin(c, false) == nil)
		if s.requireAdmin(c, false) == nil {
			body["readiness"] = s.readiness(r.Context(), st, now) // system_ready.go
		}
		httpapi.WriteJSON(w, 200, body)
		return nil
	})
	a.Handle("GET /api/health", httpapi.Route{Public: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		checks := s.health(r.Context())
		down := []string{}
		for _, name := range []string{"redis", "appwrite"} {
			if checks[name] != "ok" {
				down = append(down, name)
			}
		}
		if len(down) > 0 {
			return &httpapi.Error{Status: 503, Code: "unhealthy", Message: strings.Join(down, " and ") + " unavailable",
				Extra: map[string]any{"checks": checks}}
		}
		httpapi.WriteJSON(w, 200, map[string]any{"ok": true, "checks": checks})
		return nil
	})
}

// HealthTimeout bounds each dependency check of /api/health.
const HealthTimeout = 2 * time.Second

// health checks the function's dependencies at once: Redis answers PING, Appwrite answers
// GET /health/version (public: no key, no scope). The answer is only "ok" or "down" per
// dependency; the cause goes to the log, never to the unauthenticated caller.
func (s *Service) health(ctx context.Context) map[string]string {
	var redisErr, appwriteErr error
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		cctx, cancel := context.WithTimeout(ctx, HealthTimeout)
		defer cancel()
		redisErr = s.rdb.Ping(cctx).Err()
	}()
	go func() {
		defer wg.Done()
		cctx, cancel := context.WithTimeout(ctx, HealthTimeout)
		defer cancel()
		appwriteErr = s.appwriteUp(cctx)
	}()
	wg.Wait()
	out := map[string]string{}
	for name, err := range map[string]error{"redis": redisErr, "appwrite": appwriteErr} {
		out[name] = "ok"
		if err != nil {
			out[name] = "down"
			s.log.Warn("health check failed", "requestId", httpapi.RequestID(ctx), "dependency", name, "err", err)
		}
	}
	return out
}

// appwriteUp asks Appwrite for its version, without a key.
func (s *Service) appwriteUp(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimRight(s.cfg.Endpoint, "/")+"/health/version", nil)
	if err != nil {
		return err
	}
	req.Header.Set("X-Appwrite-Project", s.cfg.ProjectID)
	resp, err := s.http.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4096))
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET /health/version answered %d", resp.StatusCode)
	}
	return nil
}

// routeQualifications is each route's last GPU qualification (its latest revision), for
// /api/system: the figures and any request in flight for an admin, the verdict for
// everyone. nil when the routes cannot be read.
func (s *Service) routeQualifications(ctx context.Context, st *schema.Store, admin bool) []RouteQualificationView {
	rs, err := schema.For[schema.ModelRoute](st, schema.CollModelRoutes).All(ctx, schema.ListQuery{})
	if err != nil {
		return nil
	}
	latest := map[string]*schema.ModelRoute{}
	for i := range rs {
		if cur, ok := latest[rs[i].RouteID]; !ok || rs[i].Revision > cur.Revision {
			latest[rs[i].RouteID] = &rs[i]
		}
	}
	out := make([]RouteQualificationView, 0, len(latest))
	for _, r := range latest {
		v := s.routeQualification(ctx, r)
		if !admin {
			v.Last, v.Request, v.Reason = nil, nil, ""
		}
		out = append(out, v)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Route < out[j].Route })
	return out
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
