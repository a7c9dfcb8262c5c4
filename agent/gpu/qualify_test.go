package gpu

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/modeltest"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// scriptedDevice is a backend serving the scripted model in-process (httptest): Load
// makes a model "loaded" (its footprint counts in the fake sysfs), Unload drops it.
type scriptedDevice struct {
	mu     sync.Mutex
	models map[string]*modeltest.Backend
	srv    map[string]*httptest.Server
	loaded map[string]bool
	foot   int64
}

func newScriptedDevice(t testing.TB, foot int64, models ...*modeltest.Backend) *scriptedDevice {
	d := &scriptedDevice{models: map[string]*modeltest.Backend{}, srv: map[string]*httptest.Server{}, loaded: map[string]bool{}, foot: foot}
	for _, b := range models {
		s := httptest.NewServer(b)
		t.Cleanup(s.Close)
		d.models[b.Model], d.srv[b.Model] = b, s
	}
	return d
}

func (d *scriptedDevice) Load(_ context.Context, model string) (string, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	s := d.srv[model]
	if s == nil {
		return "", os.ErrNotExist
	}
	d.loaded[model] = true
	return s.URL + "/v1", nil
}

func (d *scriptedDevice) Unload(_ context.Context, model string) error {
	d.mu.Lock()
	defer d.mu.Unlock()
	delete(d.loaded, model)
	return nil
}

func (d *scriptedDevice) Footprint(string) int64 { return d.foot }
func (d *scriptedDevice) Alive(_ context.Context, model string) (bool, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.loaded[model], nil
}
func (d *scriptedDevice) Key() string { return "" }

// load is what the device holds: the loaded models' footprints, the tokens in their KV
// caches and the requests running.
func (d *scriptedDevice) load() (foot, kv, active int64) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for m := range d.loaded {
		foot += d.foot
		kv += d.models[m].KVTokens()
		active += d.models[m].Active()
	}
	return
}

// thermalSysfs is an amdgpu sysfs tree (read through the real AMDSysfs parser) whose
// figures follow the scripted device: VRAM is a base plus the loaded footprint plus
// KVBytes per token held in the KV caches; temperature and power rise with the requests
// running. Heat makes a device that overheats; Leak one whose KV memory does not come
// back after the requests end.
type thermalSysfs struct {
	dev   *scriptedDevice
	root  string
	Total int64
	// KVBytes per KV-cache token.
	KVBytes int64
	// IdleC and HeatC: temperature at rest and added per running request (°C).
	IdleC, HeatC float64
	// IdleW and LoadW: power at rest and added per running request (W).
	IdleW, LoadW float64
	// Leak keeps the KV cache's high-water memory used after requests end.
	Leak atomic.Bool

	mu     sync.Mutex
	kvHigh int64
	seenKV int64         // the most KV-cache tokens a qualification's reading has seen
	read   chan struct{} // closed (and replaced) at each of those readings
}

// managerRead marks the context of the manager's own loops: their readings (status
// telemetry) are not the qualification's.
type managerRead struct{}

// waitSeen waits until a qualification's reading has seen at least n tokens in the KV caches, or ctx ends.
func (f *thermalSysfs) waitSeen(ctx context.Context, n int64) {
	for {
		f.mu.Lock()
		seen, read := f.seenKV, f.read
		f.mu.Unlock()
		if seen >= n {
			return
		}
		select {
		case <-read:
		case <-ctx.Done():
			return
		}
	}
}

func newThermalSysfs(t testing.TB, dev *scriptedDevice) *thermalSysfs {
	return &thermalSysfs{dev: dev, root: t.TempDir(), Total: 24 << 30, KVBytes: 256 << 10, IdleC: 45, HeatC: 8, IdleW: 30, LoadW: 120, read: make(chan struct{})}
}

func (f *thermalSysfs) Read(ctx context.Context) (Reading, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	foot, kv, active := f.dev.load()
	if ctx.Value(managerRead{}) == nil {
		f.seenKV = max(f.seenKV, kv)
		close(f.read)
		f.read = make(chan struct{})
	}
	kvb := kv * f.KVBytes
	if f.Leak.Load() {
		f.kvHigh = max(f.kvHigh, kvb)
		kvb = f.kvHigh
	}
	dev := filepath.Join(f.root, "sys", "class", "drm", "card1", "device")
	hw := filepath.Join(dev, "hwmon", "hwmon3")
	if err := os.MkdirAll(hw, 0o755); err != nil {
		return Reading{}, err
	}
	put := func(dir, name string, v int64) {
		tmp := filepath.Join(dir, "."+name)
		_ = os.WriteFile(tmp, []byte(strconv.FormatInt(v, 10)+"\n"), 0o644)
		_ = os.Rename(tmp, filepath.Join(dir, name))
	}
	put(dev, "mem_info_vram_total", f.Total)
	put(dev, "mem_info_vram_used", min(f.Total, 512<<20+foot+kvb))
	put(dev, "gpu_busy_percent", min(100, active*50))
	put(hw, "temp1_input", int64((f.IdleC+f.HeatC*float64(active))*1000))
	put(hw, "power1_average", int64((f.IdleW+f.LoadW*float64(active))*1e6))
	return AMDSysfs{Root: f.root, Card: "card1"}.Read(ctx)
}

type qualifyRig struct {
	model *modeltest.Backend
	dev   *scriptedDevice
	sys   *thermalSysfs
	m     *Manager
}

func newQualifyRig(t testing.TB, slots int, tune func(b *modeltest.Backend, s *thermalSysfs), name ...string) *qualifyRig {
	b := modeltest.New("q-model")
	// Timings: the backend reports its speed as llama-server does, so the speeds judged are
	// the scripted device's, not those of the host's scheduler (a busy CI host stretches
	// each 1 ms token to several).
	b.ContextLength, b.TokenDelay, b.PromptTokenDelay, b.Timings = 8192, time.Millisecond, 25*time.Microsecond, true
	dev := newScriptedDevice(t, 8<<30, b)
	sys := newThermalSysfs(t, dev)
	// The fill (a prompt longer than any calibration's 320 words) keeps its KV cache until
	// the qualification has read the device holding it: a qualification reads it then, and a test on a
	// busy host does not depend on that reading landing in the few milliseconds the fill's
	// last tokens take.
	b.BeforeRelease = func(ctx context.Context, prompt int) {
		if prompt > 320 {
			sys.waitSeen(ctx, int64(prompt))
		}
	}
	if tune != nil {
		tune(b, sys)
	}
	d := Device{Name: append(name, "")[0], Backend: dev, Telemetry: sys, Slots: slots, MemoryWait: time.Second, PollEvery: 10 * time.Millisecond,
		TelemetryEvery: 50 * time.Millisecond, Budget: func(string) int64 { return 8192 }}
	if tuneDevice != nil {
		tuneDevice(&d)
	}
	m := NewManager(d)
	ctx, cancel := context.WithCancel(context.WithValue(context.Background(), managerRead{}, true))
	require.NoError(t, m.Start(ctx))
	t.Cleanup(func() { cancel(); m.Stop() })
	return &qualifyRig{model: b, dev: dev, sys: sys, m: m}
}

// tuneDevice, when set, changes the next newQualifyRig's device (a test that sets it
// does not run in parallel).
var tuneDevice func(d *Device)

var testLimits = runconfig.QualificationLimits{MaxTemperatureC: 85, MinFreeMemoryBytes: 2 << 30, MinPromptTPS: 1000, MinGenerationTPS: 100}

func qualifyNow(t *testing.T, r *qualifyRig, budget, maxOut int64, lim runconfig.QualificationLimits) runconfig.Qualification {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	q, err := r.m.Qualify(ctx, QualifyRequest{Route: "work", RouteRevision: 1, Model: "q-model", Budget: budget, MaxOutput: maxOut}, lim, nil)
	require.NoError(t, err)
	t.Logf("qualification: %+v", q)
	return q
}

// TestQualifyMeasuresAndPasses: the KV cache is filled to the budget, one generation runs
// at the maximum output, both slots serve at once; the figures come from the backend and
// the fake sysfs tree.
func TestQualifyMeasuresAndPasses(t *testing.T) {
	r := newQualifyRig(t, 2, nil)
	q := qualifyNow(t, r, 4096, 100, testLimits)
	require.True(t, q.Passed, "%v", q.Reasons)
	require.Empty(t, q.Reasons)
	require.Equal(t, int64(8192), q.ContextServed)
	require.InDelta(t, 4096-16-81, q.FilledTokens, 2, "the prompt filled the budget less the output and margin")
	require.Equal(t, 2, q.Concurrency)
	require.Equal(t, int64(24<<30), q.VRAMTotalBytes)
	require.Equal(t, int64(512<<20+8<<30), q.VRAMIdleBytes, "idle: the model loaded, its KV cache empty")
	require.Greater(t, q.VRAMFullBytes, q.VRAMIdleBytes+int64(3000)*r.sys.KVBytes, "at full context the KV cache holds the budget")
	require.LessOrEqual(t, q.VRAMAfterBytes, q.VRAMIdleBytes+64<<20, "the memory came back")
	require.Equal(t, 40000.0, q.PromptTPS, "the backend's own figure: 25 µs a prompt token")
	require.Equal(t, 1000.0, q.GenerationTPS, "the backend's own figure: 1 ms a token")
	require.Greater(t, q.ConcurrentTPS, 0.0)
	require.InDelta(t, 45+8*2, q.PeakTempC, 8.1, "two requests ran at once")
	require.Greater(t, q.PeakPowerW, 30.0)
	require.Equal(t, "work", q.Route)
	require.Equal(t, "q-model", q.Model)
	require.Equal(t, int64(4096), q.ContextBudget)
	require.NotEmpty(t, q.FinishedAt)
	require.NoError(t, runconfig.CheckQualified(routeWith(q, "q-model", 4096)))
}

// TestQualifyReadsTheDeviceAtFullContext: VRAM at full context is read when the fill's
// prompt has been processed, and the device again when every slot streams, whatever the
// sampler's ticks do: here the sampler ticks once an hour (a host too busy to run it), and
// the figures are still those of the loaded device.
func TestQualifyReadsTheDeviceAtFullContext(t *testing.T) {
	tuneDevice = func(d *Device) { d.PollEvery = time.Hour }
	r := newQualifyRig(t, 2, nil)
	tuneDevice = nil
	q := qualifyNow(t, r, 4096, 100, testLimits)
	require.True(t, q.Passed, "%v", q.Reasons)
	require.GreaterOrEqual(t, q.VRAMFullBytes, q.VRAMIdleBytes+int64(3999)*r.sys.KVBytes, "read with the KV cache holding the fill")
	require.GreaterOrEqual(t, q.PeakTempC, 45.0+8, "read with a request running")
	require.GreaterOrEqual(t, q.PeakPowerW, 30.0+120)

	// A device without the headroom at full context fails, however seldom the ticks.
	tuneDevice = func(d *Device) { d.PollEvery = time.Hour }
	r = newQualifyRig(t, 1, func(_ *modeltest.Backend, s *thermalSysfs) { s.KVBytes = 4 << 20 })
	tuneDevice = nil
	q = qualifyNow(t, r, 4096, 100, testLimits)
	require.False(t, q.Passed)
	require.Len(t, q.Reasons, 1, "%v", q.Reasons)
	require.Contains(t, q.Reasons[0], "MiB free at full context; the limit is 2048 MiB")
}

// TestQualificationStepsAreLive (issue 32 item 6): each step is heard as it starts and
// ends, in order, with what it measured: load, fill n of N tokens, generate, slots, thermal.
func TestQualificationStepsAreLive(t *testing.T) {
	r := newQualifyRig(t, 2, nil)
	var steps []string
	q, err := r.m.Qualify(context.Background(), QualifyRequest{Route: "work", RouteRevision: 1, Model: "q-model", Budget: 4096, MaxOutput: 100,
		OnStep: func(step, detail string) { steps = append(steps, step+": "+detail) }}, testLimits, nil)
	require.NoError(t, err)
	require.True(t, q.Passed, "%v", q.Reasons)
	require.Len(t, steps, 8, "%q", steps)
	require.Equal(t, "load: q-model is loaded; reading the context it serves", steps[0])
	require.Regexp(t, `^fill: filling the context: 0 of 3999 tokens$`, steps[1])
	require.Regexp(t, `^fill: filled 39\d\d of 3999 tokens at \d+ tokens/s$`, steps[2])
	require.Equal(t, "generate: generating 100 tokens", steps[3])
	require.Regexp(t, `^generate: generated 100 of 100 tokens at [\d.]+ tokens/s$`, steps[4])
	require.Equal(t, "slots: 2 requests at once, 100 tokens each", steps[5])
	require.Regexp(t, `^slots: 2 requests at once: [\d.]+ tokens/s together$`, steps[6])
	require.Regexp(t, `^thermal: peak \d+ °C, \d+ W; waiting for the memory to come back$`, steps[7])
}

// TestQualifyFailsEachLimit: a device that overheats (the stress is cut at once), one
// whose memory does not come back, too little headroom, too slow, and a budget above the
// served context each fail with the reason.
func TestQualifyFailsEachLimit(t *testing.T) {
	t.Run("overheats", func(t *testing.T) {
		r := newQualifyRig(t, 1, func(_ *modeltest.Backend, s *thermalSysfs) { s.HeatC = 50 })
		t0 := time.Now()
		q := qualifyNow(t, r, 4096, 100000, testLimits) // 100,000 tokens at 1 ms would run 100 s
		require.False(t, q.Passed)
		require.Len(t, q.Reasons, 1, "%v", q.Reasons)
		require.Contains(t, q.Reasons[0], "the device overheated: 95.0 °C, above the limit of 85 °C")
		require.Less(t, time.Since(t0), 10*time.Second, "the stress was cut when the device overheated")
		require.Equal(t, 95.0, q.PeakTempC)
		require.Error(t, runconfig.CheckQualified(routeWith(q, "q-model", 4096)))
	})
	t.Run("memory does not come back", func(t *testing.T) {
		r := newQualifyRig(t, 1, func(_ *modeltest.Backend, s *thermalSysfs) { s.Leak.Store(true) })
		q := qualifyNow(t, r, 4096, 100, testLimits)
		require.False(t, q.Passed)
		require.Len(t, q.Reasons, 1, "%v", q.Reasons)
		require.Contains(t, q.Reasons[0], "the device's memory did not come back after the stress")
	})
	t.Run("headroom", func(t *testing.T) {
		r := newQualifyRig(t, 1, func(_ *modeltest.Backend, s *thermalSysfs) { s.KVBytes = 4 << 20 }) // 4 MiB a token: 16 GiB at 4k
		q := qualifyNow(t, r, 4096, 100, testLimits)
		require.False(t, q.Passed)
		require.Len(t, q.Reasons, 1, "%v", q.Reasons)
		require.Contains(t, q.Reasons[0], "MiB free at full context; the limit is 2048 MiB")
	})
	t.Run("slow", func(t *testing.T) {
		// No timings: the speeds are timed from the chunks as they arrive (a backend that
		// reports none); a busy host only makes them slower.
		r := newQualifyRig(t, 1, func(b *modeltest.Backend, _ *thermalSysfs) {
			b.TokenDelay, b.PromptTokenDelay, b.Timings = 20*time.Millisecond, 2*time.Millisecond, false
		})
		q := qualifyNow(t, r, 600, 20, testLimits)
		require.False(t, q.Passed)
		require.Len(t, q.Reasons, 2, "%v", q.Reasons)
		require.Contains(t, q.Reasons[0], "prompt processing at")
		require.Contains(t, q.Reasons[0], "below the limit of 1000.0")
		require.Contains(t, q.Reasons[1], "generation at")
		require.Less(t, q.GenerationTPS, 100.0)
	})
	t.Run("budget above the served context", func(t *testing.T) {
		r := newQualifyRig(t, 1, nil)
		q := qualifyNow(t, r, 16384, 100, testLimits)
		require.False(t, q.Passed)
		require.Equal(t, []string{"the backend serves 8192 tokens of context per request (capped by the model's training context of 8192); the route's budget is 16384"}, q.Reasons)
		require.Zero(t, q.FilledTokens, "no stress on a context that cannot hold the budget")
	})
	t.Run("no telemetry with a memory limit", func(t *testing.T) {
		b := modeltest.New("q-model")
		b.TokenDelay, b.Timings = time.Millisecond, true
		dev := newScriptedDevice(t, 8<<30, b)
		m := startManager(t, Device{Backend: dev})
		q, err := m.Qualify(context.Background(), QualifyRequest{Route: "work", Model: "q-model", Budget: 2048, MaxOutput: 50}, testLimits, nil)
		require.NoError(t, err)
		require.False(t, q.Passed)
		require.Equal(t, []string{"free memory cannot be measured: the device reports no memory figures (a headroom of 2048 MiB is required)"}, q.Reasons)
	})
}

// TestQualifyQueuesLikeAJob: a qualification waits behind a user's grant, saying why,
// and holds the whole device while it runs: a user's request then waits, told that a GPU
// qualification holds the device.
func TestQualifyQueuesLikeAJob(t *testing.T) {
	r := newQualifyRig(t, 2, func(b *modeltest.Backend, _ *thermalSysfs) { b.TokenDelay = 3 * time.Millisecond })
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	user, err := r.m.AcquireFor(ctx, "run-user-0001", "q-model", nil)
	require.NoError(t, err)
	calls := r.model.Calls() // the readiness check's completion

	waits := make(chan string, 16)
	res := make(chan runconfig.Qualification, 1)
	go func() {
		q, err := r.m.Qualify(ctx, QualifyRequest{Route: "work", Model: "q-model", Budget: 2048, MaxOutput: 150}, runconfig.QualificationLimits{}, func(pos int, reason string) {
			waits <- strconv.Itoa(pos) + ": " + reason
		})
		if err != nil {
			t.Error(err)
		}
		res <- q
	}()
	select {
	case w := <-waits:
		require.Contains(t, w, "1: the device is held by run run-user (q-model, running for under a minute)")
	case <-ctx.Done():
		t.Fatal("the qualification never said why it waits")
	}
	require.Never(t, func() bool { return r.model.Calls() > calls }, 200*time.Millisecond, 10*time.Millisecond, "no stress while a user's job holds the device (a free slot is not enough)")

	user.Release()
	require.Eventually(t, func() bool { return r.model.Active() > 0 }, 10*time.Second, 5*time.Millisecond, "the qualification runs once the device is free")
	other := make(chan string, 16)
	granted := make(chan *Grant, 1)
	go func() {
		g, err := r.m.AcquireFor(ctx, "run-other-0002", "q-model", func(pos int, reason string) { other <- reason })
		if err == nil {
			granted <- g
		}
	}()
	select {
	case why := <-other:
		require.Contains(t, why, "the device is held by a GPU qualification (q-model")
	case <-ctx.Done():
		t.Fatal("a user's request did not wait for the qualification")
	}
	q := <-res
	require.True(t, q.Passed, "%v", q.Reasons)
	require.Greater(t, q.WaitedSeconds, 0.1)
	select {
	case g := <-granted:
		g.Release()
	case <-ctx.Done():
		t.Fatal("the user's request was not granted after the qualification")
	}
}

// routeWith is a route revision carrying q, serving model at budget.
func routeWith(q runconfig.Qualification, model string, budget int64) *schema.ModelRoute {
	b, _ := json.Marshal(q)
	s := string(b)
	return &schema.ModelRoute{RouteID: q.Route, Revision: 2, Device: q.Device, BackendModel: model, ContextBudget: budget, Qualification: &s}
}

// TestDecideExclusive: an exclusive waiter (a qualification) is granted only with no live
// grant, alone, and nothing queued after it goes first; while it holds the device nothing
// else is granted.
func TestDecideExclusive(t *testing.T) {
	now := time.Now()
	base := State{Phase: PhaseReady, Loaded: "m", Slots: 4, Now: now, MaxExtraWait: 10 * time.Minute}
	ws := []Waiter{{ID: "q", Model: "m", Exclusive: true, Since: now}, {ID: "u", Model: "m", Since: now}}

	s := base
	s.Active, s.Waiting = 1, ws
	s.Holders = []Holder{{Run: "run-abcdefgh", Model: "m", Since: now}}
	d := Decide(s)
	require.Equal(t, ActWait, d.Kind, "a free slot is not enough, and the user behind it waits too")
	require.Contains(t, d.Reason, "held by run run-abcd")

	s = base
	s.Waiting = ws
	d = Decide(s)
	require.Equal(t, ActGrant, d.Kind)
	require.Equal(t, []string{"q"}, d.Grant, "the whole device, alone")

	s = base
	s.Active, s.Exclusive, s.Waiting = 1, true, ws[1:]
	s.Holders = []Holder{{Model: "m", Since: now, Status: StatusQualifying}}
	d = Decide(s)
	require.Equal(t, ActWait, d.Kind)
	require.Equal(t, "the device is held by a GPU qualification (m, running for under a minute)", d.Reason)

	s = base
	s.Waiting = []Waiter{{ID: "u", Model: "m", Since: now}, {ID: "q", Model: "m", Exclusive: true, Since: now}, {ID: "v", Model: "m", Since: now}}
	d = Decide(s)
	require.Equal(t, []string{"u"}, d.Grant, "users ahead of it go first; nobody behind it")
}
