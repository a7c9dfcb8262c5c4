package daemon_test

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/daemon"
	"privateassistant/agent/gateway"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
	"privateassistant/stacktest"
)

type bearerRT struct{ key string }

func (b bearerRT) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// TestDelegationThroughTheMCPJobServer: the agent with PA_MCP_ADDR serves the MCP job
// server; a tool call the gateway saw in a chat run's answer (reported as the gateway does)
// and then made by an MCP client (as Hermes makes it) admits one research job through the
// real admission, in the chat's conversation, owned by the chat's owner; the job runs on
// its own queue and its answer lands in that conversation; a replayed call answers the
// same job; job_status reports it done.
func TestDelegationThroughTheMCPJobServer(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t)
	cfg := filepath.Join(t.TempDir(), "gpu.json")
	require.NoError(t, os.WriteFile(cfg, []byte(`{"devices": [
		{"name": "arc", "slots": 4, "backend": {"kind": "upstream", "url": "`+env.ModelURL+`"}, "models": {"demo-model": {"context": 131072}}},
		{"name": "xtx", "slots": 1, "backend": {"kind": "upstream", "url": "`+env.ModelURL+`"}, "models": {"demo-model": {"context": 131072}}}]}`), 0o600))
	const key = "gateway-key-0123456789"
	env.Settings.GPUConfig, env.Settings.GatewayAddr, env.Settings.GatewayKey, env.Settings.MCPAddr = cfg, "127.0.0.1:0", key, "127.0.0.1:0"
	a := env.StartAgent(t)
	require.NotEmpty(t, a.MCPURL())

	owner, jwt := env.SignUp(t, "mcp@example.com", "password-mcp1")
	conv := env.Conversation(t, jwt)
	chat := env.Admit(t, jwt, conv, "q1", "hello", "")
	_, status := env.Follow(t, jwt, chat.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)

	// The chat run's answer called enqueue_job: the gateway reports it.
	args := map[string]any{"role": "research", "instructions": "find three facts", "title": "facts"}
	a.Gateway.ToolCalls(context.Background(), chat.RunID, []gateway.ToolCall{{ID: "call_7", Name: "mcp__pa__enqueue_job",
		Arguments: `{"role":"research","instructions":"find three facts","title":"facts"}`}})

	c := mcp.NewClient(&mcp.Implementation{Name: "hermes-like", Version: "1"}, nil)
	cs, err := c.Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: a.MCPURL(),
		HTTPClient: &http.Client{Transport: bearerRT{key}}, DisableStandaloneSSE: true}, nil)
	require.NoError(t, err)
	defer cs.Close()
	res, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "enqueue_job", Arguments: args})
	require.NoError(t, err)
	require.False(t, res.IsError, "%+v", res.Content)
	job := res.StructuredContent.(map[string]any)["job"].(string)

	run := runRecord(t, env, job)
	require.Equal(t, owner, run.OwnerID)
	require.Equal(t, conv, run.ConversationID)
	require.Equal(t, "research", run.Role)
	_, status = env.Follow(t, jwt, job, 60*time.Second, nil)
	require.Equal(t, "completed", status)
	require.NotEmpty(t, answers(t, env, owner, job), "the job's answer is in the conversation")

	again, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "enqueue_job", Arguments: args})
	require.NoError(t, err)
	require.Equal(t, job, again.StructuredContent.(map[string]any)["job"], "a replayed call is the same job")

	a.Gateway.ToolCalls(context.Background(), chat.RunID, []gateway.ToolCall{{ID: "call_8", Name: "mcp__pa__job_status", Arguments: `{"job":"` + job + `"}`}})
	st, err := cs.CallTool(context.Background(), &mcp.CallToolParams{Name: "job_status", Arguments: map[string]any{"job": job}})
	require.NoError(t, err)
	require.False(t, st.IsError, "%+v", st.Content)
	require.Equal(t, string(schema.RunCompleted), st.StructuredContent.(map[string]any)["status"])
	require.Equal(t, true, st.StructuredContent.(map[string]any)["done"])
}

// job_status never lags behind what followers were told: the executor appends a job's
// terminal event (and the hot state with it) before its record turns terminal, and in
// that moment the job reads as ended, as its followers already saw; an ended record wins.
func TestJobStatusFollowsTheAnnouncedEnd(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := stacktest.New(t)
	_, jwt := env.SignUp(t, "jobstate@example.com", "password-jobstate")
	conv := env.Conversation(t, jwt)
	job := env.Admit(t, jwt, conv, "j1", "find facts", "research").RunID
	rdb := env.Redis.Client()
	defer rdb.Close()

	st, err := daemon.JobState(ctx, env.Store, rdb, job)
	require.NoError(t, err)
	require.Equal(t, "queued", st.Status)
	require.False(t, st.Terminal)

	schematest.SetRunStatus(t, env.Store, job, schema.RunRunning, map[string]any{"phase": "thinking"})
	require.NoError(t, queue.SetRunState(ctx, rdb, job, queue.RunState{Status: string(schema.RunRunning), HeartbeatAt: time.Now()}))
	st, err = daemon.JobState(ctx, env.Store, rdb, job)
	require.NoError(t, err)
	require.Equal(t, "running", st.Status)
	require.Equal(t, "thinking", st.Phase)

	// The terminal event is out, the record not yet terminal.
	require.NoError(t, queue.SetRunState(ctx, rdb, job, queue.RunState{Status: string(schema.RunCompleted), Terminal: true, HeartbeatAt: time.Now()}))
	st, err = daemon.JobState(ctx, env.Store, rdb, job)
	require.NoError(t, err)
	require.Equal(t, "completed", st.Status)
	require.True(t, st.Terminal)

	// The record ended otherwise (it is the record of truth once it has ended).
	schematest.SetRunStatus(t, env.Store, job, schema.RunFailed, map[string]any{"errorSummary": "boom"})
	st, err = daemon.JobState(ctx, env.Store, rdb, job)
	require.NoError(t, err)
	require.Equal(t, "failed", st.Status)
	require.Equal(t, "boom", st.Error)
}
