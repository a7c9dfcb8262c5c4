package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/gateway"
	"privateassistant/agent/gpu"
	"privateassistant/modeltest"
	"privateassistant/queue"
)

// modelServers returns the xtx's model server processes running now, pid → model (their
// pid files, each checked alive).
func modelServers(t *testing.T, s *Stack) map[string]string {
	dir := filepath.Join(s.cfg.DataDir, "model-servers")
	ents, err := os.ReadDir(dir)
	require.NoError(t, err)
	out := map[string]string{}
	for _, e := range ents {
		if _, err := os.Stat(filepath.Join("/proc", e.Name())); err != nil {
			continue
		}
		b, err := os.ReadFile(filepath.Join(dir, e.Name()))
		if err == nil {
			out[e.Name()] = string(b)
		}
	}
	return out
}

// gatewayCall posts a completion for model to the stack's gateway with its key and
// nothing else naming a run.
func gatewayCall(t *testing.T, s *Stack, model string) (int, string) {
	key, err := os.ReadFile(filepath.Join(s.cfg.DataDir, "gateway.key"))
	require.NoError(t, err)
	b, _ := json.Marshal(map[string]any{"model": model, "messages": []any{map[string]any{"role": "user", "content": "hi"}}})
	req, _ := http.NewRequest("POST", s.Gateway+"/chat/completions", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+string(key))
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// TestDevRunsGoThroughTheGateway (issue 16 item 2): make dev is production in miniature.
// A chat answer (direct harness, arc), a research answer and a coding answer (the Hermes
// double, xtx) are served by the agent's gateway — each run has the gateway's usage record
// in Redis naming the model that answered — and the xtx swaps: the research job loads its
// model (a child process) with the Immich double's queues paused, the coding job asked
// meanwhile waits with a reason, then the xtx unloads the research model (its process
// stops) and loads the coding model (another process), visible in /api/system. Once the
// model is idle-unloaded, Immich resumes. A request naming no admitted run is refused.
func TestDevRunsGoThroughTheGateway(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	s, err := Start(t.Context(), Config{Root: root, DataDir: t.TempDir(), TokenDelay: 5 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	require.NotNil(t, s.Agent.GPU["arc"])
	require.NotNil(t, s.Agent.GPU["xtx"])
	require.Equal(t, s.Gateway, s.Agent.GatewayURL())
	for _, q := range devImmichQueues {
		require.False(t, s.Immich.Paused(q), "Immich runs while the xtx is idle")
	}

	api := devAPI{t: t, url: s.URL}
	jwt := api.jwt(s.DemoEmail, s.DemoPass)
	code, conv := api.call("POST", "/api/conversations", jwt, map[string]any{"title": "gateway"})
	require.Equal(t, 201, code, conv)
	submit := func(req, text, role string) string {
		code, adm := api.call("POST", "/api/conversations/"+conv["id"].(string)+"/messages", jwt,
			map[string]any{"requestId": req, "text": text, "role": role})
		require.Equal(t, 202, code, adm)
		return adm["runId"].(string)
	}
	settled := func(runID string) {
		var run map[string]any
		require.Eventually(t, func() bool {
			_, run = api.call("GET", "/api/runs/"+runID, jwt, nil)
			return run["terminal"] == true
		}, 60*time.Second, 50*time.Millisecond, "run %s settles", runID)
		require.Equal(t, "completed", run["status"], "%v", run)
	}
	ask := func(req, text, role string) string {
		runID := submit(req, text, role)
		settled(runID)
		return runID
	}
	rdb := s.Agent.RDB
	usage := func(runID string) map[string]string {
		u, err := rdb.HGetAll(context.Background(), gateway.UsageKey(runID)).Result()
		require.NoError(t, err)
		return u
	}

	// Chat: the direct harness on the arc, through the gateway.
	chat := ask("gw-chat", "hello through the gateway", "")
	require.NotEmpty(t, usage(chat), "the gateway recorded the chat run's usage (%s)", gateway.UsageKey(chat))
	require.Equal(t, "chat", s.Agent.GPU["arc"].Snapshot().Loaded)
	require.Empty(t, s.Agent.GPU["xtx"].Snapshot().Loaded, "chat never touches the xtx")
	for _, q := range devImmichQueues {
		require.False(t, s.Immich.Paused(q), "a chat run leaves Immich alone")
	}

	// Research, then coding: the Hermes double on the xtx, through the gateway, on two
	// different models, each served by its own model server process. The coding job is
	// asked while the research job holds the xtx: it waits (its card says for what), the
	// xtx swaps once the research job ends, and both answer. Immich is paused for the first
	// load and stays paused while a model is loaded.
	s.Model.SetScript("#slowresearch", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: tokens(strings.Repeat(" reading", 60)), TokenDelay: 40 * time.Millisecond}}}) // ~2.4 s: the coding job is picked up meanwhile (asynq polls the xtx queue every second)
	research := submit("gw-research", "#slowresearch the gateway", "research")
	require.Eventually(t, func() bool {
		st := s.Agent.GPU["xtx"].Snapshot()
		return st.Loaded == devResearchModel && st.Active == 1
	}, 30*time.Second, 20*time.Millisecond, "the research job holds the xtx")
	gen := s.Agent.GPU["xtx"].Snapshot().Generation
	research1 := modelServers(t, s)
	require.Equal(t, []string{devResearchModel}, slices.Collect(maps.Values(research1)), "the research model runs as its own process")
	for _, q := range devImmichQueues {
		require.True(t, s.Immich.Paused(q), "Immich is paused while the xtx holds a model")
	}
	require.Contains(t, s.Immich.Calls(), "PUT /api/queues/smartSearch", "the xtx paused Immich before its load")

	coding := submit("gw-coding", "refactor the gateway", "coding")
	var waiting map[string]any
	require.Eventually(t, func() bool {
		_, waiting = api.call("GET", "/api/runs/"+coding, jwt, nil)
		r, _ := waiting["queueReason"].(string)
		return waiting["status"] == "waiting_for_resource" && strings.Contains(r, devResearchModel)
	}, 30*time.Second, 20*time.Millisecond, "the coding job waits for the xtx, its card naming the model that holds it")
	t.Logf("the coding job's card while the research job runs: %v", waiting["queueReason"])
	settled(research)
	settled(coding)
	st := s.Agent.GPU["xtx"].Snapshot()
	require.Equal(t, devCodingModel, st.Loaded, "the xtx swapped to the coding model")
	require.Greater(t, st.Generation, gen, "unload and load moved the device's generation")
	require.Positive(t, st.LastSwap.Total, "the swap's timings are recorded")
	require.Equal(t, []string{devCodingModel}, slices.Collect(maps.Values(modelServers(t, s))), "the research model's process was stopped, the coding model's started")
	for run, model := range map[string]string{research: devResearchModel, coding: devCodingModel} {
		u := usage(run)
		require.Equal(t, model, u["effectiveModel"], "run %s was answered by its route's model server, through the gateway", run)
		require.Equal(t, "xtx", u["device"])
	}
	var sys map[string]any
	require.Eventually(t, func() bool {
		_, sys = api.call("GET", "/api/system", jwt, nil)
		devs, _ := sys["devices"].([]any)
		for _, d := range devs {
			if d, _ := d.(map[string]any); d["device"] == "xtx" {
				return d["loadedModel"] == devCodingModel
			}
		}
		return false
	}, 10*time.Second, 50*time.Millisecond, "/api/system shows the model the xtx swapped to")
	h, err := rdb.HGetAll(context.Background(), queue.GPUKey("xtx")).Result()
	require.NoError(t, err)
	require.NotEmpty(t, h, "the xtx heartbeat reaches Redis")

	// Nothing reaches a model through the gateway without a run binding.
	for _, model := range []string{"work", "work@not-a-run"} {
		code, body := gatewayCall(t, s, model)
		require.Equal(t, 403, code, body)
	}

	// The model idles out (idleUnload 3s), the device is free, Immich resumes.
	require.Eventually(t, func() bool {
		if s.Agent.GPU["xtx"].Snapshot().Loaded != "" {
			return false
		}
		for _, q := range devImmichQueues {
			if s.Immich.Paused(q) {
				return false
			}
		}
		return true
	}, 20*time.Second, 50*time.Millisecond, "the xtx unloads and Immich resumes")
	require.Equal(t, gpu.PhaseIdle, s.Agent.GPU["xtx"].Snapshot().Phase)
}

// TestDevRoutesQualify: the route qualification gate (PA_ROUTE_QUALIFICATION, default
// "managed": a role may switch only to a qualified route on a managed device) can be
// satisfied in dev: both routes pass a qualification on the dev devices (the arc's device
// report and the xtx's fake sysfs give the memory figures it needs). About a minute
// (the xtx's full-context stress at one slot), so behind PA_DEV_QUALIFY=1.
func TestDevRoutesQualify(t *testing.T) {
	t.Parallel()
	if os.Getenv("PA_DEV_QUALIFY") == "" {
		t.Skip("about a minute: set PA_DEV_QUALIFY=1")
	}
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	s, err := Start(t.Context(), Config{Root: root, DataDir: t.TempDir(), TokenDelay: 5 * time.Millisecond})
	require.NoError(t, err)
	defer s.Close()
	api := devAPI{t: t, url: s.URL}
	jwt := api.jwt(s.AdminEmail, s.AdminPass)
	for _, r := range []string{"chat", "work", "code"} {
		require.Eventually(t, func() bool {
			code, _ := api.call("POST", "/api/model-routes/"+r+"/qualify", jwt, map[string]any{})
			return code == 202 // 409 device_not_managed until the device's first heartbeat
		}, 20*time.Second, 200*time.Millisecond)
		var out map[string]any
		require.Eventually(t, func() bool {
			_, out = api.call("GET", "/api/model-routes/"+r+"/qualification", jwt, nil)
			st, _ := out["request"].(map[string]any)
			return st != nil && (st["state"] == "passed" || st["state"] == "failed" || st["state"] == "error")
		}, 2*time.Minute, 500*time.Millisecond)
		require.Equal(t, true, out["qualified"], "route %s: %v", r, out)
	}
}
