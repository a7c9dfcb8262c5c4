package longpoll_test

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/functions/longpoll"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/schema"
)

// BenchmarkDeliveryLatency measures append → long-poll response against its floor in
// the same run: a raw XADD → XREAD BLOCK round trip on the same Redis.
func BenchmarkDeliveryLatency(b *testing.B) {
	ctx := context.Background()
	r := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	const run = "rbench"
	if err := queue.SetRunState(ctx, rdb, run, queue.RunState{Status: "running", HeartbeatAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	p := &longpoll.Poller{RDB: rdb}
	var pollTotal, floorTotal time.Duration
	for i := 0; i < b.N; i++ {
		seq := int64(i + 1)
		got := make(chan time.Time, 1)
		ready := make(chan struct{})
		go func() {
			close(ready)
			bt, err := p.Poll(ctx, (*schema.Store)(nil), longpoll.Run{ID: run, Owner: "u"}, seq-1, 5*time.Second)
			if err != nil || len(bt.Events) != 1 {
				b.Error("poll:", err, len(bt.Events))
			}
			got <- time.Now()
		}()
		<-ready
		time.Sleep(2 * time.Millisecond) // let the poll block in XREAD
		sent := time.Now()
		if err := queue.AppendEvent(ctx, rdb, run, queue.Event{Sequence: seq, Type: queue.EventMessageDelta, At: sent}); err != nil {
			b.Fatal(err)
		}
		pollTotal += (<-got).Sub(sent)
	}
	for i := 0; i < b.N; i++ {
		got := make(chan time.Time, 1)
		ready := make(chan struct{})
		go func(i int) {
			close(ready)
			_, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{"floor", "$"}, Block: 5 * time.Second}).Result()
			if err != nil {
				b.Error(err)
			}
			got <- time.Now()
		}(i)
		<-ready
		time.Sleep(2 * time.Millisecond)
		sent := time.Now()
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "floor", Values: []any{"e", "x"}}).Err(); err != nil {
			b.Fatal(err)
		}
		floorTotal += (<-got).Sub(sent)
	}
	b.ReportMetric(float64(pollTotal.Microseconds())/float64(b.N), "delivery-µs/op")
	b.ReportMetric(float64(floorTotal.Microseconds())/float64(b.N), "floor-µs/op")
	b.ReportMetric(float64(pollTotal)/float64(floorTotal), "ratio-to-floor")
}
