//go:build load

package load_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/queue"
	"privateassistant/stream"
)

// makeUser makes one member as TestLoad does (the admin key creates the account and
// labels it, as an operator importing users would; the user signs in and takes a JWT as
// the web does).
func makeUser(env *functionstest.Env, kind string, i int) (user, error) {
	users := appwrite.NewUsers(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(env.TS.AdminKey)))
	email, password := fmt.Sprintf("%s%d@load.example", kind, i), "password-load-0123"
	u, err := users.Create("unique()", users.WithCreateEmail(email), users.WithCreatePassword(password))
	if err != nil {
		return user{}, err
	}
	if _, err := users.UpdateLabels(u.Id, []string{"member"}); err != nil {
		return user{}, err
	}
	acc := appwrite.NewAccount(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project)))
	if _, err := acc.CreateEmailPasswordSession(email, password); err != nil {
		return user{}, err
	}
	j, err := acc.CreateJWT()
	if err != nil {
		return user{}, err
	}
	return user{id: u.Id, jwt: j.Jwt}, nil
}

// TestLoadStreamCapacity is make load's second phase: 10,000 SSE followers
// (PA_LOAD_CAPACITY_FOLLOWERS) on one stream process for PA_LOAD_CAPACITY_PHASE (60 s)
// while PA_LOAD_EVENT_RATE (100) deltas a second are appended to random followed runs,
// on loopback; the followers' clients and the appends are a child process. It prints
// the stream process's memory per follower (RSS and Go heap), its CPU, its Redis
// connections and the delivery latency (append → SSE frame read), and fails on any
// error, a lost event or more Redis connections than the stream process's bound.
func TestLoadStreamCapacity(t *testing.T) {
	nFollow := envInt("PA_LOAD_CAPACITY_FOLLOWERS", 10000)
	phase := envDur("PA_LOAD_CAPACITY_PHASE", 60*time.Second)
	eventRate := envInt("PA_LOAD_EVENT_RATE", 100)
	const perUser = 10 // streams per user (PA_STREAM_PER_USER is 16)
	files := raiseFiles(t, uint64(nFollow+4096))

	env := functionstest.New(t, functionstest.Options{Keys: map[string][]string{streamKey: stream.Scopes}})
	ctx := context.Background()
	rdb := redis.NewClient(&redis.Options{Addr: env.Redis.Addr, ClientName: "load", PoolSize: 8})
	defer rdb.Close()
	sp := startStream(t, env, rdb)

	// Users, 8 at a time.
	start := time.Now()
	nUsers := (nFollow + perUser - 1) / perUser
	followUsers := make([]user, nUsers)
	var mu sync.Mutex
	var firstErr error
	var wg sync.WaitGroup
	next := make(chan int)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				u, err := makeUser(env, "cap", i)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				followUsers[i] = u
				mu.Unlock()
			}
		}()
	}
	for i := range nUsers {
		next <- i
	}
	close(next)
	wg.Wait()
	require.NoError(t, firstErr)
	// The followed runs, live as the executor leaves them: owner key, first event, state.
	spec := followerSpec{Base: sp.URL, Redis: env.Redis.Addr, EventRate: eventRate}
	for i := range nFollow {
		run, owner := fmt.Sprintf("caprun%05d", i), followUsers[i/perUser]
		require.NoError(t, ownRun(ctx, rdb, run, owner.id))
		require.NoError(t, queue.AppendEvent(ctx, rdb, run, queue.Event{Sequence: 1, Type: queue.EventRunStatus, Data: json.RawMessage(`{"status":"running"}`), At: time.Now()}))
		require.NoError(t, queue.SetRunState(ctx, rdb, run, queue.RunState{Status: "running", HeartbeatAt: time.Now(), LastSequence: 1}))
		spec.Runs = append(spec.Runs, followedSpec{Run: run, JWT: owner.jwt, Last: 1})
	}
	t.Logf("setup: %d users, %d runs in %s", nUsers, nFollow, time.Since(start).Round(time.Millisecond))

	mem0 := sp.sampleMem(time.Second)
	redis0, _ := rdb.InfoMap(ctx, "memory").Result()
	opening := time.Now()
	child := startFollowerChild(t, spec)
	sp.waitFollows(t, nFollow, 2*time.Minute)
	opened := time.Since(opening)
	time.Sleep(time.Second)

	// The phase: appends at the rate; the stream process's CPU, memory and Redis
	// connections sampled throughout.
	stopMem := make(chan struct{})
	memc := sp.watchMem(stopMem)
	stopConns := make(chan struct{})
	connc := make(chan int, 1)
	go func() {
		peak := 0
		tk := time.NewTicker(250 * time.Millisecond)
		defer tk.Stop()
		for {
			if sn, _, err := redisConns(ctx, rdb); err == nil {
				peak = max(peak, sn)
			}
			select {
			case <-stopConns:
				connc <- peak
				return
			case <-tk.C:
			}
		}
	}()
	c0, r0, t0 := sp.cpu(), redisCPU(ctx, rdb), time.Now()
	child.events(t)
	time.Sleep(phase)
	cpu, rcpu, wall := sp.cpu()-c0, redisCPU(ctx, rdb)-r0, time.Since(t0)
	close(stopMem)
	mem1 := <-memc
	redis1, _ := rdb.InfoMap(ctx, "memory").Result()
	rep := child.stop(t)
	close(stopConns)
	connPeak := <-connc
	sp.waitFollows(t, 0, time.Minute)

	wake := &sample{}
	for _, ns := range rep.WakeNs {
		wake.add(time.Duration(ns))
	}
	used := func(m map[string]map[string]string) float64 {
		var v float64
		_, _ = fmt.Sscan(m["Memory"]["used_memory"], &v)
		return v
	}
	heapPer := (mem1.heapMin - mem0.heapMin) / 1024 / float64(nFollow)
	rssPer := (mem1.rss - mem0.rss) / 1024 / float64(nFollow)
	fmt.Printf("\n== make load, phase 2: %d SSE followers on one stream process for %s, %d events/s to followed runs ==\n", nFollow, phase, eventRate)
	fmt.Printf("opening: every stream open %s after the clients started (at most 256 connecting at once)\n", opened.Round(time.Millisecond))
	fmt.Printf("the stream process: Go heap %.1f → %.1f MiB, stacks %.1f → %.1f MiB, RSS %.0f → %.0f MiB, goroutines %.0f → %.0f: per follower Go heap %.1f KiB (%s), stacks %.1f KiB, RSS %.1f KiB (%s), %.2f goroutines\n",
		mem0.heapMin/(1<<20), mem1.heapMin/(1<<20), mem0.stack/(1<<20), mem1.stack/(1<<20), mem0.rss/(1<<20), mem1.rss/(1<<20), mem0.goroutines, mem1.goroutines,
		heapPer, memGoal(heapPer), (mem1.stack-mem0.stack)/1024/float64(nFollow), rssPer, memGoal(rssPer), (mem1.goroutines-mem0.goroutines)/float64(nFollow))
	fmt.Printf("CPU over the phase: the stream process %.0f%% of a core, Redis %.0f%%; the followers' child %.0f%% over its %s\n",
		100*cpu.Seconds()/wall.Seconds(), 100*rcpu.Seconds()/wall.Seconds(), 100*rep.cpu.Seconds()/rep.wall.Seconds(), rep.wall.Round(time.Second))
	fmt.Printf("Redis: the stream process's connections peak %d (bound %d); used_memory %+.0f B per follower\n",
		connPeak, streamBound(), (used(redis1)-used(redis0))/float64(nFollow))
	fmt.Printf("delivery (append → SSE frame read): p50 %s, p99 %s, max %s; %d of %d appended events delivered; %d streams opened; errors %d; open-file limit %d\n",
		ms(wake.pct(0.5)), ms(wake.pct(0.99)), ms(wake.pct(1)), rep.Delivered, rep.Appended, rep.Polls, rep.Errors, files)
	if len(rep.FirstErrs) > 0 {
		fmt.Printf("first errors:\n  %s\n", strings.Join(rep.FirstErrs, "\n  "))
	}
	require.Zero(t, rep.Errors, "follow errors")
	require.Equal(t, rep.Appended, rep.Delivered, "every appended event reached its follower")
	require.EqualValues(t, nFollow, rep.Polls, "one stream per follower, none reopened")
	require.LessOrEqual(t, connPeak, streamBound(), "the stream process's Redis connections bounded by a constant")
}
