package ops

import (
	"context"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
)

// RedisMemory is a Prometheus collector of the dedicated Redis's memory, read with INFO
// memory at each scrape (one round trip, bounded by a 2 s timeout): used_memory (what
// maxmemory is compared with), maxmemory (0: no limit) and the peak. Under noeviction a
// Redis at maxmemory refuses writes (admission and the event log fail): alert well before
// used/max reaches 1 (see the sizing notes in the README).
type RedisMemory struct {
	RDB redis.UniversalClient

	used, max, peak *prometheus.Desc
}

// NewRedisMemory returns the collector for rdb.
func NewRedisMemory(rdb redis.UniversalClient) *RedisMemory {
	return &RedisMemory{RDB: rdb,
		used: prometheus.NewDesc("pa_redis_used_memory_bytes", "Redis INFO memory used_memory: bytes allocated by Redis.", nil, nil),
		max:  prometheus.NewDesc("pa_redis_maxmemory_bytes", "Redis maxmemory (0: no limit).", nil, nil),
		peak: prometheus.NewDesc("pa_redis_used_memory_peak_bytes", "Redis INFO memory used_memory_peak.", nil, nil)}
}

var _ prometheus.Collector = (*RedisMemory)(nil)

// Describe implements prometheus.Collector.
func (m *RedisMemory) Describe(ch chan<- *prometheus.Desc) { ch <- m.used; ch <- m.max; ch <- m.peak }

// Collect implements prometheus.Collector; with Redis unreachable it reports nothing.
func (m *RedisMemory) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	info, err := ReadRedisMemory(ctx, m.RDB)
	if err != nil {
		return
	}
	ch <- prometheus.MustNewConstMetric(m.used, prometheus.GaugeValue, float64(info.Used))
	ch <- prometheus.MustNewConstMetric(m.max, prometheus.GaugeValue, float64(info.Max))
	ch <- prometheus.MustNewConstMetric(m.peak, prometheus.GaugeValue, float64(info.Peak))
}

// RedisMemoryInfo is the part of INFO memory the agent reports.
type RedisMemoryInfo struct{ Used, Max, Peak int64 }

// ReadRedisMemory reads INFO memory.
func ReadRedisMemory(ctx context.Context, rdb redis.UniversalClient) (RedisMemoryInfo, error) {
	s, err := rdb.Info(ctx, "memory").Result()
	if err != nil {
		return RedisMemoryInfo{}, err
	}
	var out RedisMemoryInfo
	for _, line := range strings.Split(s, "\n") {
		k, v, ok := strings.Cut(strings.TrimSpace(line), ":")
		if !ok {
			continue
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			continue
		}
		switch k {
		case "used_memory":
			out.Used = n
		case "maxmemory":
			out.Max = n
		case "used_memory_peak":
			out.Peak = n
		}
	}
	return out, nil
}
