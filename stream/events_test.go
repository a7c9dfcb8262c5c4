package stream_test

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/stream"
)

// A follower gets what happened after its cursor (after=, or Last-Event-ID over it), each
// event byte for byte as the long-poll's events array holds it, then what happens live,
// then one end message with the terminal status, and the stream ends.
func TestRunEventsReplayThenLiveThenEnd(t *testing.T) {
	t.Parallel()
	e := setup(t)
	owner, jwt := e.SignUp(t, "follow@example.com", "password-follow")
	run := admit(t, e, jwt, "r1")
	emit(t, e, owner, run, 1, queue.EventRunStatus, "running")
	emit(t, e, owner, run, 2, queue.EventMessageDelta, "running")

	c := e.open(t, "/stream/runs/"+run+"/events?after=0", "Authorization", "Bearer "+jwt)
	require.Equal(t, 200, c.resp.StatusCode)
	require.Equal(t, "text/event-stream", c.resp.Header.Get("Content-Type"))
	require.Equal(t, "no", c.resp.Header.Get("X-Accel-Buffering"))
	want := functionEvents(t, e, jwt, run, 0)
	require.Len(t, want, 2)
	for i := range want {
		m := c.must(t)
		require.Equal(t, strconv.Itoa(i+1), m.ID)
		require.Equal(t, "", m.Event)
		require.Equal(t, string(want[i]), m.Data, "the long-poll's element, byte for byte")
	}

	// Last-Event-ID overrides after.
	c2 := e.open(t, "/stream/runs/"+run+"/events?after=0", "Authorization", "Bearer "+jwt, "Last-Event-ID", "1")
	m := c2.must(t)
	require.Equal(t, "2", m.ID)
	require.Equal(t, string(want[1]), m.Data)

	// Live, to both.
	emit(t, e, owner, run, 3, queue.EventMessageDelta, "running")
	live := functionEvents(t, e, jwt, run, 2)
	require.Len(t, live, 1)
	for _, cc := range []*sseConn{c, c2} {
		m := cc.must(t)
		require.Equal(t, "3", m.ID)
		require.Equal(t, string(live[0]), m.Data)
	}

	emit(t, e, owner, run, 4, queue.RunEndType("completed"), "completed")
	for _, cc := range []*sseConn{c, c2} {
		m := cc.must(t)
		require.Equal(t, "4", m.ID)
		m = cc.must(t)
		require.Equal(t, "end", m.Event)
		require.JSONEq(t, `{"status":"completed"}`, m.Data)
		_, err := cc.next()
		require.ErrorIs(t, err, io.EOF, "the stream ends after end")
	}

	// A follower arriving after the end gets the rest and the end at once.
	c3 := e.open(t, "/stream/runs/"+run+"/events?after=3", "Authorization", "Bearer "+jwt)
	require.Equal(t, "4", c3.must(t).ID)
	require.Equal(t, "end", c3.must(t).Event)
	eventually(t, func() bool { return e.svc.Follows() == 0 }, "followers released")
}

// An idle stream carries a heartbeat comment every Heartbeat.
func TestHeartbeat(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *stream.Config) { c.Heartbeat = 150 * time.Millisecond })
	_, jwt := e.SignUp(t, "hb@example.com", "password-hbhb")
	run := admit(t, e, jwt, "r1")
	c := e.open(t, "/stream/runs/"+run+"/events", "Authorization", "Bearer "+jwt)
	start := time.Now()
	for range 2 {
		m := c.must(t)
		require.Equal(t, "hb", m.Comment)
		require.Empty(t, m.ID)
	}
	require.GreaterOrEqual(t, time.Since(start), 250*time.Millisecond, "two heartbeats take two intervals")
}

// Another user's run reads exactly like a missing one, as the runs function answers it;
// a missing or bad JWT is the functions' 401; a verified non-member is 403.
func TestIdentityAndOwnership(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, jwt := e.SignUp(t, "own@example.com", "password-ownown")
	_, other := e.SignUp(t, "other@example.com", "password-other")
	_, stranger := e.Stranger(t, "stranger@example.com", "password-strange")
	run := admit(t, e, jwt, "r1")

	get := func(path string, hdr ...string) (int, map[string]any, string) {
		c := e.open(t, path, hdr...)
		defer c.close()
		return c.resp.StatusCode, envelope(t, c.body(t)), c.resp.Header.Get("Content-Type")
	}
	fs, fe, _ := get("/stream/runs/"+run+"/events", "Authorization", "Bearer "+other)
	ms, me, ct := get("/stream/runs/rmissing000/events", "Authorization", "Bearer "+other)
	require.Equal(t, 404, fs)
	require.Equal(t, ms, fs)
	require.Equal(t, me, fe, "foreign and missing are the same bytes")
	require.Equal(t, "application/json; charset=utf-8", ct)
	fn := e.Do(t, "GET", "/api/runs/"+run+"/events?wait=0", other, nil)
	require.Equal(t, fn.Status, fs)
	require.Equal(t, envelope(t, fn.Body), fe, "the runs function's answer")

	for _, h := range [][]string{nil, {"Authorization", "Bearer not-a-jwt"}, {"Authorization", "Basic x"}} {
		st, body, _ := get("/stream/runs/"+run+"/events", h...)
		var fnHdr []string
		if h != nil {
			fnHdr = h
		}
		fn := e.Do(t, "GET", "/api/runs/"+run+"/events?wait=0", "", nil, fnHdr...)
		require.Equal(t, 401, st, "%v", h)
		require.Equal(t, fn.Status, st)
		require.Equal(t, envelope(t, fn.Body), body, "%v: as the functions answer", h)
	}
	// An expired JWT (Appwrite's own expiry: a zero-duration one).
	acc := appwrite.NewAccount(appwrite.NewClient(appwrite.WithEndpoint(e.TS.URL), appwrite.WithProject(e.TS.Project)))
	_, err := acc.CreateEmailPasswordSession("own@example.com", "password-ownown")
	require.NoError(t, err)
	expired, err := acc.CreateJWT(acc.WithCreateJWTDuration(0))
	require.NoError(t, err)
	st, body, _ := get("/stream/runs/"+run+"/events", "Authorization", "Bearer "+expired.Jwt)
	fn = e.Do(t, "GET", "/api/runs/"+run+"/events?wait=0", expired.Jwt, nil)
	require.Equal(t, 401, st)
	require.Equal(t, fn.Status, st)
	require.Equal(t, envelope(t, fn.Body), body, "an expired JWT as the functions answer it")

	st, body, _ = get("/stream/runs/"+run+"/events", "Authorization", "Bearer "+stranger)
	require.Equal(t, 403, st)
	require.Equal(t, "not_a_member", body["code"])
	st, body, _ = get("/stream/runs/"+run+"/events?after=-1", "Authorization", "Bearer "+jwt)
	require.Equal(t, 400, st)
	require.Equal(t, "invalid_after", body["code"])
	st, _, _ = get("/stream/runs/"+run+"/events", "Authorization", "Bearer "+jwt, "Last-Event-ID", "x")
	require.Equal(t, 400, st)
}

// A client that goes away releases its follower at once; a user's streams are capped
// (429 with Retry-After, as the long-poll); Stop ends every stream and waits for it.
func TestDisconnectCapAndStop(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *stream.Config) { c.MaxPerUser = 2 })
	_, jwt := e.SignUp(t, "cap@example.com", "password-capcap")
	run := admit(t, e, jwt, "r1")
	a := e.open(t, "/stream/runs/"+run+"/events", "Authorization", "Bearer "+jwt)
	b := e.open(t, "/stream/feed", "Authorization", "Bearer "+jwt)
	require.Equal(t, 200, a.resp.StatusCode)
	require.Equal(t, 200, b.resp.StatusCode)
	require.Equal(t, "reset", b.must(t).Event)
	eventually(t, func() bool { return e.svc.Follows() == 2 }, "two streams")

	c := e.open(t, "/stream/runs/"+run+"/events", "Authorization", "Bearer "+jwt)
	require.Equal(t, 429, c.resp.StatusCode)
	require.Equal(t, "2", c.resp.Header.Get("Retry-After"))
	require.Equal(t, "too_many_follows", envelope(t, c.body(t))["code"])

	a.close()
	eventually(t, func() bool { return e.svc.Follows() == 1 }, "the disconnected follower released")
	d := e.open(t, "/stream/runs/"+run+"/events", "Authorization", "Bearer "+jwt)
	require.Equal(t, 200, d.resp.StatusCode, "its slot is free again")

	done := make(chan struct{})
	go func() { e.svc.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("Stop did not return")
	}
	require.Equal(t, 0, e.svc.Follows())
	for _, cc := range []*sseConn{b, d} {
		for {
			if _, err := cc.next(); err != nil {
				break
			}
		}
	}
	res := e.open(t, "/stream/runs/"+run+"/events", "Authorization", "Bearer "+jwt)
	require.Equal(t, 503, res.resp.StatusCode, "a stopped service refuses")
}

// The feed: without a cursor a reset at the current position, then each change live
// with its feed sequence, the JSON the long-poll feed answers; a cursor replays.
func TestFeed(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, jwt := e.SignUp(t, "feed@example.com", "password-feedfeed")
	e.Conversation(t, jwt)
	c := e.open(t, "/stream/feed", "Authorization", "Bearer "+jwt)
	m := c.must(t)
	require.Equal(t, "reset", m.Event)
	require.Equal(t, "1", m.ID)
	require.JSONEq(t, `{"next":1}`, m.Data)

	e.Conversation(t, jwt)
	m = c.must(t)
	require.Equal(t, "2", m.ID)
	res := e.Do(t, "GET", "/api/conversations/feed?after=1&wait=0", jwt, nil)
	var fb struct{ Events []json.RawMessage }
	res.JSON(t, &fb)
	require.Len(t, fb.Events, 1)
	require.Equal(t, string(fb.Events[0]), m.Data, "the long-poll feed's element")
	var ev struct{ Type string }
	require.NoError(t, json.Unmarshal([]byte(m.Data), &ev))
	require.Equal(t, "conversation.created", ev.Type)

	r := e.open(t, "/stream/feed?after=0", "Authorization", "Bearer "+jwt)
	require.Equal(t, "1", r.must(t).ID)
	require.Equal(t, "2", r.must(t).ID)
	// A cursor past the feed: reset to the current position.
	x := e.open(t, "/stream/feed", "Authorization", "Bearer "+jwt, "Last-Event-ID", "99")
	m = x.must(t)
	require.Equal(t, "reset", m.Event)
	require.Equal(t, "2", m.ID)
}

// The ops listener: /healthz, /readyz naming Redis and Appwrite, /metrics with the
// service's series (followers, events delivered, bytes downloaded, identity cache hits).
func TestOpsListener(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, jwt := e.SignUp(t, "ops@example.com", "password-opsops")
	run := admit(t, e, jwt, "r1")
	c := e.open(t, "/stream/runs/"+run+"/events", "Authorization", "Bearer "+jwt)
	require.Equal(t, 200, c.resp.StatusCode)
	c2 := e.open(t, "/stream/runs/"+run+"/events", "Authorization", "Bearer "+jwt)
	require.Equal(t, 200, c2.resp.StatusCode)

	o := e.svc.Ops("127.0.0.1:0", e.reg, nil)
	require.NoError(t, o.Start(context.Background()))
	defer o.Stop()
	get := func(path string) (int, string) {
		resp, err := http.Get("http://" + o.Bound() + path)
		require.NoError(t, err)
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	code, _ := get("/healthz")
	require.Equal(t, 200, code)
	code, body := get("/readyz")
	require.Equal(t, 200, code, body)
	require.JSONEq(t, `{"ready":true,"checks":{"redis":"ok","appwrite":"ok"},"summary":"All 2 components are ready.","components":[
		{"name":"appwrite","kind":"appwrite","state":"ready","message":"Appwrite is ready."},
		{"name":"redis","kind":"redis","state":"ready","message":"The queue Redis is ready."}]}`, body)
	code, body = get("/metrics")
	require.Equal(t, 200, code)
	require.Contains(t, body, "pa_stream_followers 2\n")
	require.Contains(t, body, "pa_stream_identity_cache_hits_total 1\n", "the second stream's JWT came from the cache")
	for _, name := range []string{"pa_stream_events_delivered_total", "pa_stream_download_bytes_total", "pa_stream_identity_verifications_total"} {
		require.Contains(t, body, name)
	}

	// A service whose Redis does not answer is not ready, and says which.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	dead := ln.Addr().String()
	require.NoError(t, ln.Close())
	reg := prometheus.NewRegistry()
	bad, err := stream.New(stream.Config{Endpoint: e.TS.URL, ProjectID: e.TS.Project, APIKey: streamKey, RedisAddr: dead,
		Heartbeat: time.Second, WriteTimeout: time.Second, MaxPerUser: 1}, nil, reg)
	require.NoError(t, err)
	defer bad.Stop()
	bo := bad.Ops("127.0.0.1:0", reg, nil)
	require.NoError(t, bo.Start(context.Background()))
	defer bo.Stop()
	resp, err := http.Get("http://" + bo.Bound() + "/readyz")
	require.NoError(t, err)
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, 503, resp.StatusCode)
	require.Contains(t, string(b), `"appwrite":"ok"`)
	require.Contains(t, string(b), `"redis":"error`)
	require.Contains(t, string(b), `"summary":"1 of 2 components failing. The queue Redis is failing (`)
}

// A client that stops reading cannot hold its stream: once the socket buffers are full,
// the next write misses its deadline and the follower is released, the connection still
// open on the client's side.
func TestStalledClientIsCut(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *stream.Config) { c.WriteTimeout = 300 * time.Millisecond })
	_, jwt := e.SignUp(t, "stall@example.com", "password-stall")
	run := admit(t, e, jwt, "r1")
	rdb := e.Redis.Client()
	defer rdb.Close()
	ctx := context.Background()
	big, _ := json.Marshal(map[string]string{"text": strings.Repeat("x", 32<<10)})
	require.NoError(t, queue.SetRunState(ctx, rdb, run, queue.RunState{Status: "running", HeartbeatAt: time.Now(), LastSequence: 400}))
	for seq := int64(1); seq <= 400; seq++ { // 12.8 MiB: more than any socket buffers
		require.NoError(t, queue.AppendEvent(ctx, rdb, run, queue.Event{Sequence: seq, Type: queue.EventMessageDelta, Data: big, At: time.Now()}))
	}
	c := e.open(t, "/stream/runs/"+run+"/events", "Authorization", "Bearer "+jwt)
	require.Equal(t, 200, c.resp.StatusCode)
	m := c.must(t) // reads a little, then stops reading
	require.Equal(t, "1", m.ID)
	eventually(t, func() bool { return e.svc.Follows() == 0 }, "the stalled stream is cut and its follower released")
}

// TestAClientThatLeavesIsNoServerError: a client that goes away before its answer (a
// page closed or navigating while its stream opens) cancels the reads it started; what
// that cancel ends is answered 499 client_closed_request and logged at info with its
// cause, never as a 500 at error level (a browser run's log showed one).
func TestAClientThatLeavesIsNoServerError(t *testing.T) {
	t.Parallel()
	e := setup(t)
	_, jwt := e.SignUp(t, "leaves@example.com", "password-leaves")
	run := admit(t, e, jwt, "r1")
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	serve := func(path string) *httptest.ResponseRecorder {
		r := httptest.NewRequestWithContext(gone, "GET", path, nil)
		r.Header.Set("Authorization", "Bearer "+jwt)
		w := httptest.NewRecorder()
		e.svc.ServeHTTP(w, r)
		return w
	}
	// First with the JWT not yet verified (its check is what the cancel ends), then with
	// it cached (the run's owner check, the feed's first read).
	w := serve("/stream/runs/" + run + "/events")
	require.Equal(t, 499, w.Code, w.Body.String())
	require.Equal(t, "client_closed_request", envelope(t, w.Body.Bytes())["code"])
	c := e.open(t, "/stream/runs/"+run, "Authorization", "Bearer "+jwt)
	require.Equal(t, 200, c.resp.StatusCode)
	c.close()
	for _, path := range []string{"/stream/runs/" + run + "/events", "/stream/runs/" + run, "/stream/feed", "/stream/runs/" + run + "/events?after=0"} {
		w := serve(path)
		require.Equal(t, 499, w.Code, "%s: %s", path, w.Body.String())
	}

	lines := e.log.lines(t)
	gave := 0
	for _, l := range lines {
		require.NotEqual(t, "ERROR", l["level"], "%v", l)
		if l["status"] == float64(499) {
			gave++
			require.Equal(t, "INFO", l["level"])
			require.Equal(t, "client_closed_request", l["code"])
			require.NotEmpty(t, l["err"], "the cause is kept")
		}
	}
	require.Equal(t, 5, gave, "%v", lines)
}

// A client that reads slowly once its stream is live (the socket's buffers full, the
// reader unable to write a frame at once) loses nothing: the rest goes out as it reads,
// in order, then the end.
func TestASlowClientCatchesUpWhileLive(t *testing.T) {
	t.Parallel()
	// Slow, never stalled: the writes wait for the client, each well within the bound (the
	// default 10 s; 2 s here cut this client under -race on a loaded CI box, mid-read).
	// TestAClientStalledWhileLiveIsCut is the cut.
	e := setup(t, func(c *stream.Config) { c.WriteTimeout = 30 * time.Second })
	_, jwt := e.SignUp(t, "slow@example.com", "password-slow")
	run := admit(t, e, jwt, "r1")
	rdb := e.Redis.Client()
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(t, queue.SetRunState(ctx, rdb, run, queue.RunState{Status: "running", HeartbeatAt: time.Now()}))
	c := e.open(t, "/stream/runs/"+run+"/events", "Authorization", "Bearer "+jwt)
	require.Equal(t, 200, c.resp.StatusCode)
	eventually(t, func() bool { return e.svc.Follows() == 1 }, "the stream is live")
	big, _ := json.Marshal(map[string]string{"text": strings.Repeat("y", 32<<10)})
	const n = 400 // 12.8 MiB: more than any socket buffers
	for seq := int64(1); seq <= n; seq++ {
		require.NoError(t, queue.AppendEvent(ctx, rdb, run, queue.Event{Sequence: seq, Type: queue.EventMessageDelta, Data: big, At: time.Now()}))
	}
	require.NoError(t, queue.AppendEvent(ctx, rdb, run, queue.Event{Sequence: n + 1, Type: queue.RunEndType("completed"), Data: json.RawMessage(`{"status":"completed"}`), At: time.Now()}))
	time.Sleep(300 * time.Millisecond) // not reading: the writes wait for the client
	for seq := 1; seq <= n+1; seq++ {
		m := c.must(t)
		require.Equal(t, strconv.Itoa(seq), m.ID)
	}
	m := c.must(t)
	require.Equal(t, "end", m.Event)
	require.JSONEq(t, `{"status":"completed"}`, m.Data)
	_, err := c.next()
	require.ErrorIs(t, err, io.EOF)
	eventually(t, func() bool { return e.svc.Follows() == 0 }, "the follower released")
}

// A client that stops reading once its stream is live is cut as one that stalls on its
// first batch: the write that waits misses its deadline and the follower is released.
func TestAClientStalledWhileLiveIsCut(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *stream.Config) { c.WriteTimeout = 300 * time.Millisecond })
	_, jwt := e.SignUp(t, "stalllive@example.com", "password-stall")
	run := admit(t, e, jwt, "r1")
	rdb := e.Redis.Client()
	defer rdb.Close()
	ctx := context.Background()
	require.NoError(t, queue.SetRunState(ctx, rdb, run, queue.RunState{Status: "running", HeartbeatAt: time.Now()}))
	c := e.open(t, "/stream/runs/"+run+"/events", "Authorization", "Bearer "+jwt)
	require.Equal(t, 200, c.resp.StatusCode)
	eventually(t, func() bool { return e.svc.Follows() == 1 }, "the stream is live")
	big, _ := json.Marshal(map[string]string{"text": strings.Repeat("z", 32<<10)})
	for seq := int64(1); seq <= 400; seq++ {
		require.NoError(t, queue.AppendEvent(ctx, rdb, run, queue.Event{Sequence: seq, Type: queue.EventMessageDelta, Data: big, At: time.Now()}))
	}
	eventually(t, func() bool { return e.svc.Follows() == 0 }, "the stalled stream is cut and its follower released")
}

// A live stream whose run's Redis stream is trimmed under it (a hole after its cursor)
// reads the rest the ordinary way (Appwrite's copy), in order and exactly once, then goes
// on live.
func TestALiveStreamReadsAcrossAHole(t *testing.T) {
	t.Parallel()
	e := setup(t)
	owner, jwt := e.SignUp(t, "hole@example.com", "password-hole")
	run := admit(t, e, jwt, "r1")
	emit(t, e, owner, run, 1, queue.EventRunStatus, "running")
	c := e.open(t, "/stream/runs/"+run+"/events?after=0", "Authorization", "Bearer "+jwt)
	require.Equal(t, "1", c.must(t).ID)
	ctx := context.Background()
	rdb := e.Redis.Client()
	defer rdb.Close()
	// 2, 3 and 4 are stored; the stream keeps only 3 and 4.
	for _, seq := range []int64{2, 3, 4} {
		data, _ := json.Marshal(map[string]any{"n": seq})
		_, err := schema.For[schema.Event](e.Store, schema.CollEvents).Create(ctx, schema.EventDocID(run, seq), owner,
			&schema.Event{OwnerID: owner, RunID: run, Sequence: seq, Type: queue.EventMessageDelta, Data: schema.Ptr(string(data))})
		require.NoError(t, err)
	}
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		for _, seq := range []int64{2, 3, 4} {
			data, _ := json.Marshal(map[string]any{"n": seq})
			ev, _ := json.Marshal(queue.Event{Sequence: seq, Type: queue.EventMessageDelta, Data: data, At: time.Now().UTC()})
			p.XAdd(ctx, &redis.XAddArgs{Stream: queue.EventsKey(run), ID: strconv.FormatInt(seq, 10) + "-0", Values: []any{"e", ev}})
		}
		p.XTrimMinID(ctx, queue.EventsKey(run), "3-0")
		return nil
	})
	require.NoError(t, err)
	require.NoError(t, queue.SetRunState(ctx, rdb, run, queue.RunState{Status: "running", HeartbeatAt: time.Now(), LastSequence: 4}))
	for _, want := range []string{"2", "3", "4"} {
		require.Equal(t, want, c.must(t).ID)
	}
	emit(t, e, owner, run, 5, queue.EventMessageDelta, "running")
	require.Equal(t, "5", c.must(t).ID, "then live again")
}

// With a Coalesce window a run stream keeps a goroutine of its own (not direct): replay,
// live and end as any stream.
func TestACoalescingStreamReplaysThenLiveThenEnd(t *testing.T) {
	t.Parallel()
	e := setup(t, func(c *stream.Config) { c.Coalesce = 5 * time.Millisecond })
	owner, jwt := e.SignUp(t, "coalesce@example.com", "password-coalesce")
	run := admit(t, e, jwt, "r1")
	emit(t, e, owner, run, 1, queue.EventRunStatus, "running")
	c := e.open(t, "/stream/runs/"+run+"/events?after=0", "Authorization", "Bearer "+jwt)
	require.Equal(t, "1", c.must(t).ID)
	emit(t, e, owner, run, 2, queue.EventMessageDelta, "running")
	require.Equal(t, "2", c.must(t).ID)
	emit(t, e, owner, run, 3, queue.RunEndType("completed"), "completed")
	require.Equal(t, "3", c.must(t).ID)
	m := c.must(t)
	require.Equal(t, "end", m.Event)
	require.JSONEq(t, `{"status":"completed"}`, m.Data)
	_, err := c.next()
	require.ErrorIs(t, err, io.EOF)
	eventually(t, func() bool { return e.svc.Follows() == 0 }, "followers released")
}
