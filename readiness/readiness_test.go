package readiness_test

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/readiness"
)

// TestReadinessStatesAndWords: a check's answer becomes ready, idle (not a failure),
// failing (with the cause and what to do), or unknown when a component it reads through
// fails; the summary names only the failing ones.
func TestReadinessStatesAndWords(t *testing.T) {
	t.Parallel()
	down := errors.New("dial tcp 127.0.0.1:6379: connection refused")
	probes := map[string]readiness.Probe{
		"redis":             {Kind: readiness.KindRedis, Check: func(context.Context) error { return down }},
		"stream":            {Kind: readiness.KindStream, Needs: "redis", Check: func(context.Context) error { return down }},
		"hermes:member:u1":  {Kind: readiness.KindHermes, Check: func(context.Context) error { return readiness.Idle{Why: "stopped while unused"} }},
		"hermes:member:u2":  {Kind: readiness.KindHermes, Check: func(context.Context) error { return errors.New("start timed out") }},
		"gpu_telemetry:arc": {Kind: readiness.KindGPUTelemetry, Check: func(context.Context) error { return readiness.Healthy{Detail: "no telemetry source configured"} }},
		"queue:gpu:arc":     {Kind: readiness.KindQueueConsumers, Needs: "redis", Check: func(context.Context) error { return nil }},
		"appwrite":          {Kind: readiness.KindAppwrite, Check: func(context.Context) error { return nil }},
	}
	cs := readiness.Evaluate(context.Background(), probes)
	got := map[string]readiness.Component{}
	var order []string
	for _, c := range cs {
		got[c.Name] = c
		order = append(order, c.Name)
	}
	require.Equal(t, []string{"appwrite", "redis", "stream", "hermes:member:u1", "hermes:member:u2", "gpu_telemetry:arc", "queue:gpu:arc"}, order)
	require.Equal(t, readiness.StateReady, got["appwrite"].State)
	require.Equal(t, readiness.StateFailing, got["redis"].State)
	require.Equal(t, readiness.StateUnknown, got["stream"].State)
	require.Equal(t, "The stream service cannot be checked while the queue Redis is failing (dial tcp 127.0.0.1:6379: connection refused).", got["stream"].Message)
	require.Equal(t, readiness.StateIdle, got["hermes:member:u1"].State)
	require.Equal(t, "Member u1's Hermes is idle (stopped while unused); that is not a failure.", got["hermes:member:u1"].Message)
	require.Equal(t, readiness.StateFailing, got["hermes:member:u2"].State)
	require.True(t, strings.HasPrefix(got["hermes:member:u2"].Message, "Member u2's Hermes is failing (start timed out): runs on it fail or wait"))
	require.Equal(t, readiness.StateReady, got["gpu_telemetry:arc"].State)
	require.Equal(t, "GPU telemetry of arc is ready (no telemetry source configured).", got["gpu_telemetry:arc"].Message)
	require.Equal(t, readiness.StateReady, got["queue:gpu:arc"].State, "a ready component stays ready whatever it needs")

	b := readiness.Body(cs)
	require.False(t, b.Ready)
	require.True(t, strings.HasPrefix(b.Summary, "2 of 7 components failing. The queue Redis is failing ("), b.Summary)
	require.Contains(t, b.Summary, "Member u2's Hermes is failing")
	require.NotContains(t, b.Summary, "stream")
	require.Equal(t, "idle: stopped while unused", b.Checks["hermes:member:u1"])
	require.True(t, strings.HasPrefix(b.Checks["stream"], "unknown: "))

	homes := readiness.Judge(readiness.HermesHomes, readiness.KindHermes, errors.New("hermes venv: no such file"))
	require.True(t, strings.HasPrefix(homes.Message, "Starting members' Hermes is failing (hermes venv: no such file): members' runs cannot start their Hermes; check PA_AGENT_HERMES_VENV"), homes.Message)

	require.Equal(t, "All 1 components are ready.", readiness.Body(readiness.Evaluate(context.Background(), map[string]readiness.Probe{"appwrite": probes["appwrite"]})).Summary)
}

// TestReadinessReportReadsBackTyped: a report (an agent's, as /api/system reads it from
// Redis) reads back with the same typed kinds and states; a state readiness does not know
// is refused rather than read as not failing.
func TestReadinessReportReadsBackTyped(t *testing.T) {
	t.Parallel()
	cs := readiness.Evaluate(context.Background(), map[string]readiness.Probe{
		"gateway":          {Kind: readiness.KindGateway, Check: func(context.Context) error { return errors.New("connection refused") }},
		"hermes:member:u1": {Kind: readiness.KindHermes, Check: func(context.Context) error { return readiness.Idle{Why: "stopped while unused"} }},
	})
	js, err := json.Marshal(readiness.Body(cs))
	require.NoError(t, err)
	var back readiness.ReadyBody
	require.NoError(t, json.Unmarshal(js, &back))
	require.Equal(t, readiness.Body(cs), back)
	require.Equal(t, readiness.KindGateway, back.Components[1].Kind)
	require.True(t, back.Components[1].Failing())
	require.Equal(t, readiness.StateIdle, back.Components[0].State)

	bad := strings.Replace(string(js), `"state":"failing"`, `"state":"broken"`, 1)
	require.NotEqual(t, string(js), bad)
	require.ErrorContains(t, json.Unmarshal([]byte(bad), &back), `unknown state "broken"`)
}
