package daemon

import (
	"context"
	"fmt"
	"net"
	"time"
	"unicode/utf8"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"

	"privateassistant/admit"
	"privateassistant/agent/mcpjobs"
	"privateassistant/apptools"
	"privateassistant/issuer"
	"privateassistant/longpoll"
	"privateassistant/ops"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// MCPServerName is the MCP server's name in the Hermes profile (mcp_servers.pa in
// deploy/hermes/config.yaml): Hermes names its tools mcp__pa__enqueue_job, …
const MCPServerName = "pa"

// checkMCPAddr accepts only a loopback or private address: the MCP job server admits jobs
// for the runs the gateway names, and only Hermes on this host or the private network
// may reach it.
func checkMCPAddr(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("PA_MCP_ADDR: %w", err)
	}
	ip := net.ParseIP(host)
	if host == "localhost" || (ip != nil && (ip.IsLoopback() || ip.IsPrivate())) {
		return nil
	}
	return fmt.Errorf("PA_MCP_ADDR %q: only a loopback or private address", addr)
}

// buildMCP makes the MCP job server (issue 19; agent/mcpjobs) when PA_MCP_ADDR is set:
// the gateway reports every answer's tool calls to its registry, and its jobs are
// admitted like the web's (admit on the agent's store and Redis). The owner's
// labels are not known to the agent (its key cannot read users), so a role restricted to
// labels is refused to delegation; roles open to every member are allowed.
func (a *Agent) buildMCP() error {
	if a.S.MCPAddr == "" || a.Gateway == nil {
		return nil
	}
	if err := checkMCPAddr(a.S.MCPAddr); err != nil {
		return err
	}
	reg := &mcpjobs.Registry{RDB: a.RDB, Server: MCPServerName}
	adm := &admit.Admitter{RDB: a.RDB, Enq: queue.NewEnqueuer(asynq.NewClientFromRedisClient(a.RDB)), Plans: &runconfig.Cache{RDB: a.RDB}}
	runs := func() schema.Table[schema.Run] { return schema.For[schema.Run](a.Store, schema.CollRuns) }
	a.MCP = &mcpjobs.Server{Registry: reg, Key: a.S.GatewayKey, Log: a.Log.With("component", "mcp-jobs"),
		Runs: func(ctx context.Context, run string) (mcpjobs.Caller, error) {
			r, err := runs().Get(ctx, run)
			if err != nil {
				return mcpjobs.Caller{}, err
			}
			return mcpjobs.CallerOf(run, r), nil
		},
		Admit: func(ctx context.Context, req admit.Request) (admit.Result, error) {
			res, err := adm.Admit(ctx, a.Store, req)
			if res.RunID != "" {
				a.publishJob(ctx, req, res)
			}
			return res, err
		},
		State: func(ctx context.Context, run string) (mcpjobs.RunState, error) {
			return jobState(ctx, a.Store, a.RDB, run)
		}}
	if a.S.AppCallbackAllow != "" {
		// Host-app tools (app_tool): callbacks only under the admin's allow-list.
		allow, err := apptools.ParseAllowList(a.S.AppCallbackAllow)
		if err != nil {
			return fmt.Errorf("PA_APP_CALLBACK_ALLOW: %w", err)
		}
		apps := &apptools.Registry{RDB: a.RDB}
		client := &apptools.Client{Allow: allow}
		if a.S.Issuer != "" {
			ring := &issuer.Keyring{RDB: a.RDB}
			// Published before the first callback; if Redis is down now, the first
			// callback makes it.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			if _, err := ring.Ensure(ctx); err != nil {
				a.Log.Warn("issuer: the signing key is not published yet", "err", err)
			}
			cancel()
			client.Issuer = &apptools.Issuer{Name: a.S.Issuer, Key: ring.Ensure}
		}
		a.MCP.Apps = &mcpjobs.AppTools{Registry: apps, Client: client}
		// A run an app started is told its app's tools (Hermes lists one MCP tool list
		// for every run, so they reach the model as instructions, called via app_tool).
		a.Exec.Instructions = func(ctx context.Context, run *schema.Run) string {
			app := apptools.AppOfRequestID(run.RequestID)
			if app == "" {
				return ""
			}
			ts, err := apps.List(ctx, app)
			if err != nil {
				a.Log.Warn("app tools: list unavailable; the run is not told them", "app", app, "run", run.ID, "err", err)
				return ""
			}
			return apptools.Instructions(ts)
		}
	}
	a.Gateway.ToolCalls = reg.Register
	a.directTools = &mcpTools{a: a}
	return nil
}

// startMCP serves the MCP job server (after the gateway; stopped before it).
func (a *Agent) startMCP(ctx context.Context) error {
	if a.MCP == nil {
		return nil
	}
	a.mcpSrv = &ops.HTTPServer{Addr: a.S.MCPAddr, Handler: a.MCP, Log: a.Log, What: "mcp job server"}
	if err := a.mcpSrv.Start(ctx); err != nil {
		return fmt.Errorf("mcp job server: %w", err)
	}
	a.Log.Info("mcp job server listening", "addr", a.mcpSrv.Bound())
	return nil
}

// MCPURL is the MCP job server's URL once started ("" when off).
func (a *Agent) MCPURL() string {
	if a.mcpSrv == nil {
		return ""
	}
	return "http://" + a.mcpSrv.Bound() + "/mcp"
}

// jobState is a job's state for job_status and list_jobs: its record, unless the run's
// hot state in Redis already says it ended. The executor appends the terminal event (and
// with it the hot state) before the record turns terminal, so for a moment a follower
// (the coordinating run's long-poll, the web) has seen the end while the record still
// says running; the job's status must not lag behind what was announced. Its error
// summary follows once the record has it.
func jobState(ctx context.Context, st *schema.Store, rdb redis.Cmdable, run string) (mcpjobs.RunState, error) {
	r, err := schema.For[schema.Run](st, schema.CollRuns).Get(ctx, run)
	if err != nil {
		return mcpjobs.RunState{}, err
	}
	js := mcpjobs.RunState{Status: string(r.Status), Completed: r.ProgressCompleted, Total: r.ProgressTotal,
		Position: r.QueuePosition, Terminal: schema.IsTerminal(r.Status)}
	for _, s := range []struct {
		to   *string
		from *string
	}{{&js.Phase, r.Phase}, {&js.QueueReason, r.QueueReason}, {&js.Error, r.ErrorSummary}} {
		if s.from != nil {
			*s.to = *s.from
		}
	}
	if !js.Terminal {
		if hot, ok, err := queue.GetRunState(ctx, rdb, run); err == nil && ok && hot.Terminal && schema.IsTerminal(schema.RunStatus(hot.Status)) {
			js.Status, js.Phase, js.Terminal, js.Position, js.QueueReason = hot.Status, hot.Status, true, nil, ""
		}
	}
	return js, nil
}

// publishJob tells the owner's open tabs about a job the MCP job server admitted, as the
// message route does for a message typed in another tab (the change feed's
// "message.created", functions/service FeedMessage): the web shows the job's message in
// its conversation and follows its run live. A notification only: a tab that misses it
// sees the job when it reads the conversation again.
func (a *Agent) publishJob(ctx context.Context, req admit.Request, res admit.Result) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Second)
	defer cancel()
	data := map[string]any{"conversationId": req.ConversationID, "messageId": res.MessageID, "runId": res.RunID,
		"requestId": req.RequestID, "role": res.Role, "sequence": res.Sequence, "status": res.Status}
	if utf8.RuneCountInString(req.Text) <= 2000 {
		data["text"] = req.Text
	} else {
		data["textOmitted"] = true
	}
	if _, err := longpoll.PublishFeed(ctx, a.RDB, req.Owner, "message.created", data); err != nil {
		a.Log.Warn("mcp jobs: the owner's change feed was not told of the job", "run", res.RunID, "err", err)
	}
}
