package service

import (
	"net/http"
	"time"

	"privateassistant/functions/httpapi"
	"privateassistant/queue"
)

// gpuConfirmTTL is how long an operator's confirmation waits for the device's agent to
// read it (the agent polls every telemetry interval, 2 s by default).
const gpuConfirmTTL = 10 * time.Minute

// gpuAdminRoutes: an admin confirms that a device in state "unknown" is free again (they
// checked the card: nothing holds its memory). The admin function records the time under
// pa:gpu:{device}:confirm (agent/gpu.ConfirmKey); the device's agent applies it once, and
// only to a device that became unknown before it. A device that is not unknown is left
// as it is.
func (s *Service) gpuAdminRoutes(a *httpapi.API) {
	a.Handle("POST /api/gpus/{device}/confirm", httpapi.Route{MaxBody: 1 << 10}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		if err := s.requireAdmin(c, false); err != nil {
			return err
		}
		dev := r.PathValue("device")
		if !queue.ValidID(dev) {
			return httpapi.NotFound("device")
		}
		known, err := s.rdb.SIsMember(r.Context(), queue.GPUDevicesKey(), dev).Result()
		if err != nil {
			return &httpapi.Error{Status: 503, Code: "redis_unavailable", Message: "device state is unavailable; try again", RetryAfter: 2 * time.Second}
		}
		if !known {
			return httpapi.NotFound("device")
		}
		now := time.Now().UTC()
		if err := s.rdb.Set(r.Context(), queue.GPUKey(dev)+":confirm", now.Format(time.RFC3339Nano), gpuConfirmTTL).Err(); err != nil {
			return &httpapi.Error{Status: 503, Code: "redis_unavailable", Message: "device state is unavailable; try again", RetryAfter: 2 * time.Second}
		}
		state, _ := s.rdb.HGet(r.Context(), queue.GPUKey(dev), "state").Result()
		s.log.Info("gpu device confirmed free by an admin", "device", dev, "admin", c.User.ID, "state", state)
		httpapi.WriteJSON(w, 202, map[string]any{"device": dev, "confirmedAt": now.Format(time.RFC3339Nano), "state": state,
			"note": "the device's agent applies this within seconds if the device is unknown; otherwise nothing changes"})
		return nil
	})
}
