package daemon

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	"privateassistant/agent/harness"
)

// mcpTools is the direct harness's ToolCaller: the agent's own MCP job server, called as
// Hermes calls it (Bearer the gateway key, tools named mcp__pa__<tool>), so a chat role
// on the direct harness can enqueue research and coding jobs (issue 30 item 5). The job
// server matches each call to the run whose answer the gateway saw make it: the caller is
// never an argument.
type mcpTools struct {
	a *Agent

	mu   sync.Mutex
	defs []harness.ToolDef // listed once (the server's tools are fixed)
}

var _ harness.ToolCaller = (*mcpTools)(nil)

const mcpToolPrefix = "mcp__" + MCPServerName + "__"

func (t *mcpTools) session(ctx context.Context) (*mcp.ClientSession, error) {
	url := t.a.MCPURL()
	if url == "" {
		return nil, errors.New("the MCP job server is not running")
	}
	c := mcp.NewClient(&mcp.Implementation{Name: "pa-direct-harness", Version: "1"}, nil)
	return c.Connect(ctx, &mcp.StreamableClientTransport{Endpoint: url, DisableStandaloneSSE: true,
		HTTPClient: &http.Client{Transport: bearer{key: t.a.S.GatewayKey}, Timeout: t.a.S.HTTPTimeout}}, nil)
}

// Tools lists the job server's tools under the names the model sees.
func (t *mcpTools) Tools(ctx context.Context) ([]harness.ToolDef, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.defs != nil {
		return t.defs, nil
	}
	cs, err := t.session(ctx)
	if err != nil {
		return nil, err
	}
	defer cs.Close()
	res, err := cs.ListTools(ctx, nil)
	if err != nil {
		return nil, err
	}
	out := make([]harness.ToolDef, 0, len(res.Tools))
	for _, tl := range res.Tools {
		params, _ := json.Marshal(tl.InputSchema)
		out = append(out, harness.ToolDef{Name: mcpToolPrefix + tl.Name, Description: tl.Description, Parameters: params})
	}
	t.defs = out
	return out, nil
}

// Call makes one tool call and returns what it answered (its text, or its structured
// content); a tool's own error is returned as one.
func (t *mcpTools) Call(ctx context.Context, name, arguments string) (string, error) {
	tool, ok := strings.CutPrefix(name, mcpToolPrefix)
	if !ok {
		return "", errors.New("not a tool of the MCP job server: " + name)
	}
	args := map[string]any{}
	if strings.TrimSpace(arguments) != "" {
		if err := json.Unmarshal([]byte(arguments), &args); err != nil {
			return "", errors.New("the arguments are not a JSON object")
		}
	}
	cs, err := t.session(ctx)
	if err != nil {
		return "", err
	}
	defer cs.Close()
	res, err := cs.CallTool(ctx, &mcp.CallToolParams{Name: tool, Arguments: args})
	if err != nil {
		return "", err
	}
	var text strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			text.WriteString(tc.Text)
		}
	}
	if text.Len() == 0 && res.StructuredContent != nil {
		b, _ := json.Marshal(res.StructuredContent)
		text.Write(b)
	}
	if res.IsError {
		return "", errors.New(text.String())
	}
	return text.String(), nil
}

// bearer adds the key; its own transport keeps no idle connection (nothing outlives a call).
type bearer struct{ key string }

var noKeepAlive = &http.Transport{DisableKeepAlives: true}

func (b bearer) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return noKeepAlive.RoundTrip(r)
}
