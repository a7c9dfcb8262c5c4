package ops

import (
	"context"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"privateassistant/readiness"
)

// readinessCollector exports pa_component_ready{kind,name} (1: ready or idle, 0: failing),
// evaluating the checks at each scrape (bounded by 5 s).
type readinessCollector struct {
	eval func(ctx context.Context) []readiness.Component
	desc *prometheus.Desc
}

// ComponentReadyName is the readiness series the alert rules read.
const ComponentReadyName = "pa_component_ready"

// NewReadinessCollector exports the components eval returns as pa_component_ready.
func NewReadinessCollector(eval func(ctx context.Context) []readiness.Component) prometheus.Collector {
	return &readinessCollector{eval: eval, desc: prometheus.NewDesc(ComponentReadyName,
		"Whether a component is ready (1: ready or idle, 0: failing), by kind and name; /readyz says why.", []string{"kind", "name"}, nil)}
}

func (c *readinessCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *readinessCollector) Collect(ch chan<- prometheus.Metric) {
	if c.eval == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	for _, comp := range c.eval(ctx) {
		v := 1.0
		if comp.Failing() {
			v = 0
		}
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, v, string(comp.Kind), comp.Name)
	}
}
