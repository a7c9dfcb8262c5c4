//go:build load

package load_test

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/longpoll"
	"privateassistant/queue"
)

// The stream service runs as its own process, the real binary (stream/cmd/pa-stream)
// built here and started with its environment, as its systemd unit starts it: its memory
// and CPU are measured alone, from /proc and its own /metrics.

// streamKey is the stream service's emulator key: read scopes only.
const streamKey = "stream-key-load-0123456789"

// streamPool is stream.New's own Redis client (owner checks): its pool of 8 and go-redis's
// pipeline pool, on by default. The hub's readers and its followers' pool come on top:
// the stream process's Redis connections whatever its followers.
const streamPool = 8 + redis.DefaultPipelinePoolSize

func streamBound() int { return streamPool + longpoll.DefaultReaders + longpoll.DefaultFollowPool }

// streamProc is a running pa-stream.
type streamProc struct {
	cmd    *exec.Cmd
	URL    string // public origin
	ops    string // ops origin
	log    string // its stderr
	exited chan error
}

// raiseFiles raises this process's open-file limit to at least want (as root, the hard
// limit too) for 10,000 sockets on each side, and sets it explicitly so that the children
// (the stream process, the followers' child) inherit it: Go restores the limit it started
// with in the processes it starts unless the program set one itself.
func raiseFiles(t *testing.T, want uint64) uint64 {
	var rl syscall.Rlimit
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl))
	up := syscall.Rlimit{Cur: max(want, rl.Cur), Max: max(want, rl.Cur, rl.Max)}
	if syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up) != nil { // not allowed to raise the hard limit
		up = syscall.Rlimit{Cur: rl.Max, Max: rl.Max}
		require.NoError(t, syscall.Setrlimit(syscall.RLIMIT_NOFILE, &up))
	}
	require.NoError(t, syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl))
	return rl.Cur
}

func freeAddr(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// streamUser gives the test Redis the shipped ACL user pa-stream (deploy/redis-users.acl)
// with a password, so the service runs with exactly its production rights and CLIENT
// LIST tells its connections apart (user=pa-stream).
func streamUser(t *testing.T, ctx context.Context, rdb *redis.Client) string {
	raw, err := os.ReadFile(filepath.Join("..", "..", "deploy", "redis-users.acl"))
	require.NoError(t, err)
	const pw = "stream-load-password-0123456789"
	for _, l := range strings.Split(string(raw), "\n") {
		if rules, ok := strings.CutPrefix(l, "user pa-stream "); ok {
			args := []any{"ACL", "SETUSER", "pa-stream"}
			for _, r := range strings.Fields(rules) {
				if strings.HasPrefix(r, "#") {
					r = ">" + pw
				}
				args = append(args, r)
			}
			require.NoError(t, rdb.Do(ctx, args...).Err())
			return pw
		}
	}
	t.Fatal("deploy/redis-users.acl has no user pa-stream")
	return ""
}

// startStream builds pa-stream and starts it on env's emulator and Redis.
func startStream(t *testing.T, env *functionstest.Env, rdb *redis.Client, extra ...string) *streamProc {
	dir := t.TempDir()
	bin := filepath.Join(dir, "pa-stream")
	build := exec.Command("go", "build", "-o", bin, "./stream/cmd/pa-stream")
	build.Dir = filepath.Join("..", "..")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "%s", out)
	pw := streamUser(t, context.Background(), rdb)
	addr, ops := freeAddr(t), freeAddr(t)
	cmd := exec.Command(bin)
	cmd.Dir = dir // no .env there
	cmd.Env = append(os.Environ(), "PA_STREAM_ADDR="+addr, "PA_STREAM_OPS_ADDR="+ops,
		"PA_STREAM_APPWRITE_ENDPOINT="+env.TS.URL, "PA_STREAM_APPWRITE_PROJECT_ID="+env.TS.Project,
		"PA_STREAM_DATABASE_ID="+env.Model.DatabaseID, "PA_STREAM_APPWRITE_KEY="+streamKey,
		"PA_REDIS_ADDR="+env.Redis.Addr, "PA_REDIS_USERNAME=pa-stream", "PA_REDIS_PASSWORD="+pw)
	cmd.Env = append(cmd.Env, extra...)
	logf, err := os.Create(filepath.Join(dir, "stream.log"))
	require.NoError(t, err)
	defer logf.Close()
	cmd.Stdout, cmd.Stderr = logf, logf
	require.NoError(t, cmd.Start())
	p := &streamProc{cmd: cmd, URL: "http://" + addr, ops: "http://" + ops, log: logf.Name(), exited: make(chan error, 1)}
	go func() { p.exited <- cmd.Wait() }()
	t.Cleanup(func() { p.stop(t) })
	for deadline := time.Now().Add(30 * time.Second); ; {
		if res, err := http.Get(p.ops + "/readyz"); err == nil {
			res.Body.Close()
			if res.StatusCode == 200 {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("pa-stream not ready within 30 s: %s", p.tail())
		}
		time.Sleep(50 * time.Millisecond)
	}
	return p
}

func (p *streamProc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 2000 {
		b = b[len(b)-2000:]
	}
	return string(b)
}

// stop sends SIGTERM and waits for the exit (0 expected); idempotent.
func (p *streamProc) stop(t *testing.T) {
	if p.cmd.ProcessState != nil {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-p.exited:
		if err != nil {
			t.Errorf("pa-stream exited: %v: %s", err, p.tail())
		}
	case <-time.After(30 * time.Second):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("pa-stream did not stop on SIGTERM within 30 s")
	}
}

// metrics reads the named series of the process's /metrics (no labels).
func (p *streamProc) metrics(names ...string) (map[string]float64, error) {
	res, err := http.Get(p.ops + "/metrics")
	if err != nil {
		return nil, err
	}
	defer res.Body.Close()
	want := map[string]bool{}
	for _, n := range names {
		want[n] = true
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(res.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		name, v, ok := strings.Cut(sc.Text(), " ")
		if ok && want[name] {
			if f, err := strconv.ParseFloat(strings.TrimSpace(v), 64); err == nil {
				out[name] = f
			}
		}
	}
	return out, sc.Err()
}

func (p *streamProc) follows() int {
	m, err := p.metrics("pa_stream_followers")
	if err != nil {
		return -1
	}
	return int(m["pa_stream_followers"])
}

// waitFollows waits until the process counts n open streams.
func (p *streamProc) waitFollows(t *testing.T, n int, within time.Duration) {
	deadline := time.Now().Add(within)
	for {
		got := p.follows()
		if got == n {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("pa-stream counts %d open streams, want %d, after %s", got, n, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// cpu is the process's CPU time (user + system) from /proc.
func (p *streamProc) cpu() time.Duration {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	s := string(b)
	f := strings.Fields(s[strings.LastIndexByte(s, ')')+2:]) // fields from 3 on
	if len(f) < 13 {
		return 0
	}
	u, _ := strconv.ParseInt(f[11], 10, 64)
	k, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(u+k) * time.Second / 100 // USER_HZ
}

// rss is the process's resident set from /proc, bytes.
func (p *streamProc) rss() float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.cmd.Process.Pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, "VmRSS:"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

// watchMem samples the process's Go heap (heap_alloc: its minimum over a window is close to
// the live heap, right after a collection), its goroutines' stacks, goroutines and RSS
// until stopped.
type memSample struct{ heapMin, stack, goroutines, rss float64 }

func (p *streamProc) watchMem(stop <-chan struct{}) <-chan memSample {
	out := make(chan memSample, 1)
	go func() {
		s := memSample{heapMin: -1}
		tk := time.NewTicker(100 * time.Millisecond)
		defer tk.Stop()
		for {
			if m, err := p.metrics("go_memstats_heap_alloc_bytes", "go_memstats_stack_inuse_bytes", "go_goroutines"); err == nil {
				if h := m["go_memstats_heap_alloc_bytes"]; s.heapMin < 0 || h < s.heapMin {
					s.heapMin = h
				}
				s.goroutines = max(s.goroutines, m["go_goroutines"])
				s.stack = max(s.stack, m["go_memstats_stack_inuse_bytes"])
			}
			s.rss = max(s.rss, p.rss())
			select {
			case <-stop:
				out <- s
				return
			case <-tk.C:
			}
		}
	}()
	return out
}

// sampleMem samples the process for d.
func (p *streamProc) sampleMem(d time.Duration) memSample {
	stop := make(chan struct{})
	c := p.watchMem(stop)
	time.Sleep(d)
	close(stop)
	return <-c
}

// readAll reads a non-stream answer (a refusal).
func readAll(r io.Reader) string { b, _ := io.ReadAll(io.LimitReader(r, 4096)); return string(b) }

// perUserCap opens 20 streams of one user at once on the stream process and keeps the
// admitted ones open until every answer is in: 16 (PA_STREAM_PER_USER) admitted, 4 × 429.
func perUserCap(t *testing.T, base string, runs []string, jwt string) (ok, refused, other int, retryAfter string) {
	type answer struct {
		code  int
		retry string
	}
	answers := make(chan answer, len(runs))
	release := make(chan struct{})
	done := make(chan struct{}, len(runs))
	hc := &http.Client{Transport: &http.Transport{}}
	defer hc.CloseIdleConnections()
	for _, run := range runs {
		go func() {
			defer func() { done <- struct{}{} }()
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			defer cancel()
			req, _ := http.NewRequestWithContext(ctx, "GET", base+"/stream/runs/"+run+"/events?after=0", nil)
			req.Header.Set("Authorization", "Bearer "+jwt)
			res, err := hc.Do(req)
			if err != nil {
				answers <- answer{code: 0}
				return
			}
			defer res.Body.Close()
			answers <- answer{code: res.StatusCode, retry: res.Header.Get("Retry-After")}
			if res.StatusCode == 200 {
				select {
				case <-release:
				case <-ctx.Done():
				}
			} else {
				readAll(res.Body)
			}
		}()
	}
	for range runs {
		a := <-answers
		switch a.code {
		case 200:
			ok++
		case 429:
			refused++
			retryAfter = a.retry
		default:
			other++
		}
	}
	close(release)
	for range runs {
		<-done
	}
	return
}

// memGoal says whether a figure per follower, KiB, is within the 32 KiB goal.
func memGoal(kib float64) string {
	if kib <= 32 {
		return "goal ≤ 32 KiB: met"
	}
	return "goal ≤ 32 KiB: MISSED"
}

// ownRun writes the owner check's cached facts for a run the load follows (as admission
// leaves them): "<owner> <conversation>" and the conversation's owner, so the stream
// service's check (service.CheckRunOwner) passes without an Appwrite record.
func ownRun(ctx context.Context, rdb redis.Cmdable, run, owner string) error {
	conv := "c" + run
	if err := rdb.Set(ctx, queue.RunOwnerKey(run), owner+" "+conv, time.Hour).Err(); err != nil {
		return err
	}
	return rdb.Set(ctx, queue.ConvOwnerKey(conv), owner, time.Hour).Err()
}
