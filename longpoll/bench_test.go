package longpoll

import (
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/queue/redistest"
)

// BenchmarkDeliveryLatency measures append → long-poll answer against its floor in the
// same run: a raw XADD → XREAD BLOCK round trip on the same Redis, of the same entry (the
// event's stored JSON under its sequence id, as the append writes it; until 2026-12-02
// the floor added a one-byte entry with an automatic id, and about 12 µs of the ~25 µs
// between the two was the entry's own size and encoding, not the delivery). The two
// alternate iteration by iteration, so a noisy neighbour weighs on both alike. Each
// side's wait is in flight (2 ms head start; the poll has also reported that it waits)
// when the append is sent. The clock starts before each side encodes its entry.
func BenchmarkDeliveryLatency(b *testing.B) {
	ctx := context.Background()
	r := redistest.Start(b)
	rdb := redis.NewClient(&redis.Options{Addr: r.Addr})
	defer rdb.Close()
	const run = "rbench"
	if err := queue.SetRunState(ctx, rdb, run, queue.RunState{Status: "running", HeartbeatAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	h := &Hub{Base: &redis.Options{Addr: r.Addr}}
	if err := h.Start(ctx); err != nil {
		b.Fatal(err)
	}
	defer h.Stop()
	waiting := make(chan struct{}, 1)
	p := &Poller{Hub: h, testHookWait: func() { waiting <- struct{}{} }}
	var pollTotal, floorTotal time.Duration
	ratios := make([]float64, 0, b.N)
	for i := 0; i < b.N; i++ {
		seq := int64(i + 1)
		got := make(chan time.Time, 1)
		go func() {
			bt, err := p.Poll(ctx, nil, Run{ID: run, Owner: "u"}, seq-1, 5*time.Second)
			if err != nil || bt.Len() != 1 {
				b.Error("poll:", err, bt.Len())
			}
			got <- time.Now()
		}()
		<-waiting
		time.Sleep(2 * time.Millisecond) // the same head start the floor gets
		sent := time.Now()
		if err := queue.AppendEvent(ctx, rdb, run, queue.Event{Sequence: seq, Type: queue.EventMessageDelta, At: sent}); err != nil {
			b.Fatal(err)
		}
		poll := (<-got).Sub(sent)
		pollTotal += poll

		fgot := make(chan time.Time, 1)
		ready := make(chan struct{})
		go func() {
			close(ready)
			_, err := rdb.XRead(ctx, &redis.XReadArgs{Streams: []string{"floor", strconv.FormatInt(seq-1, 10) + "-0"}, Block: 5 * time.Second}).Result()
			if err != nil {
				b.Error(err)
			}
			fgot <- time.Now()
		}()
		<-ready
		time.Sleep(2 * time.Millisecond) // let the XREAD block
		sent = time.Now()
		raw, err := json.Marshal(queue.Event{Sequence: seq, Type: queue.EventMessageDelta, At: sent})
		if err != nil {
			b.Fatal(err)
		}
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: "floor", ID: strconv.FormatInt(seq, 10) + "-0", Values: []any{"e", raw}}).Err(); err != nil {
			b.Fatal(err)
		}
		floor := (<-fgot).Sub(sent)
		floorTotal += floor
		ratios = append(ratios, float64(poll)/float64(floor))
	}
	slices.Sort(ratios)
	b.ReportMetric(float64(pollTotal.Microseconds())/float64(b.N), "delivery-µs/op")
	b.ReportMetric(float64(floorTotal.Microseconds())/float64(b.N), "floor-µs/op")
	b.ReportMetric(float64(pollTotal)/float64(floorTotal), "ratio-to-floor")
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
}
