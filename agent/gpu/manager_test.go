package gpu

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/immich"
	"privateassistant/agent/immich/immichtest"
)

var (
	modelBinOnce sync.Once
	modelBin     string
	modelBinDir  string // removed when the tests end (TestMain)
	modelBinErr  error
)

// scriptedModel builds the scripted backend once: the manager loads it as a real child.
func scriptedModel(t testing.TB) string {
	modelBinOnce.Do(func() {
		dir, err := os.MkdirTemp("", "pa-scripted-model-")
		if err != nil {
			modelBinErr = err
			return
		}
		modelBinDir = dir
		modelBin = filepath.Join(dir, "scripted-model")
		out, err := exec.Command("go", "build", "-o", modelBin, "privateassistant/modeltest/cmd/scripted-model").CombinedOutput()
		if err != nil {
			modelBinErr = fmt.Errorf("%v: %s", err, out)
		}
	})
	require.NoError(t, modelBinErr)
	return modelBin
}

const testKey = "upstream-secret"

func processBackend(t testing.TB, loadTime time.Duration) *ProcessBackend {
	bin := scriptedModel(t)
	b := &ProcessBackend{
		Command: func(model string, port int) []string {
			return []string{bin, "-addr", "127.0.0.1:" + strconv.Itoa(port), "-model", model,
				"-token-delay", "1ms", "-load-time", loadTime.String(), "-context", "32768"}
		},
		Env:         []string{"GATEWAY_API_KEY=" + testKey},
		Footprints:  map[string]int64{"small": 6 << 30, "large": 14 << 30, "crashy": 4 << 30},
		APIKey:      testKey,
		StopTimeout: 3 * time.Second,
	}
	t.Cleanup(func() {
		for _, m := range b.Running() {
			_ = b.Unload(context.Background(), m)
		}
	})
	return b
}

// fakeSysfs is an amdgpu sysfs tree whose VRAM figure follows the backend's running
// processes (plus Extra, memory something else holds): the manager reads it through the
// real AMDSysfs parser.
type fakeSysfs struct {
	t     testing.TB
	root  string
	b     *ProcessBackend
	Extra atomic.Int64
	// Held keeps the last VRAM figure: the memory stays used whatever stops (a leaked
	// allocation, another process on the card). Set it with Hold, which first writes the
	// figure of what runs now; Held.Store(false) lets the figure follow the backend again.
	Held atomic.Bool
	// mu serializes writes: the telemetry loop and a swap read concurrently, and a read
	// must never see a half-written file (it would fail, and a failed reading before an
	// unload makes the device unknown).
	mu sync.Mutex
}

func newFakeSysfs(t testing.TB, b *ProcessBackend) *fakeSysfs {
	f := &fakeSysfs{t: t, root: t.TempDir(), b: b}
	f.mu.Lock()
	f.write()
	f.mu.Unlock()
	return f
}

func (f *fakeSysfs) write() {
	if f.Held.Load() {
		return
	}
	used := int64(512<<20) + f.Extra.Load()
	for _, m := range f.b.Running() {
		used += f.b.Footprints[m]
	}
	dev := filepath.Join(f.root, "sys", "class", "drm", "card1", "device")
	_ = os.MkdirAll(dev, 0o755)
	_ = os.WriteFile(filepath.Join(dev, "mem_info_vram_total"), []byte(strconv.FormatInt(24<<30, 10)+"\n"), 0o644)
	tmp := filepath.Join(dev, ".used")
	_ = os.WriteFile(tmp, []byte(strconv.FormatInt(used, 10)+"\n"), 0o644)
	_ = os.Rename(tmp, filepath.Join(dev, "mem_info_vram_used"))
}

// Hold keeps the memory of what runs now used whatever stops. It writes the current
// figure first: the telemetry loop may not have read since the last load finished (the
// load path takes no reading after it), and freezing the figure from before that load
// would make the unload's "before" reading miss the model, so the memory could never be
// seen back (TestUnknownRecoversByItself hung that way once under CI load).
func (f *fakeSysfs) Hold() {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.write()
	f.Held.Store(true)
}

func (f *fakeSysfs) Read(ctx context.Context) (Reading, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.write()
	return AMDSysfs{Root: f.root, Card: "card1"}.Read(ctx)
}

func startManager(t testing.TB, d Device) *Manager {
	if d.Name == "" {
		d.Name = "rx7900"
	}
	if d.PollEvery == 0 {
		d.PollEvery = 20 * time.Millisecond
	}
	m := NewManager(d)
	ctx, cancel := context.WithCancel(context.Background())
	require.NoError(t, m.Start(ctx))
	t.Cleanup(func() { cancel(); m.Stop() })
	return m
}

// complete asks the granted endpoint for a completion and returns the model that answered.
func complete(ctx context.Context, endpoint, model string) (string, error) {
	body, _ := json.Marshal(map[string]any{"model": model, "max_tokens": 4,
		"messages": []any{map[string]any{"role": "user", "content": "hello there"}}})
	req, _ := http.NewRequestWithContext(ctx, "POST", endpoint+"/chat/completions", bytes.NewReader(body))
	req.Header.Set("Authorization", "Bearer "+testKey)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("completion answered %d", resp.StatusCode)
	}
	var out struct{ Model string }
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return "", err
	}
	return out.Model, nil
}

// TestSwapUnderLoad: requests for two models that do not fit together arrive at random;
// every one is served by the model it asked for, two models never run at once, and the
// memory is verified back before the other loads.
func TestSwapUnderLoad(t *testing.T) {
	b := processBackend(t, 50*time.Millisecond)
	sys := newFakeSysfs(t, b)
	m := startManager(t, Device{Backend: b, Telemetry: sys, Slots: 4, DrainTimeout: 5 * time.Second})

	// The invariant is watched from outside as well: never two model processes at once.
	var overlap atomic.Int32
	stop := make(chan struct{})
	var mon sync.WaitGroup
	mon.Add(1)
	go func() {
		defer mon.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
				if len(b.Running()) > 1 {
					overlap.Add(1)
				}
			}
		}
	}()

	const n = 1000
	var live [2]atomic.Int32
	var wrong, served, crossed atomic.Int32
	var wg sync.WaitGroup
	sem := make(chan struct{}, 24)
	models := []string{"small", "large"}
	rng := rand.New(rand.NewSource(7))
	picks := make([]int, n)
	for i := range picks {
		picks[i] = rng.Intn(2)
		if i%40 < 30 { // bursts: mostly one model, then the other
			picks[i] = (i / 40) % 2
		}
	}
	for i := 0; i < n; i++ {
		wg.Add(1)
		sem <- struct{}{}
		go func(k int) {
			defer wg.Done()
			defer func() { <-sem }()
			model := models[k]
			ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
			defer cancel()
			g, err := m.Acquire(ctx, model, nil)
			if err != nil {
				t.Errorf("acquire %s: %v", model, err)
				return
			}
			defer g.Release()
			live[k].Add(1)
			defer live[k].Add(-1)
			if live[1-k].Load() != 0 {
				crossed.Add(1)
			}
			sv, err := m.Serve("", model, g.Generation)
			if err != nil || sv.Generation != g.Generation || sv.Endpoint != g.Endpoint {
				t.Errorf("grant for %s not covering: err=%v gen=%d/%d", model, err, sv.Generation, g.Generation)
				return
			}
			got, err := complete(ctx, g.Endpoint, model)
			if err != nil {
				t.Errorf("complete %s: %v", model, err)
				return
			}
			if got != model {
				wrong.Add(1)
			}
			served.Add(1)
		}(picks[i])
	}
	waited := make(chan struct{})
	go func() { wg.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(90 * time.Second):
		t.Fatalf("requests stuck; device %+v", m.Snapshot())
	}
	close(stop)
	mon.Wait()
	require.EqualValues(t, n, served.Load())
	require.Zero(t, wrong.Load(), "a request was served by the wrong model")
	require.Zero(t, crossed.Load(), "grants for two models were live at once")
	require.Zero(t, overlap.Load(), "two model processes ran at once")
	s := m.Snapshot()
	require.Equal(t, PhaseReady, s.Phase)
	require.Zero(t, s.Active)
	t.Logf("served %d requests; final generation %d", n, s.Generation)
}

// TestDrainBoundCancelsGrants: a grant that outlives the drain bound is cancelled, its
// generation goes stale, and the other model loads.
func TestDrainBoundCancelsGrants(t *testing.T) {
	b := processBackend(t, 0)
	m := startManager(t, Device{Backend: b, Telemetry: newFakeSysfs(t, b), DrainTimeout: 300 * time.Millisecond})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, err := m.Acquire(ctx, "small", nil)
	require.NoError(t, err)
	_, err = m.Serve("", "small", a.Generation)
	require.NoError(t, err)

	var reasons sync.Map
	start := time.Now()
	got := make(chan *Grant, 1)
	go func() {
		g, err := m.Acquire(ctx, "large", func(pos int, reason string) { reasons.Store(reason, pos) })
		require.NoError(t, err)
		got <- g
	}()
	select {
	case <-a.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the lingering grant was never cancelled")
	}
	require.GreaterOrEqual(t, time.Since(start), 300*time.Millisecond, "cancelled before the drain bound")
	_, err = m.Serve("", "small", a.Generation)
	require.ErrorIs(t, err, ErrStaleGeneration, "a cancelled grant's generation is stale")
	g := <-got
	require.Equal(t, "large", g.Model)
	require.Equal(t, []string{"large"}, b.Running())
	_, err = m.Serve("", "small", 0)
	require.ErrorIs(t, err, ErrNotLeased, "the old model is not covered any more")
	n := 0
	reasons.Range(func(k, v any) bool { n++; return true })
	require.NotZero(t, n, "the waiter was told why it waits")
	a.Release() // late release of a cancelled grant is harmless
	g.Release()
}

// TestCrashCancelsGrants: a model server that dies under a grant cancels it; the next
// request reloads.
func TestCrashCancelsGrants(t *testing.T) {
	b := processBackend(t, 0)
	m := startManager(t, Device{Backend: b})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := m.Acquire(ctx, "crashy", nil)
	require.NoError(t, err)
	b.mu.Lock()
	pid := b.procs["crashy"].cmd.Process.Pid
	b.mu.Unlock()
	require.NoError(t, exec.Command("kill", "-9", strconv.Itoa(pid)).Run())
	select {
	case <-g.Done():
	case <-time.After(5 * time.Second):
		t.Fatal("the crash did not cancel the grant")
	}
	require.Contains(t, m.Snapshot().Reason, "crashed")
	g.Release()
	g2, err := m.Acquire(ctx, "crashy", nil)
	require.NoError(t, err)
	require.Greater(t, g2.Generation, g.Generation)
	got, err := complete(ctx, g2.Endpoint, "crashy")
	require.NoError(t, err)
	require.Equal(t, "crashy", got)
	g2.Release()
}

// TestMemoryNotBackHoldsLoads: when the memory does not come back after an unload the
// device turns unknown and loads nothing until confirmed.
func TestMemoryNotBackHoldsLoads(t *testing.T) {
	b := processBackend(t, 0)
	sys := newFakeSysfs(t, b)
	m := startManager(t, Device{Backend: b, Telemetry: sys, MemoryWait: 300 * time.Millisecond, DrainTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := m.Acquire(ctx, "small", nil)
	require.NoError(t, err)
	g.Release()
	sys.Hold() // the memory stays used after the unload
	got := make(chan error, 1)
	var lastReason atomic.Value
	go func() {
		g, err := m.Acquire(ctx, "large", func(_ int, r string) { lastReason.Store(r) })
		if err == nil {
			g.Release()
		}
		got <- err
	}()
	require.Eventually(t, func() bool { return m.Snapshot().Phase == PhaseUnknown }, 10*time.Second, 20*time.Millisecond)
	require.Empty(t, b.Running(), "the old model was unloaded")
	require.Never(t, func() bool { return len(b.Running()) > 0 }, 200*time.Millisecond, 5*time.Millisecond,
		"nothing loads on an unknown device")
	require.Eventually(t, func() bool { r, _ := lastReason.Load().(string); return r != "" }, 5*time.Second, 10*time.Millisecond)
	select {
	case err := <-got:
		t.Fatalf("the waiter was served on an unknown device: %v", err)
	default:
	}
	sys.Held.Store(false)
	m.Confirm()
	require.NoError(t, <-got)
}

// TestLoadFailureReachesWaiters: a server that exits at once fails its waiters with a
// clear error; the device stays usable.
func TestLoadFailureReachesWaiters(t *testing.T) {
	b := processBackend(t, 0)
	inner := b.Command
	b.Command = func(model string, port int) []string {
		if model == "broken" {
			return []string{"sh", "-c", "echo no such model >&2; exit 3"}
		}
		return inner(model, port)
	}
	m := startManager(t, Device{Backend: b})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := m.Acquire(ctx, "broken", nil)
	require.ErrorIs(t, err, ErrLoadFailed)
	require.ErrorContains(t, err, "exited before it was healthy")
	g, err := m.Acquire(ctx, "small", nil)
	require.NoError(t, err)
	g.Release()
}

// TestContextBudgetChecked: a backend serving less context than the route's budget is
// refused at load.
func TestContextBudgetChecked(t *testing.T) {
	b := processBackend(t, 0)
	m := startManager(t, Device{Backend: b, Budget: func(string) int64 { return 65536 }})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := m.Acquire(ctx, "small", nil)
	require.ErrorIs(t, err, ErrLoadFailed)
	require.ErrorContains(t, err, "32768 tokens of context")
	require.Empty(t, b.Running(), "the refused model was unloaded")
}

type recordingPauser struct {
	mu    sync.Mutex
	calls []string
	b     *ProcessBackend
}

func (p *recordingPauser) Pause(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf("pause(running=%d)", len(p.b.Running())))
	return nil
}

func (p *recordingPauser) Resume(context.Context) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.calls = append(p.calls, fmt.Sprintf("resume(running=%d)", len(p.b.Running())))
	return nil
}

func (p *recordingPauser) Calls() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	return append([]string(nil), p.calls...)
}

// TestTenantPausedAroundLoads: Immich is paused before a model loads and resumed only
// once the device is free again with nobody waiting.
func TestTenantPausedAroundLoads(t *testing.T) {
	b := processBackend(t, 0)
	p := &recordingPauser{b: b}
	m := startManager(t, Device{Backend: b, Telemetry: newFakeSysfs(t, b), Immich: p, DrainTimeout: time.Second})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	g, err := m.Acquire(ctx, "small", nil)
	require.NoError(t, err)
	require.Equal(t, []string{"pause(running=0)"}, p.Calls())
	g.Release()
	g, err = m.Acquire(ctx, "large", nil)
	require.NoError(t, err)
	g.Release()
	require.Equal(t, []string{"pause(running=0)"}, p.Calls(), "a swap keeps the tenant paused")
}

// TestImmichUnreachableRefusesSharedDevice: with Immich down the shared device is not
// taken (the load fails clearly and nothing starts).
func TestImmichUnreachableRefusesSharedDevice(t *testing.T) {
	b := processBackend(t, 0)
	im := immichtest.Start(t, "admin-key", false)
	url := im.URL
	im.Close()
	m := startManager(t, Device{Backend: b, Immich: &immich.Client{URL: url, APIKey: "admin-key", Agent: "t"}})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	_, err := m.Acquire(ctx, "small", nil)
	require.ErrorIs(t, err, ErrLoadFailed)
	require.ErrorContains(t, err, "Immich could not be paused")
	require.Empty(t, b.Running())
}
