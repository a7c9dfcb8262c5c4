package mcpjobs

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/modelcontextprotocol/go-sdk/mcp"
	"github.com/redis/go-redis/v9"

	"privateassistant/admit"
	"privateassistant/agent/memberkey"
	"privateassistant/apptools"
	"privateassistant/fault"
	"privateassistant/queue"
	"privateassistant/schema"
)

// Caller is the run a tool call came from: its owner and conversation.
type Caller struct {
	Run          string
	Owner        string
	Conversation string
	// App is the host app that started the run through the runtime API ("" for any
	// other run): app_tool finds only its tools.
	App string
	// Labels are the owner's labels as the run's own admission verified them
	// (schema.Run.OwnerLabels): a job the run enqueues is admitted with them, so a role
	// restricted to labels admits exactly the owners who carried one when the calling
	// run was admitted. Nil (none, or a run admitted before the field existed): such a
	// role is refused.
	Labels []string
	// Environment is the runtime key's environment the calling run was admitted in
	// (schema.Run.Environment; "" is production): its jobs are admitted in it, so they
	// run that environment's release.
	Environment string
}

// CallerOf is the caller a run record names: only what its admission recorded, nothing
// the model can touch.
func CallerOf(run string, r *schema.Run) Caller {
	c := Caller{Run: run, Owner: r.OwnerID, Conversation: r.ConversationID,
		App: apptools.AppOfRequestID(r.RequestID), Labels: r.OwnerLabels}
	if r.Environment != nil {
		c.Environment = *r.Environment
	}
	return c
}

// Job is what job_status and list_jobs report of a job.
type Job struct {
	Job    string `json:"job"`
	Role   string `json:"role"`
	Title  string `json:"title,omitempty"`
	Status string `json:"status"`
	Phase  string `json:"phase,omitempty"`
	// Progress in the harness's own units, only when it reported both counts.
	Completed   *int64 `json:"completed,omitempty"`
	Total       *int64 `json:"total,omitempty"`
	QueueReason string `json:"queueReason,omitempty"`
	Position    *int64 `json:"queuePosition,omitempty"`
	Error       string `json:"error,omitempty"`
	EnqueuedAt  string `json:"enqueuedAt,omitempty"`
	// Done: the job ended; its answer and artifacts are in the conversation.
	Done bool `json:"done"`
}

// RunState is a job's run as the record of truth has it (Server.State).
type RunState struct {
	Status, Phase, QueueReason, Error string
	Completed, Total, Position        *int64
	Terminal                          bool
}

// Server serves the tools (doc.go).
type Server struct {
	Registry *Registry
	// Key, when set, is required as a Bearer token (the Hermes profile's static header).
	Key string
	// Runs names the owner and conversation of a run (its record; immutable facts).
	Runs func(ctx context.Context, run string) (Caller, error)
	// Admit admits a job (admit.Admitter.Admit on the agent's store).
	Admit func(ctx context.Context, req admit.Request) (admit.Result, error)
	// Labels, when set, names the owner's labels for a calling run that carries none
	// (Caller.Labels nil); nil or an error: none known, so a role restricted to labels is
	// refused. The daemon sets none: its key cannot read users.
	Labels func(ctx context.Context, owner string) ([]string, error)
	// State reads a job's run.
	State func(ctx context.Context, run string) (RunState, error)
	// Apps, when set, serves app_tool (host-app tools with signed callbacks; apps.go).
	Apps *AppTools
	// Path is the MCP endpoint's path (default DefaultPath); every other path is 404.
	Path string
	// AllowedOrigins are the browser origins ("scheme://host[:port]") allowed to call,
	// besides loopback ones (localhost, 127.0.0.0/8, ::1). A request carrying any other
	// Origin is refused with 403, as MCP's Streamable HTTP transport requires (DNS
	// rebinding); one without Origin (Hermes, a server-side client) is fine.
	AllowedOrigins []string
	// MatchWait bounds the wait for the gateway's registration of a call (default 3 s).
	MatchWait time.Duration
	Log       *slog.Logger
	Now       func() time.Time

	once    sync.Once
	handler http.Handler
	mu      sync.Mutex
	callers map[string]Caller
}

const (
	maxInstructions = 32 << 10
	maxTitle        = 200
	jobTTL          = 30 * 24 * time.Hour
)

func jobKey(job string) string   { return queue.MCPJobKey(job) }
func convKey(conv string) string { return queue.MCPConvJobsKey(conv) }

func (s *Server) log() *slog.Logger {
	if s.Log != nil {
		return s.Log
	}
	return slog.Default()
}

func (s *Server) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}

// ServeHTTP serves MCP over Streamable HTTP (stateless: every request stands alone, so
// nothing is kept per Hermes connection).
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s.once.Do(func() {
		srv := mcp.NewServer(&mcp.Implementation{Name: serverName, Version: "1"}, nil)
		mcp.AddTool(srv, &mcp.Tool{Name: ToolEnqueue, Description: "Enqueue a background job for another work role (e.g. research or coding on the heavy GPU) " +
			"and keep chatting. The job runs on its own with only the instructions given (it does not see this conversation); " +
			"its answer and files appear in this conversation when it ends. Returns the job id."}, s.enqueue)
		mcp.AddTool(srv, &mcp.Tool{Name: ToolStatus, Annotations: readOnly, Description: "The status of a job enqueue_job started: queued, waiting, running (with progress when known), or how it ended."}, s.status)
		mcp.AddTool(srv, &mcp.Tool{Name: ToolList, Annotations: readOnly, Description: "The jobs enqueued from this conversation, newest first, with their status."}, s.list)
		if s.Apps != nil {
			mcp.AddTool(srv, &mcp.Tool{Name: ToolApp, Description: "Call a tool of the application this conversation serves " +
				"(its tools, their descriptions and argument schemas are listed in your instructions). Returns the application's answer."}, s.appTool)
		}
		s.handler = mcp.NewStreamableHTTPHandler(func(*http.Request) *mcp.Server { return srv },
			&mcp.StreamableHTTPOptions{Stateless: true, JSONResponse: true})
	})
	path := s.Path
	if path == "" {
		path = DefaultPath
	}
	if r.URL.Path != path {
		writeJSON(w, http.StatusNotFound, `{"error":{"code":"not_found","message":"the MCP endpoint is `+path+`"}}`)
		return
	}
	// Origin first (MCP Streamable HTTP, Security Warning: MUST validate it, 403 when
	// invalid), so a page of another site learns nothing, not even whether a key is needed.
	if o := r.Header.Get("Origin"); o != "" && !s.originAllowed(o) {
		writeJSON(w, http.StatusForbidden, `{"error":{"code":"origin_not_allowed","message":"this origin may not call the MCP server"}}`)
		return
	}
	if s.Key != "" {
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		member := ""
		if ok && subtle.ConstantTimeCompare([]byte(got), []byte(s.Key)) != 1 {
			member, ok = memberkey.Owner(s.Key, got)
		}
		if !ok {
			// RFC 6750 §3 challenge (MCP authorization: a 401 carries WWW-Authenticate).
			// The key is static (the Hermes profile's header): no OAuth metadata to name.
			challenge := `Bearer realm="` + serverName + `"`
			if got != "" {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			writeJSON(w, http.StatusUnauthorized, `{"error":{"code":"invalid_api_key","message":"the MCP server's key is required as a Bearer token"}}`)
			return
		}
		if member != "" {
			// A member's own Hermes (agent/homes) holds a member key: its calls answer only
			// that member's runs (caller).
			r = r.WithContext(context.WithValue(r.Context(), memberCtx{}, member))
		}
	}
	if r.Method == http.MethodPost {
		body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxBody))
		if err != nil {
			writeJSON(w, http.StatusRequestEntityTooLarge, `{"error":{"code":"too_large","message":"the request body is too large"}}`)
			return
		}
		if id, method, ok := unknownCall(body); ok {
			// The SDK answers a method it does not know with a plain-text 400 (before
			// protocol 2026-07-28); JSON-RPC 2.0 §5.1 says -32601 in a response.
			resp, _ := json.Marshal(map[string]any{"jsonrpc": "2.0", "id": id,
				"error": map[string]any{"code": -32601, "message": "Method not found: " + method}})
			writeJSON(w, http.StatusOK, string(resp))
			return
		}
		r.Body = io.NopCloser(bytes.NewReader(body))
	}
	s.handler.ServeHTTP(w, r)
}

// originAllowed: an origin on the allow-list, or a page of this machine's loopback (an
// attacker's page rebound to a loopback address still has its own name as its origin).
func (s *Server) originAllowed(origin string) bool {
	if slices.Contains(s.AllowedOrigins, origin) {
		return true
	}
	u, err := url.Parse(origin)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Path != "" || u.User != nil {
		return false
	}
	switch h := u.Hostname(); h {
	case "localhost":
		return true
	default:
		ip, err := netip.ParseAddr(h)
		return err == nil && ip.IsLoopback()
	}
}

// DefaultPath is the MCP endpoint's path when Server.Path is empty.
const DefaultPath = "/mcp"

const (
	serverName = "private-assistant-jobs"
	maxBody    = 4 << 20
)

func writeJSON(w http.ResponseWriter, status int, body string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = io.WriteString(w, body)
}

// knownMethods are the requests the SDK's server dispatches (go-sdk mcp/server.go
// serverMethodInfos, v1.8.0); notifications are not answered and stay the SDK's.
var knownMethods = []string{"initialize", "ping", "tools/list", "tools/call", "resources/list",
	"resources/templates/list", "resources/read", "resources/subscribe", "resources/unsubscribe",
	"prompts/list", "prompts/get", "completion/complete", "logging/setLevel", "server/discover",
	"subscriptions/listen"}

// unknownCall reports a single JSON-RPC request (one with an id) whose method the server
// does not know, with its id and method. Anything else (a batch, a notification, a
// response, malformed JSON) is left to the SDK.
func unknownCall(body []byte) (id json.RawMessage, method string, ok bool) {
	var m struct {
		JSONRPC string          `json:"jsonrpc"`
		ID      json.RawMessage `json:"id"`
		Method  *string         `json:"method"`
	}
	if json.Unmarshal(body, &m) != nil || m.JSONRPC != "2.0" || m.Method == nil || len(m.ID) == 0 || string(m.ID) == "null" {
		return nil, "", false
	}
	if slices.Contains(knownMethods, *m.Method) {
		return nil, "", false
	}
	return m.ID, *m.Method, true
}

// readOnly marks the reading tools (Hermes replays only those after a lost session; a
// replayed enqueue_job is still one job, RequestID).
var readOnly = &mcp.ToolAnnotations{ReadOnlyHint: true}

func (s *Server) matchWait() time.Duration {
	if s.MatchWait > 0 {
		return s.MatchWait
	}
	return 3 * time.Second
}

// memberCtx carries the member a request's member key names (ServeHTTP).
type memberCtx struct{}

// errForeign: a pending call of another member than the request's key names.
var errForeign = errors.New("mcp jobs: a call of another member")

// caller is the run a call of tool with canon arguments came from.
func (s *Server) caller(ctx context.Context, tool, canon string) (Caller, string, error) {
	var got Caller
	member, _ := ctx.Value(memberCtx{}).(string)
	e, err := s.Registry.claim(ctx, tool, canon, s.matchWait(), func(ctx context.Context, run string) (string, error) {
		c, err := s.run(ctx, run)
		if err == nil && member != "" && c.Owner != member {
			return "", errForeign // another member's call: never claimed, never named
		}
		return c.Owner, err
	})
	if err == nil {
		got, err = s.run(ctx, e.Run)
	}
	switch {
	case errors.Is(err, ErrNoMatchingCall), errors.Is(err, errForeign):
		return got, "", errors.New("this call does not match a tool call of a run of this assistant; it was refused")
	case errors.Is(err, ErrAmbiguous):
		return got, "", errors.New("the same call is in flight for another conversation, so its caller is unclear; ask again in a moment")
	case err != nil:
		s.log().Warn("mcp jobs: caller unknown", "tool", tool, "err", err)
		return got, "", errors.New("the job service is unavailable; try again")
	}
	return got, e.Call, nil
}

// run reads a run's caller facts (cached: they never change).
func (s *Server) run(ctx context.Context, run string) (Caller, error) {
	s.mu.Lock()
	c, ok := s.callers[run]
	s.mu.Unlock()
	if ok {
		return c, nil
	}
	c, err := s.Runs(ctx, run)
	if err != nil {
		return c, err
	}
	c.Run = run
	s.mu.Lock()
	if s.callers == nil || len(s.callers) > 4096 {
		s.callers = map[string]Caller{}
	}
	s.callers[run] = c
	s.mu.Unlock()
	return c, nil
}

// EnqueueResult is enqueue_job's answer.
type EnqueueResult struct {
	Job     string `json:"job"`
	Role    string `json:"role"`
	Status  string `json:"status"`
	Message string `json:"message"`
}

func userMessage(err error) string {
	var f *fault.Error
	if errors.As(err, &f) && f.Message != "" {
		return f.Message
	}
	return "the job could not be enqueued; try again"
}

func (s *Server) enqueue(ctx context.Context, _ *mcp.CallToolRequest, in EnqueueArgs) (*mcp.CallToolResult, EnqueueResult, error) {
	var out EnqueueResult
	canon, _ := canonical(ToolEnqueue, mustJSON(in))
	in.Role, in.Title = strings.TrimSpace(in.Role), strings.TrimSpace(in.Title)
	switch {
	case in.Role == "":
		return nil, out, errors.New("role is required")
	case strings.TrimSpace(in.Instructions) == "":
		return nil, out, errors.New("instructions are required")
	case len(in.Instructions) > maxInstructions:
		return nil, out, fmt.Errorf("instructions are limited to %d bytes", maxInstructions)
	case utf8.RuneCountInString(in.Title) > maxTitle:
		return nil, out, fmt.Errorf("title is limited to %d characters", maxTitle)
	}
	c, call, err := s.caller(ctx, ToolEnqueue, canon)
	if err != nil {
		return nil, out, err
	}
	labels := c.Labels
	if labels == nil && s.Labels != nil {
		if l, err := s.Labels(ctx, c.Owner); err == nil {
			labels = l
		} else {
			s.log().Warn("mcp jobs: owner's labels unknown; restricted roles are refused", "owner", c.Owner, "err", err)
		}
	}
	text := "[Job for the " + in.Role + " role, enqueued by the assistant"
	if in.Title != "" {
		text += ": " + in.Title
	}
	text += "]\n\n" + in.Instructions
	res, err := s.Admit(ctx, admit.Request{Owner: c.Owner, ConversationID: c.Conversation, RequestID: RequestID(c.Run, call),
		Text: text, Role: in.Role, Labels: labels, LabelsCarried: true, Environment: c.Environment})
	queuedLater := errors.Is(err, admit.ErrNotEnqueued)
	if err != nil && !queuedLater {
		s.log().Info("mcp jobs: enqueue refused", "run", c.Run, "role", in.Role, "err", err)
		return nil, out, errors.New(userMessage(err))
	}
	rdb := s.Registry.RDB
	now := s.now()
	_, err = rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.HSetNX(ctx, jobKey(res.RunID), "enqueuedAt", now.UTC().Format(time.RFC3339))
		p.HSet(ctx, jobKey(res.RunID), "owner", c.Owner, "conversation", c.Conversation, "role", in.Role, "title", in.Title,
			"parent", c.Run, "call", call)
		p.Expire(ctx, jobKey(res.RunID), jobTTL)
		p.ZAddNX(ctx, convKey(c.Conversation), redis.Z{Score: float64(now.UnixMilli()), Member: res.RunID})
		p.Expire(ctx, convKey(c.Conversation), jobTTL)
		return nil
	})
	if err != nil {
		// The job is admitted; only its listing here is missing (job_status still finds it
		// after a retry of this call).
		s.log().Warn("mcp jobs: job not recorded", "job", res.RunID, "err", err)
	}
	s.log().Info("mcp jobs: job enqueued", "job", res.RunID, "role", in.Role, "run", c.Run, "call", call)
	out = EnqueueResult{Job: res.RunID, Role: in.Role, Status: res.Status,
		Message: "The job is queued. Its answer and files will appear in this conversation when it ends; job_status reports its progress."}
	if queuedLater {
		out.Message = "The job is saved and will start when the job queue is back; its answer will appear in this conversation."
	}
	return nil, out, nil
}

// job reads a job the owner enqueued here, or ok=false.
func (s *Server) job(ctx context.Context, owner, id string) (Job, bool, error) {
	h, err := s.Registry.RDB.HGetAll(ctx, jobKey(id)).Result()
	if err != nil {
		return Job{}, false, err
	}
	if h["owner"] == "" || h["owner"] != owner {
		return Job{}, false, nil // another user's job reads like a missing one
	}
	j := Job{Job: id, Role: h["role"], Title: h["title"], EnqueuedAt: h["enqueuedAt"]}
	st, err := s.State(ctx, id)
	if err != nil {
		return j, true, err
	}
	j.Status, j.Phase, j.QueueReason, j.Error, j.Done = st.Status, st.Phase, st.QueueReason, st.Error, st.Terminal
	if st.Completed != nil && st.Total != nil && *st.Total > 0 {
		j.Completed, j.Total = st.Completed, st.Total
	}
	if !st.Terminal {
		j.Position = st.Position
	}
	return j, true, nil
}

func (s *Server) status(ctx context.Context, _ *mcp.CallToolRequest, in StatusArgs) (*mcp.CallToolResult, Job, error) {
	canon, _ := canonical(ToolStatus, mustJSON(in))
	c, _, err := s.caller(ctx, ToolStatus, canon)
	if err != nil {
		return nil, Job{}, err
	}
	j, ok, err := s.job(ctx, c.Owner, strings.TrimSpace(in.Job))
	switch {
	case err != nil:
		s.log().Warn("mcp jobs: status unavailable", "job", in.Job, "err", err)
		return nil, Job{}, errors.New("the job's status is unavailable; try again")
	case !ok:
		return nil, Job{}, fmt.Errorf("no job %q was enqueued by you", in.Job)
	}
	return nil, j, nil
}

// ListResult is list_jobs's answer.
type ListResult struct {
	Jobs []Job `json:"jobs"`
}

func (s *Server) list(ctx context.Context, _ *mcp.CallToolRequest, in ListArgs) (*mcp.CallToolResult, ListResult, error) {
	out := ListResult{Jobs: []Job{}}
	canon, _ := canonical(ToolList, mustJSON(in))
	c, _, err := s.caller(ctx, ToolList, canon)
	if err != nil {
		return nil, out, err
	}
	ids, err := s.Registry.RDB.ZRevRange(ctx, convKey(c.Conversation), 0, 19).Result()
	if err != nil {
		return nil, out, errors.New("the job list is unavailable; try again")
	}
	for _, id := range ids {
		j, ok, err := s.job(ctx, c.Owner, id)
		if err != nil {
			j.Status = "unknown"
		}
		if ok {
			out.Jobs = append(out.Jobs, j)
		}
	}
	return nil, out, nil
}

func mustJSON(v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		return "{}"
	}
	return string(b)
}
