package service

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"privateassistant/fault"
	"privateassistant/functions/httpapi"
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
	Active    int    `json:"active"`   // tasks whose run is running (not asynq's raw count: runningTasks)
	Waiting   int    `json:"waiting"`  // taken by the agent, waiting in its GPU manager for the device
	Approval  int    `json:"approval"` // taken, waiting for their owner's approval (holding no device)
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

// sys is the container's reader of what /api/system shows.
func (s *Service) sys(st *schema.Store) SystemReader {
	return SystemReader{Store: st, RDB: s.rdb, Inspector: s.inspector, Stale: s.cfg.HeartbeatStale}
}

func (s *Service) systemRoutes(a *httpapi.API) {
	a.Handle("GET /api/system", httpapi.Route{}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		st, err := s.store(c)
		if err != nil {
			return err
		}
		admin := s.requireAdmin(c, false) == nil
		body, err := s.sys(st).View(r.Context(), time.Now().UTC(), admin)
		if err != nil {
			return storeErr(err, "device")
		}
		if admin {
			body["readiness"] = s.readiness(r.Context(), st, time.Now().UTC()) // system_ready.go
			if body["alerts"], err = adminAlerts(r.Context(), st); err != nil {
				return storeErr(err, "settings")
			}
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
			return &fault.Error{Kind: fault.Unavailable, Code: "unhealthy", Message: strings.Join(down, " and ") + " unavailable", Details: map[string]any{"checks": checks}}
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
