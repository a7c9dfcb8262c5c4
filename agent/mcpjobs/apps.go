package mcpjobs

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"privateassistant/apptools"
	"privateassistant/queue"
)

// AppTools is what app_tool needs: the apps' declared tools and signing secrets, and the
// client that delivers a signed callback (apptools.Registry and apptools.Client).
type AppTools struct {
	Registry *apptools.Registry
	Client   *apptools.Client
}

const appCallTTL = 24 * time.Hour

func appCallKey(run, call string) string { return queue.MCPAppCallKey(RequestID(run, call)) }

// appTool serves app_tool(name, arguments): the caller's run names the app (Caller.App,
// from the run's record), never an argument, so a run finds only the tools of the app
// that started it. The arguments must match the tool's schema; the callback is signed and
// delivered once per tool call: its delivery id is derived from (run, tool-call id), so a
// Hermes retry while the first delivery is in flight is refused by the app as a replay, and
// a retry after it answers the stored result without calling again.
func (s *Server) appTool(ctx context.Context, _ *mcp.CallToolRequest, in AppArgs) (*mcp.CallToolResult, any, error) {
	canon, _ := canonical(ToolApp, mustJSON(in))
	c, call, err := s.caller(ctx, ToolApp, canon)
	if err != nil {
		return nil, nil, err
	}
	if c.App == "" {
		return nil, nil, errors.New("this conversation was not started by an application, so it has no application tools")
	}
	name := strings.TrimSpace(in.Name)
	t, err := s.Apps.Registry.Get(ctx, c.App, name)
	if errors.Is(err, apptools.ErrUnknownTool) {
		return nil, nil, fmt.Errorf("the application offers no tool %q", name)
	}
	if err != nil {
		s.log().Warn("mcp app tools: declaration unavailable", "app", c.App, "tool", name, "err", err)
		return nil, nil, errors.New("the application's tools are unavailable; try again")
	}
	args, err := appArguments(in.Arguments)
	if err != nil {
		return nil, nil, err
	}
	if err := t.CheckArguments(args); err != nil {
		return nil, nil, err
	}
	rdb := s.Registry.RDB
	key := appCallKey(c.Run, call)
	if prev, err := rdb.Get(ctx, key).Result(); err == nil {
		return nil, appResult(name, json.RawMessage(prev)), nil // a retry of a delivered call
	} else if !errors.Is(err, redis.Nil) {
		return nil, nil, errors.New("the application's tools are unavailable; try again")
	}
	secret, err := s.Apps.Registry.Secret(ctx, c.App)
	if err != nil {
		s.log().Warn("mcp app tools: no signing secret", "app", c.App, "err", err)
		return nil, nil, errors.New("the application's tools are unavailable; try again")
	}
	delivery := RequestID(c.Run, call)[len("mcp-"):]
	out, err := s.Apps.Client.Call(ctx, t, secret, delivery, args, apptools.ResponseID(c.Run))
	if err != nil {
		s.log().Info("mcp app tools: call failed", "app", c.App, "tool", name, "run", c.Run, "err", err)
		return nil, nil, err
	}
	if err := rdb.Set(ctx, key, []byte(out), appCallTTL).Err(); err != nil {
		s.log().Warn("mcp app tools: result not kept for a retry", "run", c.Run, "err", err)
	}
	s.log().Info("mcp app tools: called", "app", c.App, "tool", name, "run", c.Run, "call", call)
	return nil, appResult(name, out), nil
}

func appResult(tool string, out json.RawMessage) map[string]any {
	return map[string]any{"tool": tool, "result": out}
}

// appArguments is the tool's arguments as JSON: an object, or a string holding one (a
// model sometimes encodes them twice); none is {}.
func appArguments(v any) (json.RawMessage, error) {
	switch a := v.(type) {
	case nil:
		return json.RawMessage("{}"), nil
	case string:
		if !json.Valid([]byte(a)) {
			return nil, errors.New("arguments must be an object matching the tool's schema")
		}
		return json.RawMessage(a), nil
	default:
		b, err := json.Marshal(a)
		if err != nil {
			return nil, err
		}
		return b, nil
	}
}
