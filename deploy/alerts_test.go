package deploy_test

import (
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/hibiken/asynq"
	"github.com/hibiken/asynq/x/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"privateassistant/ops"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/readiness"
)

// describer records the metric names of every collector registered on it.
type describer struct{ names map[string]bool }

var fqName = regexp.MustCompile(`fqName: "([a-zA-Z0-9_:]+)"`)

func (d *describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		if m := fqName.FindStringSubmatch(desc.String()); m != nil {
			d.names[m[1]] = true
		}
	}
	return nil
}

func (d *describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d *describer) Unregister(prometheus.Collector) bool { return true }

// agentMetricNames are the names the agent's /metrics can carry (ops and the
// daemon's wiring: run counters, asynq's queue collector, Redis memory, GPUs, gateway).
// asynq's collector describes by collecting, so it is given a Redis holding a queue.
func agentMetricNames(t *testing.T) map[string]bool {
	d := &describer{names: map[string]bool{"up": true}}
	ops.NewMetrics(d)
	ops.NewGatewayMetrics(d)
	r := redistest.Start(t)
	rdb := r.Client()
	defer rdb.Close()
	cl := asynq.NewClientFromRedisClient(rdb)
	defer cl.Close()
	_, err := cl.Enqueue(asynq.NewTask(queue.TypeRun, nil), asynq.Queue(queue.DeviceQueue("arc")))
	require.NoError(t, err)
	insp := asynq.NewInspectorFromRedisClient(rdb)
	defer insp.Close()
	d.MustRegister(ops.NewGPUCollector(nil), ops.NewRedisMemory(nil), metrics.NewQueueMetricsCollector(insp), ops.NewReadinessCollector(nil))
	require.True(t, d.names["asynq_queue_size"], "asynq's collector answered")
	return d.names
}

// TestAlertRulesNameExportedMetrics: deploy/prometheus/alerts.yml parses, every rule has
// a summary, and every metric its expressions name is one the agent exports; the issue's
// alerts (agent down, device unknown, Redis memory, queue latency, GPU temperature) exist,
// and one for each readiness kind (pa_component_ready{kind="..."}, issue 36).
func TestAlertRulesNameExportedMetrics(t *testing.T) {
	t.Parallel()
	b, err := os.ReadFile("prometheus/alerts.yml")
	require.NoError(t, err)
	var f struct {
		Groups []struct {
			Name  string `yaml:"name"`
			Rules []struct {
				Alert       string            `yaml:"alert"`
				Expr        string            `yaml:"expr"`
				For         string            `yaml:"for"`
				Labels      map[string]string `yaml:"labels"`
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	dec := yaml.NewDecoder(strings.NewReader(string(b)))
	dec.KnownFields(true)
	require.NoError(t, dec.Decode(&f))
	known := agentMetricNames(t)
	ident := regexp.MustCompile(`\b(pa_[a-z0-9_]+|asynq_[a-z0-9_]+|up)\b`)
	exprs := map[string]string{}
	for _, g := range f.Groups {
		for _, r := range g.Rules {
			require.NotEmpty(t, r.Annotations["summary"], r.Alert)
			require.Contains(t, []string{"critical", "warning", "info"}, r.Labels["severity"], r.Alert)
			exprs[r.Alert] = r.Expr
			for _, m := range ident.FindAllString(r.Expr, -1) {
				require.True(t, known[m], "alert %s names %s, which the agent does not export", r.Alert, m)
			}
		}
	}
	wants := []string{"up{", "pa_gpu_phase{phase=\"unknown\"}", "pa_redis_used_memory_bytes", "asynq_queue_latency_seconds", "pa_gpu_temperature_celsius", "pa_live_harness_check_failing"}
	for _, k := range readiness.Kinds {
		wants = append(wants, ops.ComponentReadyName+`{kind="`+string(k)+`"} == 0`)
	}
	for _, want := range wants {
		found := false
		for _, e := range exprs {
			found = found || strings.Contains(e, want)
		}
		require.True(t, found, "an alert on %s", want)
	}
}
