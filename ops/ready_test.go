package ops_test

import (
	"context"
	"errors"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"privateassistant/ops"
	"privateassistant/readiness"
)

// TestReadinessMetric: pa_component_ready is 1 for a ready, idle or unknown component and
// 0 for a failing one, labelled by kind and name.
func TestReadinessMetric(t *testing.T) {
	t.Parallel()
	down := errors.New("connection refused")
	probes := map[string]readiness.Probe{
		"redis":            {Kind: readiness.KindRedis, Check: func(context.Context) error { return down }},
		"stream":           {Kind: readiness.KindStream, Needs: "redis", Check: func(context.Context) error { return down }},
		"hermes:member:u1": {Kind: readiness.KindHermes, Check: func(context.Context) error { return readiness.Idle{Why: "stopped while unused"} }},
		"hermes:member:u2": {Kind: readiness.KindHermes, Check: func(context.Context) error { return errors.New("start timed out") }},
		"queue:gpu:arc":    {Kind: readiness.KindQueueConsumers, Needs: "redis", Check: func(context.Context) error { return nil }},
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(ops.NewReadinessCollector(func(ctx context.Context) []readiness.Component { return readiness.Evaluate(ctx, probes) }))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, mfs, 1)
	require.Equal(t, ops.ComponentReadyName, mfs[0].GetName())
	vals := map[string]float64{}
	for _, m := range mfs[0].GetMetric() {
		var kind, name string
		for _, l := range m.GetLabel() {
			if l.GetName() == "kind" {
				kind = l.GetValue()
			} else {
				name = l.GetValue()
			}
		}
		vals[kind+"/"+name] = m.GetGauge().GetValue()
	}
	require.Equal(t, map[string]float64{"redis/redis": 0, "stream/stream": 1, "hermes/hermes:member:u1": 1,
		"hermes/hermes:member:u2": 0, "queue_consumers/queue:gpu:arc": 1}, vals)

}
