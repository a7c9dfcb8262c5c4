package daemon_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"privateassistant/admit"
	"privateassistant/agent/gateway"
	"privateassistant/apptools"
	"privateassistant/issuer"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/stacktest"
)

// TestHostAppToolsThroughTheAgent: with PA_APP_CALLBACK_ALLOW the agent offers app_tool; a
// run the app "homeauto" started (its request id rt:homeauto:…) is submitted to Hermes
// with the app's tools as instructions, and its model's app_tool call (reported by the
// gateway, made by an MCP client as Hermes makes it) reaches the app signed and verified:
// by the HMAC of its secret and, with PA_ISSUER, by the issuer's JWT, which the app
// checks with the public keys the functions serve at /api/v1/jwks (issue 35 item 1).
func TestHostAppToolsThroughTheAgent(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t)
	var mu sync.Mutex
	var got []apptools.Callback
	v := &apptools.Verifier{}
	tv := &apptools.TokenVerifier{Issuer: "https://pa.test", Audience: "homeauto"}
	app := httptest.NewServer(tv.Middleware(v.Middleware(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var cb apptools.Callback
		_ = json.NewDecoder(r.Body).Decode(&cb)
		mu.Lock()
		got = append(got, cb)
		mu.Unlock()
		_, _ = w.Write([]byte(`{"lights":"on"}`))
	}))))
	t.Cleanup(app.Close)
	cfg := filepath.Join(t.TempDir(), "gpu.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"devices": [
		{"name": "arc", "slots": 4, "backend": {"kind": "upstream", "url": "`+env.ModelURL+`"}, "models": {"demo-model": {"context": 131072}}},
		{"name": "xtx", "slots": 1, "backend": {"kind": "upstream", "url": "`+env.ModelURL+`"}, "models": {"demo-model": {"context": 131072}}}]}`), 0o600))
	const key = "gateway-key-0123456789"
	env.Settings.GPUConfig, env.Settings.GatewayAddr, env.Settings.GatewayKey, env.Settings.MCPAddr = cfg, "127.0.0.1:0", key, "127.0.0.1:0"
	env.Settings.AppCallbackAllow = app.URL + "/pa/"
	env.Settings.Issuer = "https://pa.test"
	tv.Keys = (&issuer.Fetcher{URL: env.URL + "/api/v1/jwks"}).Key
	tv.URL = app.URL + "/pa/lights"

	ctx := context.Background()
	rdb := env.Redis.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	sec, err := (&apptools.Registry{RDB: rdb}).Declare(ctx, "homeauto", []apptools.Tool{{Name: "turn_on_lights",
		Description: "Turn on the lights in a room.", Schema: json.RawMessage(`{"type":"object","properties":{"room":{"type":"string"}},"required":["room"]}`),
		CallbackURL: app.URL + "/pa/lights"}}, apptools.AllowList{app.URL + "/pa/"})
	require.NoError(t, err)
	v.Secret = []byte(sec)
	a := env.StartAgent(t)

	// A run the runtime API admitted for one of the app's users (its request id prefix).
	owner, jwt := env.SignUp(t, "apptools@example.com", "password-apptools")
	conv := env.Conversation(t, jwt)
	aq := asynq.NewClientFromRedisClient(rdb)
	t.Cleanup(func() { _ = aq.Close() })
	adm := &admit.Admitter{RDB: rdb, Enq: queue.NewEnqueuer(aq), Plans: &runconfig.Cache{RDB: rdb}}
	res, err := adm.Admit(ctx, env.Store, admit.Request{Owner: owner, ConversationID: conv, RequestID: "rt:homeauto:req1",
		Text: "turn on the kitchen lights", Role: "research"})
	require.NoError(t, err)
	_, status := env.Follow(t, jwt, res.RunID, 60*time.Second, nil)
	require.Equal(t, "completed", status)
	var told bool
	for _, r := range env.Model.Requests() {
		for _, m := range r.Messages {
			if m.Role == "system" && strings.Contains(fmt.Sprint(m.Content), "turn_on_lights: Turn on the lights in a room.") {
				told = true
			}
		}
	}
	require.True(t, told, "the run's model is told its app's tools")

	args := map[string]any{"name": "turn_on_lights", "arguments": map[string]any{"room": "kitchen"}}
	a.Gateway.ToolCalls(ctx, res.RunID, []gateway.ToolCall{{ID: "call_1", Name: "mcp__pa__app_tool", Arguments: `{"name":"turn_on_lights","arguments":{"room":"kitchen"}}`}})
	c := mcp.NewClient(&mcp.Implementation{Name: "hermes-like", Version: "1"}, nil)
	cs, err := c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: a.MCPURL(),
		HTTPClient: &http.Client{Transport: bearerRT{key}}, DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	defer cs.Close()
	out, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: "app_tool", Arguments: args})
	require.NoError(t, err)
	require.False(t, out.IsError, "%+v", out.Content)
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, got, 1)
	require.Equal(t, "resp_"+res.RunID, got[0].Response)

	// The key set is public, and holds no private part.
	jwks := env.Do(t, "GET", "/api/v1/jwks", "", nil)
	require.Equal(t, 200, jwks.Status, string(jwks.Body))
	require.Equal(t, "application/jwk-set+json", jwks.Header.Get("Content-Type"))
	set, err := issuer.ParseJWKS(jwks.Body)
	require.NoError(t, err)
	require.Len(t, set.Keys, 1)
}
