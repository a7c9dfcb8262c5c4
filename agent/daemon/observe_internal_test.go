package daemon

import (
	"context"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/gateway"
	"privateassistant/ops"
)

type usageList []gateway.Usage

func (l *usageList) Record(_ context.Context, u gateway.Usage) { *l = append(*l, u) }

func TestMeteredUsageCountsTokensAndPassesUsageOn(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	var next usageList
	s := meteredUsage{next: &next, m: ops.NewGatewayMetrics(reg)}
	s.Record(context.Background(), gateway.Usage{Run: "r1", Alias: "work", Device: "xtx", PromptTokens: 100, CompletionTokens: 20, Status: 200})
	s.Record(context.Background(), gateway.Usage{Run: "r2", Alias: "work", Device: "xtx", PromptTokens: 5, CompletionTokens: 1, Status: 200})
	s.Record(context.Background(), gateway.Usage{Run: "r3", Alias: "chat", Device: "arc", Status: 409})
	require.Len(t, next, 3, "every usage still reaches the run's record")
	val := func(c prometheus.Collector) float64 {
		ch := make(chan prometheus.Metric, 1)
		c.Collect(ch)
		var d dto.Metric
		require.NoError(t, (<-ch).Write(&d))
		return d.GetCounter().GetValue()
	}
	require.Equal(t, 105.0, val(s.m.Tokens.WithLabelValues("work", "xtx", "prompt")))
	require.Equal(t, 21.0, val(s.m.Tokens.WithLabelValues("work", "xtx", "completion")))
	require.Equal(t, 2.0, val(s.m.Requests.WithLabelValues("work", "xtx", "200")))
	require.Equal(t, 1.0, val(s.m.Requests.WithLabelValues("chat", "arc", "409")))
}
