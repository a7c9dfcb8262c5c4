package ops

import (
	"github.com/prometheus/client_golang/prometheus"
)

// DeviceReading is what the GPU collector reports of one managed device at a scrape: its
// phase (ready, loading, unknown, ...), loaded model, runs holding and waiting for it,
// generation (bumped by every load, unload, crash and revocation, so its increase counts
// swaps), and the telemetry loop's latest reading (zero values: not offered by sysfs).
type DeviceReading struct {
	Device, Phase, Loaded string
	Active, Waiting       int
	Generation            int64
	MemUsed, MemTotal     int64
	TempC, PowerW         float64
	BusyPercent           int
}

// GPUPhases are the phases the collector reports as pa_gpu_phase{phase} (one is 1).
// (a phase not listed here is reported too, while it is the current one).
var GPUPhases = []string{"idle", "loading", "ready", "draining", "unloading", "unknown", "failed", "fenced"}

// GPUCollector exports the managed devices at each scrape (the reading comes from the
// device's owner goroutine, which does no I/O, so a scrape never waits on a GPU).
type GPUCollector struct {
	Devices func() []DeviceReading

	phase, loaded, active, waiting, gen, used, total, temp, power, busy *prometheus.Desc
}

// NewGPUCollector returns the collector.
func NewGPUCollector(devices func() []DeviceReading) *GPUCollector {
	d := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(name, help, append([]string{"device"}, labels...), nil)
	}
	return &GPUCollector{Devices: devices,
		phase:   d("pa_gpu_phase", "1 for the device's current phase (unknown: loads nothing until its memory is seen back or an admin confirms).", "phase"),
		loaded:  d("pa_gpu_loaded_model", "1 for the model loaded on the device.", "model"),
		active:  d("pa_gpu_active_runs", "Runs holding a grant on the device."),
		waiting: d("pa_gpu_waiting_runs", "Runs waiting for the device (waiting_for_resource)."),
		gen:     d("pa_gpu_generation", "Device generation: bumped by every load, unload, crash and revocation (its increase counts swaps)."),
		used:    d("pa_gpu_vram_used_bytes", "Device memory in use (telemetry)."),
		total:   d("pa_gpu_vram_total_bytes", "Device memory in all (telemetry)."),
		temp:    d("pa_gpu_temperature_celsius", "Device temperature, where sysfs offers it."),
		power:   d("pa_gpu_power_watts", "Device power draw, where sysfs offers it."),
		busy:    d("pa_gpu_busy_percent", "Device busy percentage, where sysfs offers it."),
	}
}

var _ prometheus.Collector = (*GPUCollector)(nil)

// Describe implements prometheus.Collector.
func (c *GPUCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{c.phase, c.loaded, c.active, c.waiting, c.gen, c.used, c.total, c.temp, c.power, c.busy} {
		ch <- d
	}
}

// Collect implements prometheus.Collector.
func (c *GPUCollector) Collect(ch chan<- prometheus.Metric) {
	g := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, r := range c.Devices() {
		listed := false
		for _, p := range GPUPhases {
			v := 0.0
			if p == r.Phase {
				v, listed = 1, true
			}
			g(c.phase, v, r.Device, p)
		}
		if !listed && r.Phase != "" {
			g(c.phase, 1, r.Device, r.Phase)
		}
		if r.Loaded != "" {
			g(c.loaded, 1, r.Device, r.Loaded)
		}
		g(c.active, float64(r.Active), r.Device)
		g(c.waiting, float64(r.Waiting), r.Device)
		g(c.gen, float64(r.Generation), r.Device)
		if r.MemTotal > 0 {
			g(c.used, float64(r.MemUsed), r.Device)
			g(c.total, float64(r.MemTotal), r.Device)
		}
		if r.TempC > 0 {
			g(c.temp, r.TempC, r.Device)
		}
		if r.PowerW > 0 {
			g(c.power, r.PowerW, r.Device)
		}
		if r.BusyPercent > 0 || r.MemTotal > 0 {
			g(c.busy, float64(r.BusyPercent), r.Device)
		}
	}
}

// GatewayMetrics counts what the inference gateway served, per route alias and device.
type GatewayMetrics struct {
	Tokens   *prometheus.CounterVec // kind: prompt | completion
	Requests *prometheus.CounterVec // by HTTP status
}

// NewGatewayMetrics registers the gateway's counters on reg.
func NewGatewayMetrics(reg prometheus.Registerer) *GatewayMetrics {
	m := &GatewayMetrics{
		Tokens: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pa_gateway_tokens_total",
			Help: "Tokens the gateway served, by route alias, device and kind (prompt, completion)."}, []string{"route", "device", "kind"}),
		Requests: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "pa_gateway_requests_total",
			Help: "Gateway chat completions answered, by route alias, device and HTTP status."}, []string{"route", "device", "status"}),
	}
	reg.MustRegister(m.Tokens, m.Requests)
	return m
}
