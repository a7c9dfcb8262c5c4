//go:build load

package load_test

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/queue"
)

// The followers run in a child process (this test binary again, running
// TestLoadFollowers), as browsers would be elsewhere, and so do the event appends to the
// followed runs, as the agent's executor would on its GPU host: the stream service's
// process holds only its own side of the streams, and the clients' and appender's CPU is
// another process's, scheduled by the kernel like any neighbour.
//
// Each follower is one Server-Sent Events stream on the stream service
// (GET /stream/runs/{id}/events?after=N with the owner's JWT), as the web follows a run.
// Protocol over the child's stdin/stdout, lines prefixed "PA_LOAD: ": the child reads
// its spec (followerSpec, JSON file named by PA_LOAD_FOLLOWERS_SPEC), opens every
// stream, and says "ready" once each has its 200 answer. On "events" it starts appending
// message deltas to random followed runs at the spec's rate. On "stop" it stops
// appending and appends one more event to every run; each follower reads its stream
// until it holds its run's last sequence, then closes it; the child says "report <json>"
// (followerReport) and exits.

const childLine = "PA_LOAD: "

type followerSpec struct {
	Base      string         `json:"base"` // the stream service's origin
	Redis     string         `json:"redis"`
	EventRate int            `json:"eventRate"` // appends per second to random followed runs
	Runs      []followedSpec `json:"runs"`
}

type followedSpec struct {
	Run   string `json:"run"`
	JWT   string `json:"jwt"`
	After int64  `json:"after"` // the follower's cursor
	Last  int64  `json:"last"`  // the run's last sequence appended
}

type followerReport struct {
	Cursors   map[string]int64 `json:"cursors"`
	Last      map[string]int64 `json:"last"`     // each run's last sequence appended
	Appended  int64            `json:"appended"` // message deltas appended
	WakeNs    []int64          `json:"wakeNs"`   // append → SSE frame read, message.delta events
	Delivered int64            `json:"delivered"`
	Polls     int64            `json:"polls"` // streams opened
	Errors    int64            `json:"errors"`
	FirstErrs []string         `json:"firstErrs"`

	cpu, wall time.Duration // the child's, filled in by the parent
}

// sseStream reads one stream's messages: id and data of each event; comments
// (heartbeats) are skipped. io.EOF when the server ended it.
type sseStream struct{ rd *bufio.Reader }

func (s *sseStream) next() (id, event, data string, err error) {
	seen := false
	for {
		line, err := s.rd.ReadString('\n')
		if err != nil {
			if err == io.EOF && seen {
				err = io.ErrUnexpectedEOF
			}
			return "", "", "", err
		}
		line = strings.TrimSuffix(line, "\n")
		if line == "" {
			if seen {
				return id, event, data, nil
			}
			continue
		}
		k, v, _ := strings.Cut(line, ": ")
		switch k {
		case "": // a comment: ": hb"
			continue
		case "id":
			id = v
		case "event":
			event = v
		case "data":
			data = v
		}
		seen = true
	}
}

// TestLoadFollowers is the child's side; it does nothing unless started by TestLoad.
func TestLoadFollowers(t *testing.T) {
	specFile := os.Getenv("PA_LOAD_FOLLOWERS_SPEC")
	if specFile == "" {
		t.Skip("the followers' child process of TestLoad")
	}
	raw, err := os.ReadFile(specFile)
	require.NoError(t, err)
	var spec followerSpec
	require.NoError(t, json.Unmarshal(raw, &spec))
	n := len(spec.Runs)
	// One connection per stream, as each tab holds its own; no overall timeout (a stream
	// lasts), a bound on the answer's headers.
	tr := &http.Transport{MaxIdleConnsPerHost: -1, ResponseHeaderTimeout: 30 * time.Second}
	hc := &http.Client{Transport: tr}
	defer tr.CloseIdleConnections()
	ctx := context.Background()

	var mu sync.Mutex
	rep := followerReport{Cursors: map[string]int64{}}
	var delivered, opened, errs atomic.Int64
	noteErr := func(format string, args ...any) {
		errs.Add(1)
		mu.Lock()
		if len(rep.FirstErrs) < 10 {
			rep.FirstErrs = append(rep.FirstErrs, fmt.Sprintf(format, args...))
		}
		mu.Unlock()
	}
	var stopAt atomic.Pointer[map[string]int64] // set by "stop": each run's last sequence
	held := func(run string, after int64) bool {
		at := stopAt.Load()
		return at != nil && after >= (*at)[run]
	}
	// At most this many streams are being opened at once, so 10,000 tabs opening together
	// do not overflow the listen backlog (the kernel would drop SYNs: seconds of retries).
	dialing := make(chan struct{}, 256)
	var wg, firstOpen sync.WaitGroup
	firstOpen.Add(n)
	for _, f := range spec.Runs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			after, first := f.After, true
			opened1 := func() {
				if first {
					first = false
					firstOpen.Done()
				}
			}
			defer opened1()
			for !held(f.Run, after) {
				dialing <- struct{}{}
				sctx, cancel := context.WithCancel(ctx)
				req, _ := http.NewRequestWithContext(sctx, "GET", fmt.Sprintf("%s/stream/runs/%s/events?after=%d", spec.Base, f.Run, after), nil)
				req.Header.Set("Authorization", "Bearer "+f.JWT)
				res, err := hc.Do(req)
				<-dialing
				opened.Add(1)
				if err != nil || res.StatusCode != 200 {
					body := ""
					if err == nil {
						body = readAll(res.Body)
						res.Body.Close()
					}
					cancel()
					noteErr("follow %s: %v %v %.200s", f.Run, status(res), err, body)
					opened1()
					time.Sleep(time.Second)
					continue
				}
				opened1()
				st := &sseStream{rd: bufio.NewReaderSize(res.Body, 4096)}
				for !held(f.Run, after) {
					id, event, data, err := st.next()
					now := time.Now()
					if err != nil {
						noteErr("follow %s: stream ended after %d: %v", f.Run, after, err)
						break
					}
					if event != "" {
						noteErr("follow %s: event %q %.200s", f.Run, event, data)
						break
					}
					var e queue.Event
					if err := json.Unmarshal([]byte(data), &e); err != nil {
						noteErr("follow %s: %v", f.Run, err)
						break
					}
					if e.Sequence != after+1 || id != strconv.FormatInt(e.Sequence, 10) {
						noteErr("follow %s: sequence %d (id %s) after %d", f.Run, e.Sequence, id, after)
					}
					if e.Type == queue.EventMessageDelta {
						delivered.Add(1)
						mu.Lock()
						rep.WakeNs = append(rep.WakeNs, int64(now.Sub(e.At)))
						mu.Unlock()
					}
					after = e.Sequence
				}
				cancel()
				res.Body.Close()
			}
			mu.Lock()
			rep.Cursors[f.Run] = after
			mu.Unlock()
		}()
	}
	firstOpen.Wait()
	fmt.Printf("%sready\n", childLine)

	// The appends, as the executor makes them: a delta to a random run at the rate.
	rdb := redis.NewClient(&redis.Options{Addr: spec.Redis, ClientName: "load-events", PoolSize: 4})
	defer rdb.Close()
	last := make([]int64, n)
	for i, f := range spec.Runs {
		last[i] = f.Last
	}
	var appended atomic.Int64
	done, stopped := make(chan struct{}), make(chan struct{})
	startEvents := func() {
		go func() {
			defer close(stopped)
			tk := time.NewTicker(time.Second / time.Duration(max(1, spec.EventRate)))
			defer tk.Stop()
			for {
				select {
				case <-done:
					return
				case <-tk.C:
				}
				i := rand.IntN(n)
				last[i]++
				if err := queue.AppendEvent(ctx, rdb, spec.Runs[i].Run, queue.Event{Sequence: last[i], Type: queue.EventMessageDelta,
					Data: json.RawMessage(`{"text":"x"}`), At: time.Now()}); err != nil {
					noteErr("append: %v", err)
				}
				appended.Add(1)
			}
		}()
	}
	in := bufio.NewScanner(os.Stdin)
	started := false
	for in.Scan() {
		cmd := strings.TrimSpace(in.Text())
		if cmd == "events" && !started {
			started = true
			startEvents()
		}
		if cmd == "stop" {
			break
		}
	}
	if started {
		close(done)
		<-stopped
	}
	// One more event for every run: each stream then holds its run's last sequence and
	// its follower closes it.
	at := map[string]int64{}
	for i, f := range spec.Runs {
		at[f.Run] = last[i] + 1
	}
	stopAt.Store(&at)
	for i, f := range spec.Runs {
		last[i]++
		if err := queue.AppendEvent(ctx, rdb, f.Run, queue.Event{Sequence: last[i], Type: queue.EventRunStatus,
			Data: json.RawMessage(`{"status":"running"}`), At: time.Now()}); err != nil {
			noteErr("append: %v", err)
		}
	}
	rep.Last = map[string]int64{}
	for i, f := range spec.Runs {
		rep.Last[f.Run] = last[i]
	}
	rep.Appended = appended.Load()
	wg.Wait()
	rep.Delivered, rep.Polls, rep.Errors = delivered.Load(), opened.Load(), errs.Load()
	out, err := json.Marshal(rep)
	require.NoError(t, err)
	fmt.Printf("%sreport %s\n", childLine, out)
}

func status(res *http.Response) any {
	if res == nil {
		return "-"
	}
	return res.StatusCode
}

// followerChild is the parent's handle on a running child.
type followerChild struct {
	cmd   *exec.Cmd
	start time.Time
	stdin io.WriteCloser
	lines chan string // the child's protocol lines, without the prefix
}

// startFollowerChild starts the child with spec and waits for its "ready".
func startFollowerChild(t *testing.T, spec followerSpec) *followerChild {
	dir := t.TempDir()
	raw, err := json.Marshal(spec)
	require.NoError(t, err)
	file := dir + "/spec.json"
	require.NoError(t, os.WriteFile(file, raw, 0o600))
	cmd := exec.Command(os.Args[0], "-test.run=^TestLoadFollowers$", "-test.count=1", "-test.timeout=30m")
	cmd.Env = append(os.Environ(), "PA_LOAD_FOLLOWERS_SPEC="+file)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	fc := &followerChild{cmd: cmd, start: time.Now(), stdin: stdin, lines: make(chan string, 4)}
	go func() {
		defer close(fc.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 256<<20)
		for sc.Scan() {
			if l, ok := strings.CutPrefix(sc.Text(), childLine); ok {
				fc.lines <- l
			}
		}
	}()
	fc.expect(t, "ready", 5*time.Minute)
	return fc
}

// expect waits for the child's next protocol line, which must start with want.
func (fc *followerChild) expect(t *testing.T, want string, within time.Duration) string {
	select {
	case l, ok := <-fc.lines:
		if !ok {
			_ = fc.cmd.Wait()
			t.Fatalf("followers' child ended before %q: %v", want, fc.cmd.ProcessState)
		}
		require.True(t, strings.HasPrefix(l, want), "followers' child said %.200q, want %q", l, want)
		return strings.TrimPrefix(l, want)
	case <-time.After(within):
		_ = fc.cmd.Process.Kill()
		_ = fc.cmd.Wait()
		t.Fatalf("followers' child did not say %q within %s", want, within)
		return ""
	}
}

// events starts the child's appends.
func (fc *followerChild) events(t *testing.T) {
	_, err := io.WriteString(fc.stdin, "events\n")
	require.NoError(t, err)
}

// stop asks the child to stop appending and following once every follower holds its
// run's last sequence, and returns the child's report once it exited.
func (fc *followerChild) stop(t *testing.T) followerReport {
	_, err := io.WriteString(fc.stdin, "stop\n")
	require.NoError(t, err)
	report := fc.expect(t, "report ", 2*time.Minute)
	_ = fc.stdin.Close()
	require.NoError(t, fc.cmd.Wait())
	var rep followerReport
	require.NoError(t, json.Unmarshal([]byte(report), &rep))
	rep.cpu, rep.wall = fc.cmd.ProcessState.UserTime()+fc.cmd.ProcessState.SystemTime(), time.Since(fc.start)
	return rep
}
