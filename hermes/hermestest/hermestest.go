// Package hermestest is a test double of the Hermes Agent API server that follows
// contracts/hermes.md to the letter where the project depends on it: the 16+ character
// key guard, Bearer auth with the NEW 401 envelope, 403 with an empty body for a
// foreign Origin, capabilities with runs_idempotency, sessions (unique titles),
// idempotent runs (202 replayed:true, 409 on a changed body, 400 on a bad key), the
// status machine, one SSE consumer per run with the whole backlog and 404 for a second
// subscriber, keepalives, ": stream closed", stop → stopping → cancelled, approval 409s,
// and a restart that turns unsettled durable runs into "interrupted".
//
// Its "thinking" calls a real OpenAI-compatible endpoint (streaming, with tools), so the
// real inference path is exercised. Tools: "terminal" needs approval and runs nothing;
// "write_file" writes into ArtifactDir/<run_id>/. It is also runnable on its own
// (cmd/hermes-double).
//
// Differences from a real Hermes (all deliberate): one credential and one profile; no
// /v1/chat/completions, /v1/responses or steer; tool execution is simulated.
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
	"strings"
	"sync"
	"time"
)

// Options configure the double.
type Options struct {
	APIKey         string   // API_SERVER_KEY: 16+ characters, not a placeholder
	CORSOrigins    []string // API_SERVER_CORS_ORIGINS
	ModelURL       string   // OpenAI-compatible base URL, e.g. http://127.0.0.1:9000/v1
	ModelKey       string   // upstream key (never shown to callers)
	Model          string   // model.default
	DataDir        string   // HERMES_HOME: durable idempotency + sessions; empty = :memory:
	ArtifactDir    string   // where write_file puts files (per run)
	MaxConcurrent  int      // gateway.api_server.max_concurrent_runs (default 10; 0 → 10)
	Keepalive      time.Duration
	ApprovalTools  []string      // tools that need approval (default: terminal)
	ApprovalTTL    time.Duration // unanswered approvals are denied after this (default 300 s)
	SecondSubDelay time.Duration // how long a second subscriber waits before 404 (default 1 s)
	Version        string
	Logger         *slog.Logger
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
	dropped  map[string]bool       // runs whose stream the test asked to drop
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

type usage struct {
	InputTokens  int `json:"input_tokens"`
	OutputTokens int `json:"output_tokens"`
	TotalTokens  int `json:"total_tokens"`
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
	approval             map[string]any // the pending approval.request event
	approvalCh           chan approvalAnswer
	cancel               context.CancelFunc
	stopRequested        bool

	// event queue: one consumer; nil after that consumer is gone
	queue      []map[string]any
	queueOpen  bool
	subscribed bool
	notify     chan struct{}
	done       bool // terminal event queued
	createdAt  time.Time
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
	if opts.SecondSubDelay == 0 {
		opts.SecondSubDelay = time.Second
	}
	if opts.Version == "" {
		opts.Version = "0.21.3"
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
		idem: map[string]idemRecord{}, dropped: map[string]bool{}, ctx: ctx, cancel: cancel}
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

// RunsCreated is how many native runs were really created (replays excluded).
func (s *Server) RunsCreated() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.created
}

// DropStream makes the run's current SSE consumer lose its connection (a network drop).
func (s *Server) DropStream(runID string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.dropped[runID] = true
	if r := s.runs[runID]; r != nil {
		r.signal()
	}
}

func (r *run) signal() {
	select {
	case r.notify <- struct{}{}:
	default:
	}
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
	b, _ := json.Marshal(durable{Idem: s.idem, Sessions: s.sessions})
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
	if r.status == "completed" {
		m["output"] = r.output
		m["usage"] = r.usage
	}
	if r.status == "failed" && r.errMsg != nil {
		m["error"] = *r.errMsg
	}
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
