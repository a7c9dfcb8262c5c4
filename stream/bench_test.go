package stream_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/stream"
)

// readFrame reads one SSE message (up to its blank line), skipping comments; it returns
// the message's data line.
func readFrame(rd *bufio.Reader) (string, error) {
	data, seen := "", false
	for {
		line, err := rd.ReadString('\n')
		if err != nil {
			return "", err
		}
		line = strings.TrimSuffix(line, "\n")
		switch {
		case line == "" && seen:
			return data, nil
		case line == "" || strings.HasPrefix(line, ":"):
		default:
			seen = true
			if v, ok := strings.CutPrefix(line, "data: "); ok {
				data = v
			}
		}
	}
}

// BenchmarkSSEDelivery measures append → the SSE frame read by a client of the stream
// service (GET /stream/runs/{id}/events, its own HTTP server on loopback, the owner's
// JWT) against its floor in the same run: a raw relay on the same Redis — XADD of the same
// entry, an XREAD BLOCK in an HTTP handler that writes each entry as an SSE frame and
// flushes, a client reading it over its own loopback connection. The entry is the event's
// stored JSON under its sequence id, as queue/eventlog's append stores it (queue.AppendEvent;
// the executor's fence script is on neither side). Beside the floor, for the record, the
// same relay with its read in another goroutine handing each batch over a channel (what
// one Redis reader for every follower costs in itself: handoff-relay-µs/op). The sides
// alternate iteration by iteration, so a noisy neighbour weighs on each alike; each
// side's wait is in flight (a 2 ms head start after its previous frame) when the append
// is sent, and the clock starts before each side encodes its entry. The goal's figure is
// the median of the per-iteration ratios to the floor.
func BenchmarkSSEDelivery(b *testing.B) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	fe := functionstest.New(b, functionstest.Options{Keys: map[string][]string{streamKey: stream.Scopes}})
	cfg := stream.Config{Endpoint: fe.TS.URL, ProjectID: fe.TS.Project, DatabaseID: fe.Model.DatabaseID, APIKey: streamKey,
		RedisAddr: fe.Redis.Addr, JWTCacheTTL: 5 * time.Second, MemberLabel: "member", AdminLabel: "admin",
		Heartbeat: 15 * time.Second, WriteTimeout: 10 * time.Second, MaxPerUser: 16, Readers: 64}
	svc, err := stream.New(cfg, nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := svc.Start(ctx); err != nil {
		b.Fatal(err)
	}
	hs := httptest.NewServer(svc)
	var cleanup []func() // run in reverse at the end, after the clients closed
	defer func() {
		cancel()
		for i := len(cleanup) - 1; i >= 0; i-- {
			cleanup[i]()
		}
		svc.Stop()
		hs.Close()
	}()
	owner, jwt := fe.SignUp(b, "bench@example.com", "password-bench")
	rdb := redis.NewClient(&redis.Options{Addr: fe.Redis.Addr})
	cleanup = append(cleanup, func() { _ = rdb.Close() })
	const run = "ssebench"
	// The owner check's cached facts ("<owner> <conversation>", a live conversation).
	if err := rdb.Set(ctx, queue.RunOwnerKey(run), owner+" ssebenchconv", time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	if err := rdb.Set(ctx, queue.ConvOwnerKey("ssebenchconv"), owner, time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	if err := queue.SetRunState(ctx, rdb, run, queue.RunState{Status: "running", HeartbeatAt: time.Now()}); err != nil {
		b.Fatal(err)
	}

	// The floor: XREAD BLOCK → write the entry as an SSE frame → flush, in the handler;
	// beside it, for the record, the same relay with the read in its own goroutine handing
	// each batch to the handler over a channel, as the hub's reader hands it to a follower.
	floor, floorRead := relay(b, fe.Redis.Addr, "ssefloor", false)
	handoff, handoffRead := relay(b, fe.Redis.Addr, "ssehandoff", true)

	open := func(url string, auth bool) (*bufio.Reader, func()) {
		req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
		if auth {
			req.Header.Set("Authorization", "Bearer "+jwt)
		}
		res, err := http.DefaultClient.Do(req)
		if err != nil || res.StatusCode != 200 {
			b.Fatal("open", url, err, res)
		}
		return bufio.NewReader(res.Body), func() { _ = res.Body.Close() }
	}
	srd, sclose := open(hs.URL+"/stream/runs/"+run+"/events?after=0", true)
	frd, fclose := open(floor.URL, false)
	hrd, hclose := open(handoff.URL, false)
	// Closing the relays' Redis clients ends their blocked reads, then their servers close.
	cleanup = append(cleanup, handoff.Close, floor.Close, func() { _ = handoffRead.Close() }, func() { _ = floorRead.Close() }, sclose, fclose, hclose)

	var sseTotal, floorTotal, handoffTotal time.Duration
	ratios := make([]float64, 0, b.N)
	hratios := make([]float64, 0, b.N)
	check := func(data string, err error, seq int64) {
		var e queue.Event
		if err == nil {
			err = json.Unmarshal([]byte(data), &e)
		}
		if err != nil || e.Sequence != seq {
			b.Fatalf("frame %q: %v, want sequence %d", data, err, seq)
		}
	}
	// raw appends to a relay's stream what queue.AppendEvent appends, and times it to the
	// frame.
	raw := func(key string, rd *bufio.Reader, seq int64) time.Duration {
		time.Sleep(2 * time.Millisecond) // the relay's XREAD blocks again
		sent := time.Now()
		e, err := json.Marshal(queue.Event{Sequence: seq, Type: queue.EventMessageDelta, At: sent})
		if err != nil {
			b.Fatal(err)
		}
		if err := rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, ID: strconv.FormatInt(seq, 10) + "-0", Values: []any{"e", e}}).Err(); err != nil {
			b.Fatal(err)
		}
		data, err := readFrame(rd)
		d := time.Since(sent)
		check(data, err, seq)
		return d
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		seq := int64(i + 1)
		time.Sleep(2 * time.Millisecond) // the stream's next wait is in flight
		sent := time.Now()
		if err := queue.AppendEvent(ctx, rdb, run, queue.Event{Sequence: seq, Type: queue.EventMessageDelta, At: sent}); err != nil {
			b.Fatal(err)
		}
		data, err := readFrame(srd)
		d := time.Since(sent)
		check(data, err, seq)
		f := raw("ssefloor", frd, seq)
		h := raw("ssehandoff", hrd, seq)
		sseTotal, floorTotal, handoffTotal = sseTotal+d, floorTotal+f, handoffTotal+h
		ratios = append(ratios, float64(d)/float64(f))
		hratios = append(hratios, float64(d)/float64(h))
	}
	b.StopTimer()
	slices.Sort(ratios)
	b.ReportMetric(float64(sseTotal.Microseconds())/float64(b.N), "sse-µs/op")
	b.ReportMetric(float64(floorTotal.Microseconds())/float64(b.N), "floor-µs/op")
	b.ReportMetric(float64(sseTotal)/float64(floorTotal), "ratio-to-floor")
	b.ReportMetric(ratios[len(ratios)/2], "median-ratio")
	slices.Sort(hratios)
	b.ReportMetric(float64(handoffTotal.Microseconds())/float64(b.N), "handoff-relay-µs/op")
	b.ReportMetric(hratios[len(hratios)/2], "median-ratio-to-handoff-relay")
}

// relay is a raw relay of one Redis stream to SSE: each GET reads key from the start with
// XREAD BLOCK and writes every entry as a frame, flushed. With handoff the reads run in
// their own goroutine, which hands each batch to the handler over a channel. The
// returned client is the relay's reader connection (closing it ends a blocked read).
func relay(b *testing.B, addr, key string, handoff bool) (*httptest.Server, *redis.Client) {
	rc := redis.NewClient(&redis.Options{Addr: addr})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx := r.Context()
		read := func(last string) ([]redis.XMessage, error) {
			res, err := rc.XRead(ctx, &redis.XReadArgs{Streams: []string{key, last}, Block: 5 * time.Second}).Result()
			if err != nil {
				return nil, err
			}
			return res[0].Messages, nil
		}
		batches := make(chan []redis.XMessage)
		if handoff {
			go func() {
				for last := "0-0"; ctx.Err() == nil; {
					msgs, err := read(last)
					if err != nil {
						continue
					}
					last = msgs[len(msgs)-1].ID
					select {
					case batches <- msgs:
						runtime.Gosched() // as the hub's reader: the handler answers first
					case <-ctx.Done():
					}
				}
			}()
		}
		w.Header().Set("Content-Type", "text/event-stream")
		w.WriteHeader(200)
		flush := http.NewResponseController(w).Flush
		_ = flush()
		for last := "0-0"; ctx.Err() == nil; {
			var msgs []redis.XMessage
			if handoff {
				select {
				case msgs = <-batches:
				case <-ctx.Done():
					return
				}
			} else if m, err := read(last); err == nil {
				msgs = m
			}
			for _, m := range msgs {
				last = m.ID
				seq, _, _ := strings.Cut(m.ID, "-")
				fmt.Fprintf(w, "id: %s\ndata: %s\n\n", seq, m.Values["e"])
			}
			if len(msgs) > 0 && flush() != nil {
				return
			}
		}
	}))
	return srv, rc
}
