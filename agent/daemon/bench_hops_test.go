package daemon_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/open-runtimes/types-for-go/v4/openruntimes"
	"github.com/redis/go-redis/v9"

	"privateassistant/functions/functionhost"
	"privateassistant/functions/functionstest"
	"privateassistant/longpoll"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// eventHops measures, in the benchmark's own run (one round per iteration, interleaved
// with the agent path, so a neighbour's load hits figures and floors alike), each part of
// what an event costs after the agent appends it, beside its floor:
//
//	append     the event log's append (eventlog.Log.Emit: marshal, the fenced EVALSHA —
//	           fence GET, XADD, hot-state HSET) vs a raw XADD of the same bytes
//	redis-hop  a raw XADD → an XREAD BLOCK waiting on a dedicated connection has it: the
//	           Redis hop a long-poll needs by design (floor)
//	hub-wake   a raw XADD → a long-poll waiting in the functions' hub (longpoll.Poller,
//	           the same code the handler runs) returns it
//	fn-path    a raw XADD → a client waiting in GET /api/runs/{id}/events, through the
//	           function host as in every other test, has read and decoded the answer
//	api-path   the same, the runs function's handler served by a plain net/http server
//	           (no function host, no runtimehttp)
//	relay      a raw XADD → a raw XREAD BLOCK → a bare loopback handler woken by a
//	           channel answers a waiting client the same bytes, which it reads and
//	           decodes: the two hops a long-poll needs and nothing else (relay-http, its
//	           HTTP half, is the floor of fn-path − hub-wake)
//	rt-relay   the same relay answered by a function on the function host (its Main
//	           woken by the channel returns the bytes): the two hops as a design that
//	           serves its followers from Appwrite Functions has them, the runtime's own
//	           execution of a function included (fn-path's floor; rt-own is what the
//	           runtime adds to the bare relay)
//
// Every figure and its floor start after the same pause (settle) with the process idle:
// the hop a process pays after idling is about twice the one it pays busy, in Redis and
// HTTP alike, and a floor taken busy beside a figure taken idle reads as the figure's
// cost. The functions' HTTP answer is fn-path − hub-wake (d-api-http: api-path −
// hub-wake), against relay-http; f-fn-beyond-relay is what the functions add over the
// two hops, per round.
type eventHops struct {
	b     testing.TB
	env   *stacktest.Env
	owner string
	jwt   string
	rdb   *redis.Client // writes and checks
	blk   *redis.Client // the raw XREAD BLOCK's own connection
	hub   *longpoll.Hub // a hub of this test's own, for hub-wake
	log   *eventlog.Log // a synthetic run's log, for append
	raw   string        // the scratch stream of the raw XADDs
	hopID string        // the last id of the redis-hop stream
	runB  string        // hub-wake's run (raw appends)
	seqB  int64
	runC  string // fn-path's run (raw appends)
	seqC  int64
	bare  *httptest.Server
	rt    *httptest.Server // the function host serving the relay function at /relay
	api   *httptest.Server // the runs function's handler on a plain loopback server
	enter chan struct{}
	wake  chan []byte
	body  []byte // the last fn-path answer: the relay answers the same bytes
	mu    sync.Mutex
	wrote time.Time // when the api-path handler last wrote its body
	// when it returned (its deferred work done: the request's log line)
	returned time.Time

	ds      map[string][]time.Duration
	skipped map[string]int // samples dropped because the follower was not waiting
}

const hopClient = "pa-bench-hop"

func newEventHops(b testing.TB, env *stacktest.Env, owner, jwt string) *eventHops {
	b.Helper()
	ctx := context.Background()
	id := fmt.Sprintf("%x", time.Now().UnixNano())
	h := &eventHops{b: b, env: env, owner: owner, jwt: jwt, rdb: env.Redis.Client(),
		raw: "pa:bench:raw:" + id, hopID: "0-0", runB: "rhopb" + id, runC: "rhopc" + id,
		enter: make(chan struct{}), wake: make(chan []byte),
		ds: map[string][]time.Duration{}, skipped: map[string]int{}}
	base := h.rdb.Options()
	h.blk = redis.NewClient(&redis.Options{Addr: base.Addr, Username: base.Username, Password: base.Password,
		ClientName: hopClient, PoolSize: 1})
	h.hub = &longpoll.Hub{Base: h.rdb.Options(), Readers: 1}
	if err := h.hub.Start(ctx); err != nil {
		b.Fatal(err)
	}
	run := &schema.Run{Meta: schema.Meta{ID: "rhopa" + id}, OwnerID: owner, Status: schema.RunRunning}
	l, err := eventlog.Open(ctx, h.rdb, env.Store, run, eventlog.NewToken())
	if err != nil {
		b.Fatal(err)
	}
	h.log = l
	// What admission leaves for the runs' conversation: its owner (a live conversation).
	conv := "chop" + id
	if err := h.rdb.Set(ctx, queue.ConvOwnerKey(conv), owner, time.Hour).Err(); err != nil {
		b.Fatal(err)
	}
	for _, r := range []string{h.runB, h.runC} {
		// What admission and the executor leave for a running run: "<owner> <conversation>"
		// and its hot state.
		if err := h.rdb.Set(ctx, queue.RunOwnerKey(r), owner+" "+conv, time.Hour).Err(); err != nil {
			b.Fatal(err)
		}
		if err := queue.SetRunState(ctx, h.rdb, r, queue.RunState{Status: string(schema.RunRunning), HeartbeatAt: time.Now()}); err != nil {
			b.Fatal(err)
		}
	}
	h.bare = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h.enter <- struct{}{}
		body := <-h.wake
		w.Header().Set("Content-Type", "application/json; charset=utf-8")
		w.WriteHeader(200)
		_, _ = w.Write(body)
	}))
	// The relay as a function: the function host runs its Main as it runs the functions'
	// (functionhost: a goroutine per execution, the Open Runtimes context and response).
	h.rt = httptest.NewServer(&functionhost.Host{Functions: []functionhost.Function{{Name: "relay", Prefixes: []string{"/relay"},
		Main: func(c openruntimes.Context) openruntimes.Response {
			h.enter <- struct{}{}
			body := <-h.wake
			return c.Res.Binary(body, c.Res.WithStatusCode(200), c.Res.WithHeaders(map[string]string{"content-type": "application/json; charset=utf-8"}))
		}}}})
	api, err := env.Svc.API("runs")
	if err != nil {
		b.Fatal(err)
	}
	h.api = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		api.ServeHTTP(&writeTimer{ResponseWriter: w, h: h}, r)
		h.mu.Lock()
		h.returned = time.Now()
		h.mu.Unlock()
	}))
	b.Cleanup(func() {
		h.api.Close()
		h.bare.Close()
		h.rt.Close()
		h.hub.Stop()
		_ = h.blk.Close()
		_ = h.rdb.Close()
	})
	return h
}

// writeTimer notes when the handler writes its answer's body (api-path): XADD → that
// write, beside hub-wake, is the handler's own work after the poll returned; the rest of
// api-path is net/http and the client.
type writeTimer struct {
	http.ResponseWriter
	h    *eventHops
	done bool
}

func (w *writeTimer) Write(b []byte) (int, error) {
	if !w.done {
		w.done = true
		w.h.mu.Lock()
		w.h.wrote = time.Now()
		w.h.mu.Unlock()
	}
	return w.ResponseWriter.Write(b)
}

// storedDeltaText is a stored message.delta with text.
func storedDeltaText(text string) []byte {
	d, _ := json.Marshal(queue.MessageDeltaData{Text: text})
	b, _ := json.Marshal(queue.Event{Sequence: 1, Type: queue.EventMessageDelta, Data: d, At: time.Now().UTC()})
	return b
}

// storedDelta is a stored message.delta as the executor writes it (a stamp-sized text).
func storedDelta(seq int64) []byte {
	d, _ := json.Marshal(queue.MessageDeltaData{Text: fmt.Sprintf("[%d]", time.Now().UnixNano())})
	b, _ := json.Marshal(queue.Event{Sequence: seq, Type: queue.EventMessageDelta, Data: d, At: time.Now().UTC()})
	return b
}

func (h *eventHops) add(name string, d time.Duration) { h.ds[name] = append(h.ds[name], d) }

// last is name's latest sample.
func (h *eventHops) last(name string) time.Duration { return h.ds[name][len(h.ds[name])-1] }

func (h *eventHops) p50(name string) time.Duration {
	if len(h.ds[name]) == 0 {
		return 0
	}
	return percentile(h.ds[name], 0.5)
}

// observed reports whether iteration i of BenchmarkEventLatencyRealHermes is watched by
// a raw reader and the append hook (every fourth): the others, untouched, make the
// figures of the path.
func observed(i int) bool { return i >= 0 && i%4 == 3 }

// rawWatch is a raw XREAD BLOCK following one run's stream beside the long-poll, on its
// own connection: when each entry reached a plain Redis reader in the agent path itself.
type rawWatch struct {
	cancel context.CancelFunc
	conn   *redis.Client
	done   chan struct{}
	mu     sync.Mutex
	seen   map[int64]time.Time
}

func (h *eventHops) watch(run string) *rawWatch {
	ctx, cancel := context.WithCancel(context.Background())
	base := h.rdb.Options()
	c := redis.NewClient(&redis.Options{Addr: base.Addr, Username: base.Username, Password: base.Password, PoolSize: 1, MaxRetries: -1})
	w := &rawWatch{cancel: cancel, conn: c, done: make(chan struct{}), seen: map[int64]time.Time{}}
	go func() {
		defer close(w.done)
		last := "0-0"
		for ctx.Err() == nil {
			res, err := c.XRead(ctx, &redis.XReadArgs{Streams: []string{queue.EventsKey(run), last}, Block: 10 * time.Second}).Result()
			at := time.Now()
			if err != nil {
				continue
			}
			w.mu.Lock()
			for _, m := range res[0].Messages {
				var n int64
				fmt.Sscanf(m.ID, "%d-", &n)
				w.seen[n] = at
				last = m.ID
			}
			w.mu.Unlock()
		}
	}()
	return w
}

func (w *rawWatch) at(seq int64) (time.Time, bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.seen[seq]
	return t, ok
}

// stop ends the read: closing its connection ends a blocked XREAD at once.
func (w *rawWatch) stop() { w.cancel(); _ = w.conn.Close(); <-w.done }

// appendTimes is a go-redis hook on the agent's own client: when each event append
// (the event log's EVALSHA, matched by stream key and entry id) was handed to the client
// and when its reply came back.
type appendTimes struct {
	on   atomic.Bool // records only while set (the observed iterations)
	mu   sync.Mutex
	sent map[string]time.Time
	done map[string]time.Time
}

func newAppendTimes() *appendTimes {
	return &appendTimes{sent: map[string]time.Time{}, done: map[string]time.Time{}}
}

func (t *appendTimes) DialHook(next redis.DialHook) redis.DialHook { return next }

func (t *appendTimes) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

func (t *appendTimes) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !t.on.Load() {
			return next(ctx, cmd)
		}
		args := cmd.Args()
		n, _ := args[min(2, len(args)-1)].(int) // evalsha sha numkeys keys… argv…
		if cmd.Name() != "evalsha" && cmd.Name() != "eval" || n < 3 || len(args) < 3+n+2 {
			return next(ctx, cmd)
		}
		stream, _ := args[4].(string)
		id, _ := args[3+n+1].(string) // ARGV[2], the entry id
		if !strings.HasSuffix(stream, ":events") {
			return next(ctx, cmd)
		}
		k := stream + " " + id
		t.mu.Lock()
		if _, ok := t.sent[k]; !ok {
			t.sent[k] = time.Now()
		}
		t.mu.Unlock()
		err := next(ctx, cmd)
		at := time.Now()
		t.mu.Lock()
		t.done[k] = at
		t.mu.Unlock()
		return err
	}
}

// at returns when the append of run's entry seq was sent and answered.
func (t *appendTimes) at(run string, seq int64) (sent, done time.Time, ok bool) {
	k := fmt.Sprintf("%s %d-0", queue.EventsKey(run), seq)
	t.mu.Lock()
	defer t.mu.Unlock()
	sent, ok1 := t.sent[k]
	done, ok2 := t.done[k]
	return sent, done, ok1 && ok2
}

// relay is the bare relay floor, taken in the conditions of the agent path itself (the
// harness has just sent the token and is still busy): whatever reads the harness's SSE
// XADDs the event to a scratch stream; a raw XREAD BLOCK on its own connection gets it and
// wakes a bare loopback handler, which answers a long-poll client waiting on it with the
// bytes of a functions' answer. That is the two hops a long-poll design needs, and
// nothing else.
type relay struct {
	h      *eventHops
	key    string
	read   chan time.Time
	client chan time.Time
	sent   time.Time
}

// startRelay sets the bare relay up and returns once its reader and client are waiting.
func (h *eventHops) startRelay(ctx context.Context) *relay { return h.startRelayAt(ctx, h.bare.URL) }

// startRuntimeRelay is startRelay with the relay answered by a function on the function
// host.
func (h *eventHops) startRuntimeRelay(ctx context.Context) *relay {
	return h.startRelayAt(ctx, h.rt.URL+"/relay")
}

func (h *eventHops) startRelayAt(ctx context.Context, url string) *relay {
	r := &relay{h: h, key: h.raw + ":hop", read: make(chan time.Time, 1), client: make(chan time.Time, 1)}
	go func() {
		_, _, at, err := pollOnce(url, "")
		if err != nil {
			at = time.Time{}
		}
		r.client <- at
	}()
	<-h.enter // the handler waits for its answer
	go func() {
		res, err := h.blk.XRead(ctx, &redis.XReadArgs{Streams: []string{r.key, h.hopID}, Count: 1, Block: time.Minute}).Result()
		at := time.Now()
		if err == nil && len(res) == 1 && len(res[0].Messages) == 1 {
			h.hopID = res[0].Messages[0].ID
		}
		r.read <- at
		h.wake <- h.body
	}()
	h.blocked(ctx)
	return r
}

// forward appends raw (what the relay read from the harness) and waits until the client
// has it: the Redis hop and the HTTP hop it took.
func (r *relay) forward(ctx context.Context, raw []byte) (redisHop, httpHop time.Duration, at time.Time) {
	t0 := time.Now()
	if err := r.h.rdb.XAdd(ctx, &redis.XAddArgs{Stream: r.key, MaxLen: 1000, Approx: true, Values: []any{"e", raw}}).Err(); err != nil {
		r.h.b.Fatal(err)
	}
	read := <-r.read
	at = <-r.client
	if at.IsZero() {
		r.h.b.Fatal("relay: the bare client failed")
	}
	return read.Sub(t0), at.Sub(read), at
}

// round takes one sample of every part, the figures and their floors.
func (h *eventHops) round() {
	ctx := context.Background()
	// append vs raw XADD, alternating which goes first.
	for i := 0; i < 4; i++ {
		ev := queue.MessageDeltaData{Text: fmt.Sprintf("[%d]", time.Now().UnixNano())}
		raw := storedDelta(1)
		xadd := func() {
			t0 := time.Now()
			if err := h.rdb.XAdd(ctx, &redis.XAddArgs{Stream: h.raw, MaxLen: 1000, Approx: true, Values: []any{"e", raw}}).Err(); err != nil {
				h.b.Fatal(err)
			}
			h.add("raw-xadd", time.Since(t0))
		}
		emit := func() {
			t0 := time.Now()
			if _, err := h.log.Emit(ctx, ev, false); err != nil {
				h.b.Fatal(err)
			}
			h.add("append", time.Since(t0))
		}
		if i%2 == 0 {
			xadd()
			emit()
		} else {
			emit()
			xadd()
		}
	}
	h.redisHop(ctx)
	h.hubWake(ctx)
	h.fnPath(ctx)
	h.relayFloor(ctx)
}

// relayFloor is fn-path's floors: the bare relay's two hops (a raw XADD → a raw XREAD
// BLOCK → a bare handler answering a waiting client the functions' last answer), and the
// same relay answered by a function on the function host, each after the same pause
// fn-path takes before its append.
func (h *eventHops) relayFloor(ctx context.Context) {
	rl := h.startRelay(ctx)
	time.Sleep(settle)
	redisHop, httpHop, _ := rl.forward(ctx, h.body)
	h.add("relay", redisHop+httpHop)
	h.add("relay-http", httpHop)
	h.add("fn-beyond-relay", h.last("fn-path")-(redisHop+httpHop))
	rl = h.startRuntimeRelay(ctx)
	time.Sleep(settle)
	redisHop, httpHop, _ = rl.forward(ctx, h.body)
	h.add("rt-relay", redisHop+httpHop)
	h.add("rt-own", h.last("rt-relay")-h.last("relay"))
	h.add("fn-beyond-rt-relay", h.last("fn-path")-(redisHop+httpHop))
}

// blocked waits until the raw reader's connection is blocked in its XREAD.
func (h *eventHops) blocked(ctx context.Context) {
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		list, err := h.rdb.ClientList(ctx).Result()
		if err != nil {
			h.b.Fatal(err)
		}
		for _, line := range strings.Split(list, "\n") {
			if strings.Contains(line, " name="+hopClient+" ") && strings.Contains(line, " cmd=xread") && strings.Contains(line, " flags=b ") {
				return
			}
		}
		time.Sleep(100 * time.Microsecond)
	}
	h.b.Fatal("the raw XREAD never blocked")
}

func (h *eventHops) redisHop(ctx context.Context) {
	h.redisHopOver(ctx, "redis-hop", nil)
	// The hub's read also names its wake stream (which does not grow here).
	h.redisHopOver(ctx, "redis-hop-2streams", []string{h.raw + ":wake"})
}

func (h *eventHops) redisHopOver(ctx context.Context, name string, also []string) {
	key := h.raw + ":hop"
	got := make(chan time.Time, 1)
	// A reader shared by many followers must hand what it read to the follower's own
	// goroutine: the hand-off floor is the raw hop plus one channel send to a goroutine
	// parked on it (as a waiting Poll is).
	handoff, woke := make(chan struct{}), make(chan time.Time, 1)
	go func() {
		<-handoff
		woke <- time.Now()
	}()
	go func() {
		streams := append([]string{key}, also...)
		streams = append(streams, h.hopID)
		for range also {
			streams = append(streams, "0-0")
		}
		res, err := h.blk.XRead(ctx, &redis.XReadArgs{Streams: streams, Count: 500, Block: 10 * time.Second}).Result()
		at := time.Now()
		if err == nil && len(res) == 1 && len(res[0].Messages) == 1 {
			h.hopID = res[0].Messages[0].ID
		}
		got <- at
		handoff <- struct{}{}
	}()
	h.blocked(ctx)
	// The pause hub-wake takes before its append (settle): a process idle that long pays
	// its wake-up in the hop (measured 2026-12-02: the raw hop 88–94 µs right after the
	// reader blocked, 182–187 µs after the pause). A floor taken hot, as it was until
	// then, made the hub's wake look 0.1–0.2 ms slower than a raw read; after the same
	// pause it is within 10–20 µs of it.
	time.Sleep(settle)
	raw := storedDelta(1)
	t0 := time.Now()
	if err := h.rdb.XAdd(ctx, &redis.XAddArgs{Stream: key, MaxLen: 1000, Approx: true, Values: []any{"e", raw}}).Err(); err != nil {
		h.b.Fatal(err)
	}
	h.add(name, (<-got).Sub(t0))
	h.add(name+"-handoff", (<-woke).Sub(t0))
}

// settle gives a follower that has been counted time to register and take its snapshot:
// a sample where it was not waiting yet is dropped (hub-wake) or shows as an outlier.
const settle = 3 * time.Millisecond

func (h *eventHops) hubWake(ctx context.Context) {
	type res struct {
		at time.Time
		b  longpoll.Batch
		e  error
	}
	got := make(chan res, 1)
	p := &longpoll.Poller{Hub: h.hub}
	after := h.seqB
	go func() {
		b, err := p.Poll(ctx, h.env.Store, longpoll.Run{ID: h.runB, Owner: h.owner}, after, 10*time.Second)
		got <- res{time.Now(), b, err}
	}()
	for h.hub.Follows() == 0 {
		select {
		case r := <-got: // it ended before it waited: nothing will ever follow
			h.b.Fatalf("hub-wake: the poll answered before it waited: %v (next %d)", r.e, r.b.Next)
		default:
		}
		time.Sleep(50 * time.Microsecond)
	}
	time.Sleep(settle)
	h.seqB++
	raw := storedDelta(h.seqB)
	t0 := time.Now()
	if err := h.rdb.XAdd(ctx, &redis.XAddArgs{Stream: queue.EventsKey(h.runB), ID: fmt.Sprintf("%d-0", h.seqB), Values: []any{"e", raw}}).Err(); err != nil {
		h.b.Fatal(err)
	}
	r := <-got
	if r.e != nil || r.b.Next != h.seqB {
		h.b.Fatalf("hub-wake: %v (next %d, want %d)", r.e, r.b.Next, h.seqB)
	}
	if r.b.Events != nil { // read by its snapshot, not handed over by the reader
		h.skipped["hub-wake"]++
		return
	}
	h.add("hub-wake", r.at.Sub(t0))
}

// pollOnce is the long-poll client every measure here uses: the same client as
// stacktest.Follow (http.DefaultClient), reading the whole answer and decoding it.
func pollOnce(url, jwt string, hdr ...string) (stacktest.Batch, []byte, time.Time, error) {
	var b stacktest.Batch
	req, err := http.NewRequest("GET", url, nil)
	if err != nil {
		return b, nil, time.Time{}, err
	}
	if jwt != "" {
		req.Header.Set("Authorization", "Bearer "+jwt)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return b, nil, time.Time{}, err
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return b, nil, time.Time{}, err
	}
	if resp.StatusCode != 200 {
		return b, body, time.Time{}, fmt.Errorf("status %d: %s", resp.StatusCode, body)
	}
	err = json.Unmarshal(body, &b)
	return b, body, time.Now(), err
}

// fnPath: the functions' long-poll as deployed here (the function host, runtimehttp),
// then the same handler served by a plain net/http server (api-path): their difference
// is what the Appwrite runtime's adaptation costs, the rest is the handler's own.
func (h *eventHops) fnPath(ctx context.Context) {
	h.longPoll(ctx, "fn-path", h.env.URL)
	h.longPoll(ctx, "api-path", h.api.URL, "x-appwrite-key", functionstest.FunctionKey("runs"))
}

func (h *eventHops) longPoll(ctx context.Context, name, base string, hdr ...string) {
	type res struct {
		at   time.Time
		b    stacktest.Batch
		body []byte
		e    error
	}
	got := make(chan res, 1)
	url := fmt.Sprintf("%s/api/runs/%s/events?after=%d&wait=10", base, h.runC, h.seqC)
	go func() {
		b, body, at, err := pollOnce(url, h.jwt, hdr...)
		got <- res{at, b, body, err}
	}()
	for h.env.Svc.Follows() == 0 {
		select {
		case r := <-got: // it ended before it waited: nothing will ever follow
			h.b.Fatalf("%s: the long-poll answered before it waited: %v: %s", name, r.e, r.body)
		default:
		}
		time.Sleep(50 * time.Microsecond)
	}
	time.Sleep(settle)
	h.seqC++
	raw := storedDelta(h.seqC)
	t0 := time.Now()
	if err := h.rdb.XAdd(ctx, &redis.XAddArgs{Stream: queue.EventsKey(h.runC), ID: fmt.Sprintf("%d-0", h.seqC), Values: []any{"e", raw}}).Err(); err != nil {
		h.b.Fatal(err)
	}
	r := <-got
	if r.e != nil || r.b.Next != h.seqC || !bytes.Contains(r.body, raw) {
		h.b.Fatalf("%s: %v (next %d, want %d): %s", name, r.e, r.b.Next, h.seqC, r.body)
	}
	h.body = r.body
	h.add(name, r.at.Sub(t0))
	if name == "api-path" {
		h.mu.Lock()
		wrote, returned := h.wrote, h.returned
		h.mu.Unlock()
		h.add("api-write", wrote.Sub(t0))
		h.add("api-return", returned.Sub(t0))
	}
}

// report prints every part beside its floor (ms, medians of the run's samples).
func (h *eventHops) report(b *testing.B) {
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(h.p50("append")), "b-append-p50-ms")
	b.ReportMetric(ms(h.p50("raw-xadd")), "b-floor-raw-xadd-p50-ms")
	b.ReportMetric(ms(h.p50("hub-wake")), "c-hub-wake-p50-ms")
	b.ReportMetric(ms(h.p50("redis-hop")), "c-floor-redis-hop-ms")
	b.ReportMetric(ms(h.p50("redis-hop-handoff")), "c-floor-redis-handoff-ms")
	b.ReportMetric(ms(h.p50("redis-hop-2streams-handoff")), "c-floor-redis-2streams-handoff-ms")
	b.ReportMetric(ms(h.p50("fn-path")-h.p50("hub-wake")), "d-fn-http-p50-ms")
	b.ReportMetric(ms(h.p50("relay-http")), "d-floor-http-hop-ms")
	b.ReportMetric(ms(h.p50("fn-path")), "fn-path-p50-ms")
	b.ReportMetric(ms(h.p50("relay")), "f-floor-relay-p50-ms")
	b.ReportMetric(ms(h.p50("fn-beyond-relay")), "f-fn-beyond-relay-p50-ms")
	b.ReportMetric(ms(h.p50("rt-relay")), "f-floor-rt-relay-p50-ms")
	b.ReportMetric(ms(h.p50("rt-own")), "f-rt-own-p50-ms")
	b.ReportMetric(ms(h.p50("fn-beyond-rt-relay")), "f-fn-beyond-rt-relay-p50-ms")
	b.ReportMetric(ms(h.p50("api-path")-h.p50("hub-wake")), "d-api-http-p50-ms")
	// The handler's work after the poll returned until it writes the body (encode), after
	// that until it returns (deferred work: the request's log line), and net/http with the
	// client once it returned (the bare floor's d-floor-http-hop is that part alone).
	b.ReportMetric(ms(h.p50("api-write")-h.p50("hub-wake")), "d-api-handler-p50-ms")
	b.ReportMetric(ms(h.p50("api-return")-h.p50("api-write")), "d-api-after-write-p50-ms")
	b.ReportMetric(ms(h.p50("api-path")-h.p50("api-return")), "d-api-net-p50-ms")
	b.ReportMetric(float64(h.skipped["hub-wake"]), "c-hub-not-waiting")
}
