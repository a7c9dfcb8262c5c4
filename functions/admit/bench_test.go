package admit_test

import (
	"context"
	"fmt"
	"slices"
	"sync/atomic"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/databases"
	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"privateassistant/functions/admit"
	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// roundTrips counts Redis round trips (a pipeline is one).
type roundTrips struct{ n atomic.Int64 }

func (r *roundTrips) DialHook(next redis.DialHook) redis.DialHook { return next }
func (r *roundTrips) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error { r.n.Add(1); return next(ctx, cmd) }
}
func (r *roundTrips) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error { r.n.Add(1); return next(ctx, cmds) }
}

// BenchmarkWarmAdmission measures a warm admission (plan cached, conversation owner
// cached) against its floor: the same three raw SDK document writes plus one raw asynq
// enqueue. It reports Appwrite reads/writes and Redis round trips per admission.
// Targets: 0 reads, ≤ 3 writes, ≤ 3 round trips.
func BenchmarkWarmAdmission(b *testing.B) {
	ctx := context.Background()
	env := functionstest.New(b)
	owner, jwt := env.SignUp(b, "bench@example.com", "password-bench")
	conv := env.Conversation(b, jwt)

	rt := &roundTrips{}
	rdb := redis.NewClient(&redis.Options{Addr: env.Redis.Addr})
	defer rdb.Close()
	rdb.AddHook(rt)
	aq := asynq.NewClientFromRedisClient(rdb)
	a := &admit.Admitter{RDB: rdb, Enq: queue.NewEnqueuer(aq), Plans: &runconfig.Cache{RDB: rdb, PointerTTL: time.Hour}, RateLimit: 1 << 30}
	st, cnt := env.CountingStore()
	// Warm up: plan, owner and counter cached, first enqueue done.
	if _, err := a.Admit(ctx, st, admit.Request{Owner: owner, ConversationID: conv, RequestID: "warm", Text: "hi", Role: "chat"}); err != nil {
		b.Fatal(err)
	}
	cnt.Reset()
	rt.n.Store(0)

	var admitNs, floorNs time.Duration
	var reads, writes int
	var trips int64
	admits, floors := make([]time.Duration, 0, b.N), make([]time.Duration, 0, b.N)
	db := databases.New(st.Client())
	// Admissions and the floor (three raw creates and one raw enqueue) alternate, so a
	// neighbour's load on a shared machine weighs on both alike.
	for i := 0; i < b.N; i++ {
		r0, w0, t0 := cnt.Reads(), cnt.Writes(), rt.n.Load()
		start := time.Now()
		_, err := a.Admit(ctx, st, admit.Request{Owner: owner, ConversationID: conv, RequestID: fmt.Sprintf("b%d", i), Text: "hello", Role: "chat"})
		d := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		admitNs += d
		admits = append(admits, d)
		reads, writes, trips = reads+cnt.Reads()-r0, writes+cnt.Writes()-w0, trips+rt.n.Load()-t0

		start = time.Now()
		for k := 1; k <= 3; k++ {
			_, err := db.CreateDocument(st.Model().DatabaseID, schema.CollEvents, "unique()",
				map[string]any{"ownerId": owner, "runId": "floor", "sequence": i*3 + k, "type": "floor"})
			if err != nil {
				b.Fatal(err)
			}
		}
		if _, err := aq.EnqueueContext(ctx, asynq.NewTask("floor", nil), asynq.Queue("floor")); err != nil {
			b.Fatal(err)
		}
		d = time.Since(start)
		floorNs += d
		floors = append(floors, d)
	}
	slices.Sort(admits)
	slices.Sort(floors)
	b.ReportMetric(float64(admits[len(admits)/2])/float64(floors[len(floors)/2]), "median-ratio")
	b.ReportMetric(float64(reads)/float64(b.N), "appwrite-reads/op")
	b.ReportMetric(float64(writes)/float64(b.N), "appwrite-writes/op")
	b.ReportMetric(float64(trips)/float64(b.N), "redis-roundtrips/op")
	b.ReportMetric(float64(admitNs.Microseconds())/float64(b.N), "admit-µs/op")
	b.ReportMetric(float64(floorNs.Microseconds())/float64(b.N), "floor-µs/op")
	b.ReportMetric(float64(admitNs)/float64(floorNs), "ratio-to-floor")
}
