package ops_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"privateassistant/ops"
)

func TestGPUCollectorReportsPhaseMemoryTemperatureAndPower(t *testing.T) {
	t.Parallel()
	devs := []ops.DeviceReading{
		{Device: "xtx", Phase: "ready", Loaded: "qwen3-30b", Active: 1, Waiting: 2, Generation: 7,
			MemUsed: 20 << 30, MemTotal: 24 << 30, TempC: 71.5, PowerW: 250, BusyPercent: 93},
		{Device: "arc", Phase: "unknown"}, // no telemetry: no memory, temperature or power series
	}
	reg := prometheus.NewRegistry()
	reg.MustRegister(ops.NewGPUCollector(func() []ops.DeviceReading { return devs }))
	require.Equal(t, 71.5, gauge(t, reg, "pa_gpu_temperature_celsius", map[string]string{"device": "xtx"}))
	require.Equal(t, float64(20<<30), gauge(t, reg, "pa_gpu_vram_used_bytes", map[string]string{"device": "xtx"}))
	require.Equal(t, float64(24<<30), gauge(t, reg, "pa_gpu_vram_total_bytes", map[string]string{"device": "xtx"}))
	mfs, err := reg.Gather()
	require.NoError(t, err)
	series := map[string]int{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if lp.GetName() == "device" {
					series[mf.GetName()+"/"+lp.GetValue()]++
				}
			}
		}
	}
	require.Equal(t, len(ops.GPUPhases), series["pa_gpu_phase/arc"])
	require.Zero(t, series["pa_gpu_temperature_celsius/arc"]+series["pa_gpu_vram_used_bytes/arc"]+series["pa_gpu_power_watts/arc"],
		"no telemetry: no series rather than zeros")
	require.Equal(t, 1.0, gauge(t, reg, "pa_gpu_phase", map[string]string{"device": "arc", "phase": "unknown"}))
	require.Equal(t, 0.0, gauge(t, reg, "pa_gpu_phase", map[string]string{"device": "arc", "phase": "ready"}))
	require.Equal(t, 7.0, gauge(t, reg, "pa_gpu_generation", map[string]string{"device": "xtx"}))
	require.Equal(t, 250.0, gauge(t, reg, "pa_gpu_power_watts", map[string]string{"device": "xtx"}))

	devs[1].Phase = "qualifying" // a phase the list does not name is still reported
	require.Equal(t, 1.0, gauge(t, reg, "pa_gpu_phase", map[string]string{"device": "arc", "phase": "qualifying"}))
}

func gauge(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metrics
				}
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no %s%v", name, labels)
	return 0
}
