package stream

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"privateassistant/ops"
	"privateassistant/readiness"
)

// Ops is the service's ops listener, the agent's (ops): /healthz, /readyz (Redis
// and Appwrite answer) and /metrics (reg: the service's series, the Go and process
// collectors). reg must be the one New registered the service's metrics on.
func (s *Service) Ops(addr string, reg *prometheus.Registry, log *slog.Logger) *ops.Server {
	return &ops.Server{Addr: addr, Registry: reg, Log: log, Checks: map[string]readiness.Probe{
		"redis": {Kind: readiness.KindRedis, Check: s.Ping}, "appwrite": {Kind: readiness.KindAppwrite, Check: s.PingAppwrite},
	}}
}
