package daemon

import (
	"context"
	"strconv"

	"privateassistant/agent/gateway"
	"privateassistant/ops"
)

// meteredUsage counts what the gateway served (pa_gateway_tokens_total,
// pa_gateway_requests_total) before recording it for the run.
type meteredUsage struct {
	next gateway.Sink
	m    *ops.GatewayMetrics
}

var _ gateway.Sink = meteredUsage{}

func (s meteredUsage) Record(ctx context.Context, u gateway.Usage) {
	s.m.Requests.WithLabelValues(u.Alias, u.Device, strconv.Itoa(u.Status)).Inc()
	if u.PromptTokens > 0 {
		s.m.Tokens.WithLabelValues(u.Alias, u.Device, "prompt").Add(float64(u.PromptTokens))
	}
	if u.CompletionTokens > 0 {
		s.m.Tokens.WithLabelValues(u.Alias, u.Device, "completion").Add(float64(u.CompletionTokens))
	}
	s.next.Record(ctx, u)
}

// gpuReadings reads every managed device for /metrics (answered by each device's owner
// goroutine, without I/O).
func (a *Agent) gpuReadings() []ops.DeviceReading {
	out := make([]ops.DeviceReading, 0, len(a.GPU))
	for _, m := range a.GPU {
		st := m.Snapshot()
		out = append(out, ops.DeviceReading{Device: st.Device, Phase: string(st.Phase), Loaded: st.Loaded, Active: st.Active,
			Waiting: st.Waiting, Generation: st.Generation, MemUsed: st.Reading.MemUsed, MemTotal: st.Reading.MemTotal,
			TempC: st.Reading.TempC, PowerW: st.Reading.PowerW, BusyPercent: st.Reading.BusyPercent})
	}
	return out
}
