package daemon_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/daemon"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/readiness"
	"privateassistant/stacktest"
	"privateassistant/stream"
)

// stoppable serves h on a fixed loopback address that can be stopped and served again.
type stoppable struct {
	t    *testing.T
	h    http.Handler
	addr string
	srv  *httptest.Server
}

func newStoppable(t *testing.T, h http.Handler) *stoppable {
	s := &stoppable{t: t, h: h}
	s.srv = httptest.NewServer(h)
	s.addr = s.srv.Listener.Addr().String()
	t.Cleanup(func() { s.srv.Close() })
	return s
}

func (s *stoppable) stop() { s.srv.CloseClientConnections(); s.srv.Close() }

func (s *stoppable) start() {
	srv := httptest.NewUnstartedServer(s.h)
	require.Eventually(s.t, func() bool {
		l, err := net.Listen("tcp", s.addr)
		if err != nil {
			return false
		}
		srv.Listener = l
		return true
	}, 5*time.Second, 20*time.Millisecond)
	srv.Start()
	s.srv = srv
	s.t.Cleanup(srv.Close)
}

// TestReadinessNamesEachBrokenComponent (issue 36, item 1): before any run every
// component is listed (the model server idle); then every component kind the agent
// reports is broken in turn (Appwrite answers 500, then is at a dead port, the stream service stops, Hermes is
// killed, the gateway stops, the device's model server stops, its telemetry turns
// unreadable in a fake sysfs tree, Redis stops, a queue's consumer stops so its heartbeat
// ages out); each time /readyz names exactly that one failing, in JSON and in words, every
// other is ready (or, while Redis is down, the ones read through it are unknown),
// pa_component_ready says the same, and so does the admins' /api/system (but for Redis,
// through which it reads the agent's report).
func TestReadinessNamesEachBrokenComponent(t *testing.T) {
	const streamKey = "stream-key-ready-0123456789"
	env := stacktest.New(t, stacktest.Options{Keys: map[string][]string{streamKey: stream.Scopes}})

	// Appwrite as the agent sees it: a front that answers 500 on demand.
	var appwrite500 atomic.Bool
	aw, err := url.Parse(env.TS.URL)
	require.NoError(t, err)
	proxy := &httputil.ReverseProxy{Rewrite: func(r *httputil.ProxyRequest) {
		r.SetURL(&url.URL{Scheme: aw.Scheme, Host: aw.Host})
		r.Out.Host = aw.Host
	}}
	front := newStoppable(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if appwrite500.Load() {
			http.Error(w, `{"message":"Server Error","code":500,"type":"general_unknown"}`, http.StatusInternalServerError)
			return
		}
		proxy.ServeHTTP(w, r)
	}))
	env.Settings.AppwriteEndpoint = "http://" + front.addr + strings.TrimPrefix(env.TS.URL, aw.Scheme+"://"+aw.Host)

	// The managed device's model server and its telemetry (a fake amdgpu sysfs tree).
	model := modeltest.New("demo-model")
	ms := newStoppable(t, model)
	sysfs := t.TempDir()
	dev := filepath.Join(sysfs, "sys", "class", "drm", "card0", "device")
	require.NoError(t, os.MkdirAll(dev, 0o755))
	writeVRAM := func() {
		require.NoError(t, os.WriteFile(filepath.Join(dev, "mem_info_vram_used"), []byte("1073741824\n"), 0o644))
		require.NoError(t, os.WriteFile(filepath.Join(dev, "mem_info_vram_total"), []byte("17179869184\n"), 0o644))
	}
	writeVRAM()
	cfg := filepath.Join(t.TempDir(), "gpu.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"devices": [{"name": "arc", "slots": 4,
		"backend": {"kind": "upstream", "url": "http://`+ms.addr+`/v1"},
		"telemetry": {"kind": "amd-sysfs", "card": "card0", "root": "`+sysfs+`"},
		"models": {"demo-model": {"context": 65536}}}]}`), 0o600))
	env.Settings.GPUConfig, env.Settings.GatewayAddr, env.Settings.GatewayKey = cfg, "127.0.0.1:0", "gateway-key-0123456789"
	env.Settings.StreamCheck = true

	// The stream service, as pa-stream runs it (Start, Stop), beating every 100 ms.
	startStream := func() *stream.Service {
		ss, err := stream.New(stream.Config{Endpoint: env.TS.URL, ProjectID: env.TS.Project, DatabaseID: env.Cfg.DatabaseID, APIKey: streamKey,
			RedisAddr: env.Redis.Addr, JWTCacheTTL: 5 * time.Second, Heartbeat: 15 * time.Second, WriteTimeout: 2 * time.Second,
			MaxPerUser: 16, Readers: 1, AliveEvery: 100 * time.Millisecond}, nil, prometheus.NewRegistry())
		require.NoError(t, err)
		require.NoError(t, ss.Start(context.Background()))
		t.Cleanup(ss.Stop)
		return ss
	}
	ss := startStream()

	a := env.StartAgent(t)
	base := "http://" + a.Ops.Bound()

	adminID, adminJWT := env.SignUp(t, "ready-admin@example.com", "password-ready-admin")
	env.Label(t, adminID, "member", "admin")
	// system waits until the admin's /api/system readiness names exactly `failing` (every
	// other component ready or idle): the function's own view (Appwrite, Redis, the stream
	// heartbeat, the queues' consumers) and the agent's report ("test-agent/...").
	system := func(failing string, extra ...string) readiness.ReadyBody {
		t.Helper()
		var last readiness.ReadyBody
		check := func() bool {
			res := env.Do(t, "GET", "/api/system", adminJWT, nil)
			var sys struct{ Readiness *readiness.ReadyBody }
			if res.Status != 200 || json.Unmarshal(res.Body, &sys) != nil || sys.Readiness == nil {
				return false
			}
			last = *sys.Readiness
			names := map[string]bool{}
			for _, c := range last.Components {
				names[c.Name] = true
				if (c.Name == failing) != c.Failing() || c.State == readiness.StateUnknown {
					return false
				}
			}
			for _, n := range append([]string{"appwrite", "redis", "stream", "queue:gpu:arc", "queue:gpu:xtx", "agent:test-agent",
				"test-agent/appwrite", "test-agent/redis", "test-agent/hermes:hermes", "test-agent/gateway", "test-agent/model_server:arc",
				"test-agent/gpu_telemetry:arc", "test-agent/model_server:profile:direct"}, extra...) {
				if !names[n] {
					return false
				}
			}
			return len(names) == 13+len(extra) && last.Ready == (failing == "")
		}
		deadline := time.Now().Add(20 * time.Second)
		for !check() {
			if time.Now().After(deadline) {
				t.Fatalf("want %q failing in /api/system; last %+v", failing, last.Components)
			}
			time.Sleep(50 * time.Millisecond)
		}
		return last
	}

	all := []string{"appwrite", "redis", "stream", "hermes:hermes", "gateway", "model_server:arc", "model_server:profile:direct",
		"gpu_telemetry:arc", "queue:gpu:arc", "queue:gpu:xtx"}
	read := func() (int, readiness.ReadyBody) {
		code, body := get(t, base+"/readyz", "", "")
		var b readiness.ReadyBody
		require.NoError(t, json.Unmarshal([]byte(body), &b), body)
		return code, b
	}
	// expect waits until exactly `failing` fails (and `unknown` are unknown), all else ready
	// (or idle).
	expect := func(failing string, unknown ...string) readiness.ReadyBody {
		t.Helper()
		var last readiness.ReadyBody
		var lastCode int
		ok := false
		deadline := time.Now().Add(20 * time.Second)
		for !ok && time.Now().Before(deadline) {
			lastCode, last = read()
			ok = true
			names := []string{}
			for _, c := range last.Components {
				names = append(names, c.Name)
				want := readiness.StateReady
				switch {
				case c.Name == failing:
					want = readiness.StateFailing
				case contains(unknown, c.Name):
					want = readiness.StateUnknown
				}
				// Idle is not a failure (after Redis comes back the device's control lease
				// was lost and its model unloaded: no model server to check).
				ok = ok && (c.State == want || want == readiness.StateReady && c.State == readiness.StateIdle)
			}
			ok = ok && strings.Join(names, ",") == strings.Join(sorted(all), ",")
			if !ok {
				time.Sleep(50 * time.Millisecond)
			}
		}
		require.True(t, ok, "want %q failing, %v unknown; got %d %+v", failing, unknown, lastCode, last.Components)
		if failing == "" {
			require.Equal(t, 200, lastCode)
			require.True(t, last.Ready)
			require.Equal(t, "All 10 components are ready.", last.Summary)
			return last
		}
		require.Equal(t, 503, lastCode)
		require.False(t, last.Ready)
		require.True(t, strings.HasPrefix(last.Summary, "1 of 10 components failing. "), last.Summary)
		for _, c := range last.Components {
			if c.Name == failing {
				require.NotEmpty(t, c.Error)
				require.Contains(t, last.Summary, c.Message)
				require.Regexp(t, ` (is|are) failing \(`, c.Message)
			}
		}
		// The metric agrees: 0 for the failing one only (served while Redis is down too,
		// without the series read from it).
		code, m := get(t, base+"/metrics", "", "")
		require.Equal(t, 200, code)
		for _, n := range all {
			v := "1"
			if n == failing {
				v = "0"
			}
			require.Regexp(t, `pa_component_ready\{kind="[a-z_]+",name="`+n+`"\} `+v+`\n`, m, n)
		}
		return last
	}
	// Before any run every component is already checked: Hermes, the gateway, the device's
	// telemetry and the queues' consumers; the device's model server is idle (no model
	// loaded yet), not missing.
	b := expect("")
	for _, c := range b.Components {
		want := readiness.StateReady
		if c.Name == "model_server:arc" {
			want = readiness.StateIdle
		}
		require.Equal(t, want, c.State, "before any run: %+v", c)
	}

	// A chat turn loads the route's model on the managed device: its server is checked.
	_, jwt := env.SignUp(t, "ready@example.com", "password-ready")
	adm := env.Admit(t, jwt, env.Conversation(t, jwt), "r1", "hello", "")
	_, status := env.Follow(t, jwt, adm.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)
	b = expect("")
	for _, c := range b.Components {
		if c.Name == "model_server:arc" {
			require.Equal(t, readiness.StateReady, c.State, "%+v", c)
			require.Equal(t, "serving demo-model", c.Detail)
		}
	}
	system("")
	require.Nil(t, func() any {
		var sys map[string]any
		_ = json.Unmarshal(env.Do(t, "GET", "/api/system", jwt, nil).Body, &sys)
		return sys["readiness"]
	}(), "a member sees no readiness section")

	appwrite500.Store(true)
	b = expect("appwrite")
	require.Contains(t, b.Checks["appwrite"], "500")
	system("test-agent/appwrite")
	appwrite500.Store(false)
	expect("")
	front.stop() // Appwrite at a dead port
	b = expect("appwrite")
	require.Contains(t, b.Checks["appwrite"], "refused")
	front.start()
	expect("")

	ss.Stop()
	expect("stream")
	system("stream")
	ss = startStream()
	expect("")

	env.KillHermes()
	expect("hermes:hermes")
	system("test-agent/hermes:hermes")
	env.StartHermes(t)
	expect("")

	daemon.StopGateway(a)
	expect("gateway")
	system("test-agent/gateway")
	require.NoError(t, daemon.RestartGateway(a))
	expect("")

	ms.stop()
	b = expect("model_server:arc")
	require.Contains(t, b.Summary, "The model server of GPU arc is failing")
	b = system("test-agent/model_server:arc")
	require.Contains(t, b.Summary, "On agent test-agent: The model server of GPU arc is failing")
	ms.start()
	expect("")

	require.NoError(t, os.Remove(filepath.Join(dev, "mem_info_vram_used")))
	expect("gpu_telemetry:arc")
	system("test-agent/gpu_telemetry:arc")
	writeVRAM()
	expect("")

	env.Redis.Stop()
	b = expect("redis", "stream", "queue:gpu:arc", "queue:gpu:xtx")
	require.Contains(t, b.Summary, "The queue Redis is failing")
	// /api/system says so too: Redis failing, what it reads through Redis (the stream
	// heartbeat, the queues' consumers) unknown, nothing else failing.
	var last readiness.ReadyBody
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		res := env.Do(t, "GET", "/api/system", adminJWT, nil)
		var sys struct{ Readiness *readiness.ReadyBody }
		if res.Status == 200 && json.Unmarshal(res.Body, &sys) == nil && sys.Readiness != nil {
			last = *sys.Readiness
			want := map[string]readiness.State{"redis": readiness.StateFailing, "stream": readiness.StateUnknown,
				"queue:gpu:arc": readiness.StateUnknown, "queue:gpu:xtx": readiness.StateUnknown}
			ok := !last.Ready
			for _, c := range last.Components {
				if w, named := want[c.Name]; named {
					ok = ok && c.State == w
					delete(want, c.Name)
				} else {
					ok = ok && !c.Failing() && c.State != readiness.StateUnknown
				}
			}
			if ok && len(want) == 0 {
				break
			}
		}
		require.True(t, time.Now().Before(deadline), "want Redis failing in /api/system; got %d %+v", res.Status, last.Components)
	}
	env.Redis.Restart()
	expect("")

	// The readiness report /api/system reads is in Redis, with the same components.
	rdb := env.Redis.Client()
	defer rdb.Close()
	require.Eventually(t, func() bool {
		raw, err := rdb.Get(context.Background(), queue.AgentReadyKey(env.Settings.AgentID)).Bytes()
		var rep readiness.ReadyBody
		return err == nil && json.Unmarshal(raw, &rep) == nil && rep.Ready && len(rep.Components) == len(all)
	}, 10*time.Second, 50*time.Millisecond)

	// An agent that stopped without removing itself (its report expired) is failing in
	// /api/system; one that stops cleanly is not listed.
	require.NoError(t, queue.Beat(context.Background(), rdb, queue.AgentsReadyKey(), "ghost-agent", time.Now().Add(-time.Minute)))
	b = system("agent:ghost-agent", "agent:ghost-agent")
	require.Contains(t, b.Summary, "Agent ghost-agent is failing (no readiness report for 1m0s)")
	require.NoError(t, rdb.ZRem(context.Background(), queue.AgentsReadyKey(), "ghost-agent").Err())
	system("")

	daemon.StopQueue(a, queue.DeviceQueue("xtx"))
	b = expect("queue:gpu:xtx")
	require.Contains(t, b.Checks["queue:gpu:xtx"], "no consumer of gpu:xtx")
	system("queue:gpu:xtx")

}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

// sorted orders names as readiness.Sort orders components (kind, then name).
func sorted(names []string) []string {
	cs := make([]readiness.Component, 0, len(names))
	kinds := map[string]readiness.Kind{"appwrite": readiness.KindAppwrite, "redis": readiness.KindRedis, "stream": readiness.KindStream, "hermes": readiness.KindHermes,
		"gateway": readiness.KindGateway, "model_server": readiness.KindModelServer, "gpu_telemetry": readiness.KindGPUTelemetry, "queue": readiness.KindQueueConsumers}
	for _, n := range names {
		k, _, _ := strings.Cut(n, ":")
		cs = append(cs, readiness.Component{Name: n, Kind: kinds[k]})
	}
	readiness.Sort(cs)
	out := make([]string, len(cs))
	for i, c := range cs {
		out[i] = c.Name
	}
	return out
}
