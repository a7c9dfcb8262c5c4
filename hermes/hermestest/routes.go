package hermestest

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"
)

func (s *Server) routes() {
	s.mux = http.NewServeMux()
	open := func(p string, h http.HandlerFunc) { s.mux.HandleFunc(p, h) }
	authed := func(p string, h http.HandlerFunc) {
		s.mux.HandleFunc(p, func(w http.ResponseWriter, r *http.Request) {
			if !s.authorized(r) {
				writeJSON(w, 401, errBody("Invalid gateway API key (API_SERVER_KEY)", "gateway_auth_error", "gateway_auth_failed"))
				return
			}
			h(w, r)
		})
	}
	health := func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"status": "ok", "platform": "hermes-agent", "version": s.opts.Version})
	}
	open("GET /health", health)
	open("GET /v1/health", health)
	authed("GET /v1/capabilities", s.capabilities)
	authed("POST /api/sessions", s.createSession)
	authed("GET /api/sessions/{id}", s.getSession)
	authed("GET /api/sessions/{id}/messages", s.sessionMessages)
	authed("POST /v1/runs", s.submitRun)
	authed("GET /v1/runs/{id}", s.getRun)
	authed("GET /v1/runs/{id}/events", s.events)
	authed("POST /v1/runs/{id}/stop", s.stopRun)
	authed("POST /v1/runs/{id}/approval", s.approve)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 404, errBody("Not found", "invalid_request_error", "not_found"))
	})
}

// ServeHTTP applies CORS (a foreign Origin is 403 with an empty body on every route),
// the security headers and the 10 MB body cap.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Referrer-Policy", "no-referrer")
	if o := r.Header.Get("Origin"); o != "" {
		allowed := false
		for _, a := range s.opts.CORSOrigins {
			if a == "*" || a == o {
				allowed = true
			}
		}
		if !allowed {
			w.WriteHeader(403)
			return
		}
		w.Header().Set("Access-Control-Allow-Origin", o)
		w.Header().Set("Vary", "Origin")
		w.Header().Set("Access-Control-Max-Age", "600")
		w.Header().Set("Access-Control-Allow-Methods", "GET, POST, DELETE, OPTIONS")
		w.Header().Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Idempotency-Key, X-Hermes-Session-Id")
		if r.Method == http.MethodOptions {
			w.WriteHeader(200)
			return
		}
	}
	if r.ContentLength > 10_000_000 {
		writeJSON(w, 413, errBody("Request body too large", "invalid_request_error", "body_too_large"))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, 10_000_000)
	s.mux.ServeHTTP(w, r)
}

func (s *Server) authorized(r *http.Request) bool {
	h := r.Header.Get("Authorization")
	if !strings.HasPrefix(h, "Bearer ") {
		return false
	}
	tok := strings.TrimSpace(h[len("Bearer "):])
	return subtle.ConstantTimeCompare([]byte(tok), []byte(strings.TrimSpace(s.opts.APIKey))) == 1
}

func (s *Server) capabilities(w http.ResponseWriter, r *http.Request) {
	writeJSON(w, 200, map[string]any{
		"object": "hermes.api_server.capabilities", "platform": "hermes-agent", "model": "hermes-agent",
		"auth":    map[string]any{"type": "bearer", "required": true},
		"runtime": map[string]any{"mode": "server_agent", "tool_execution": "server", "split_runtime": false},
		"features": map[string]any{
			"chat_completions": false, "responses_api": false, "run_submission": true,
			"runs_idempotency": map[string]any{"supported": true, "durable": s.opts.DataDir != "", "retention_seconds": 86400},
			"run_status":       true, "run_events_sse": true, "run_stop": true, "run_steer": false,
			"run_approval_response": true, "tool_progress_events": true, "approval_events": true,
			"session_resources": true, "session_chat": false, "cors": len(s.opts.CORSOrigins) > 0,
		},
		"endpoints": map[string]any{
			"health": map[string]any{"method": "GET", "path": "/health"}, "runs": map[string]any{"method": "POST", "path": "/v1/runs"},
			"run_status": map[string]any{"method": "GET", "path": "/v1/runs/{run_id}"}, "run_events": map[string]any{"method": "GET", "path": "/v1/runs/{run_id}/events"},
			"run_approval": map[string]any{"method": "POST", "path": "/v1/runs/{run_id}/approval"}, "run_stop": map[string]any{"method": "POST", "path": "/v1/runs/{run_id}/stop"},
			"session_create": map[string]any{"method": "POST", "path": "/api/sessions"}, "session_messages": map[string]any{"method": "GET", "path": "/api/sessions/{session_id}/messages"},
		},
	})
}

var sessionIDRe = regexp.MustCompile(`^[^\r\n\x00/\\]{1,256}$`)

func sessionJSON(se *session) map[string]any {
	var title any
	if se.Title != "" {
		title = se.Title
	}
	return map[string]any{"id": se.ID, "source": se.Source, "model": se.Model, "title": title, "started_at": se.StartedAt,
		"ended_at": nil, "end_reason": nil, "message_count": len(se.Messages), "has_system_prompt": false, "has_model_config": false}
}

func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body == nil {
		writeJSON(w, 400, errBody("Request body must be a JSON object", "invalid_request_error", "invalid_json"))
		return
	}
	id, _ := body["id"].(string)
	if id == "" {
		id, _ = body["session_id"].(string)
	}
	if id != "" && !sessionIDRe.MatchString(id) {
		writeJSON(w, 400, errBody("Invalid session id", "invalid_request_error", "invalid_session_id"))
		return
	}
	title, _ := body["title"].(string)
	s.mu.Lock()
	defer s.mu.Unlock()
	if id == "" {
		id = fmt.Sprintf("api_%d_%s", time.Now().Unix(), newHex(4))
	}
	if s.sessions[id] != nil {
		writeJSON(w, 409, errBody("Session already exists", "invalid_request_error", "session_exists"))
		return
	}
	if title != "" {
		for _, se := range s.sessions {
			if se.Title == title {
				writeJSON(w, 400, errBody(fmt.Sprintf("Title '%s' is already in use by session %s", title, se.ID), "invalid_request_error", "invalid_title"))
				return
			}
		}
	}
	se := &session{ID: id, Title: title, Source: "api_server", StartedAt: now()}
	if m, ok := body["model"].(string); ok {
		se.Model = &m
	}
	s.sessions[id] = se
	s.saveLocked()
	writeJSON(w, 201, map[string]any{"object": "hermes.session", "session": sessionJSON(se)})
}

func (s *Server) getSession(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.sessions[r.PathValue("id")]
	if se == nil {
		writeJSON(w, 404, errBody("Session not found", "invalid_request_error", "session_not_found"))
		return
	}
	writeJSON(w, 200, map[string]any{"object": "hermes.session", "session": sessionJSON(se)})
}

func (s *Server) sessionMessages(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	bad := func() {
		writeJSON(w, 400, errBody("Invalid pagination", "invalid_request_error", "invalid_pagination"))
	}
	limit, offset := 500, 0
	_, hasLimit := q["limit"]
	if hasLimit {
		n, err := strconv.Atoi(q.Get("limit"))
		if err != nil || n < 0 {
			bad()
			return
		}
		limit = min(n, 500)
	}
	if v := q.Get("offset"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 0 {
			bad()
			return
		}
		offset = n
	}
	order := q.Get("order")
	switch order {
	case "":
		order = "latest"
		if hasLimit {
			order = "oldest"
		}
	case "oldest", "latest":
	default:
		bad()
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	se := s.sessions[r.PathValue("id")]
	if se == nil {
		writeJSON(w, 404, errBody("Session not found", "invalid_request_error", "session_not_found"))
		return
	}
	msgs := se.Messages
	var page []message
	if order == "oldest" {
		if offset < len(msgs) {
			page = msgs[offset:min(len(msgs), offset+limit)]
		}
	} else {
		end := len(msgs) - offset
		if end > 0 {
			page = msgs[max(0, end-limit):end]
		}
	}
	data := []any{}
	for _, m := range page {
		row := map[string]any{"id": m.ID, "session_id": se.ID, "role": m.Role, "content": m.Content, "timestamp": m.Timestamp}
		if m.Finish != "" {
			row["finish_reason"] = m.Finish
		}
		data = append(data, row)
	}
	writeJSON(w, 200, map[string]any{"object": "list", "session_id": se.ID, "data": data,
		"pagination": map[string]any{"limit": limit, "offset": offset, "order": order, "returned": len(data)}})
}

func validKey(k string) bool {
	if len(k) == 0 || len(k) > 255 {
		return false
	}
	for i := 0; i < len(k); i++ {
		if k[i] < 0x21 || k[i] > 0x7e {
			return false
		}
	}
	return true
}

func (s *Server) submitRun(w http.ResponseWriter, r *http.Request) {
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		writeJSON(w, 413, errBody("Request body too large", "invalid_request_error", "body_too_large"))
		return
	}
	var body map[string]any
	if json.Unmarshal(raw, &body) != nil || body == nil {
		writeJSON(w, 400, errBody("Invalid JSON", "invalid_request_error", "invalid_json"))
		return
	}
	input, history, err := parseInput(body)
	if err != nil {
		writeJSON(w, 400, errBody(err.Error(), "invalid_request_error", ""))
		return
	}
	key := strings.TrimSpace(r.Header.Get("Idempotency-Key"))
	if key != "" && !validKey(key) {
		writeJSON(w, 400, errBody("Invalid Idempotency-Key", "invalid_request_error", "invalid_idempotency_key"))
		return
	}
	fp := fingerprint(body, r.Header.Get("X-Hermes-Session-Key"))
	s.mu.Lock()
	if key != "" {
		if rec, ok := s.idem[key]; ok {
			s.mu.Unlock()
			if rec.Fingerprint != fp {
				writeJSON(w, 409, errBody("Idempotency-Key was already used with a different request payload", "invalid_request_error", "idempotency_key_conflict"))
				return
			}
			st := s.currentStatus(rec.RunID)
			w.Header().Set("Idempotency-Replayed", "true")
			writeJSON(w, 202, map[string]any{"run_id": rec.RunID, "status": st, "replayed": true})
			return
		}
	}
	active := 0
	for _, x := range s.runs {
		if x.status != "completed" && x.status != "failed" && x.status != "cancelled" && x.status != "interrupted" {
			active++
		}
	}
	if s.opts.MaxConcurrent > 0 && active >= s.opts.MaxConcurrent {
		s.mu.Unlock()
		w.Header().Set("Retry-After", "1")
		writeJSON(w, 429, errBody(fmt.Sprintf("Too many concurrent runs (max %d)", s.opts.MaxConcurrent), "rate_limit_error", "rate_limit_exceeded"))
		return
	}
	id := "run_" + newHex(16)
	sessionID, _ := body["session_id"].(string)
	if sessionID == "" {
		sessionID = id
	}
	model, _ := body["model"].(string)
	if model == "" {
		model = "hermes-agent"
	}
	t := now()
	ctx, cancel := context.WithCancel(s.ctx)
	x := &run{id: id, sessionID: sessionID, model: model, status: "queued", created: t, updated: t,
		queueOpen: true, notify: make(chan struct{}, 1), cancel: cancel, approvalCh: make(chan approvalAnswer, 4), createdAt: time.Now()}
	s.runs[id] = x
	s.created++
	if key != "" {
		s.idem[key] = idemRecord{RunID: id, Fingerprint: fp, Status: "queued", SessionID: sessionID, Model: model, CreatedAt: t, UpdatedAt: t, Owned: true}
		s.saveLocked()
	}
	instructions, _ := body["instructions"].(string)
	s.wg.Add(1)
	s.mu.Unlock()
	go func() {
		defer s.wg.Done()
		s.execute(ctx, x, input, history, instructions, body["conversation_history"] != nil)
	}()
	writeJSON(w, 202, map[string]any{"run_id": id, "status": "started", "replayed": false})
}

func parseInput(body map[string]any) (string, []message, error) {
	var history []message
	if h, ok := body["conversation_history"]; ok && h != nil {
		arr, ok := h.([]any)
		if !ok {
			return "", nil, fmt.Errorf("conversation_history must be an array")
		}
		for _, e := range arr {
			m, ok := e.(map[string]any)
			if !ok {
				return "", nil, fmt.Errorf("conversation_history entries must be objects")
			}
			role, _ := m["role"].(string)
			history = append(history, message{Role: role, Content: fmt.Sprint(m["content"])})
		}
	}
	switch in := body["input"].(type) {
	case string:
		if strings.TrimSpace(in) == "" {
			return "", nil, fmt.Errorf("Missing 'input' field")
		}
		return in, history, nil
	case []any:
		if len(in) == 0 {
			return "", nil, fmt.Errorf("Missing 'input' field")
		}
		for i, e := range in {
			m, _ := e.(map[string]any)
			role, _ := m["role"].(string)
			content := fmt.Sprint(m["content"])
			if i == len(in)-1 {
				if strings.TrimSpace(content) == "" {
					return "", nil, fmt.Errorf("No user message found in input")
				}
				return content, history, nil
			}
			if body["conversation_history"] == nil {
				history = append(history, message{Role: role, Content: content})
			}
		}
	}
	return "", nil, fmt.Errorf("Missing 'input' field")
}

// currentStatus reads a run's status; a durable run not owned by this process (the
// gateway restarted) lazily becomes interrupted.
func (s *Server) currentStatus(runID string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if r := s.runs[runID]; r != nil {
		return r.status
	}
	for k, rec := range s.idem {
		if rec.RunID == runID {
			if !terminal(rec.Status) {
				msg := "The gateway restarted before this run settled."
				rec.Status, rec.Error, rec.LastEvent, rec.UpdatedAt = "interrupted", &msg, "run.interrupted", now()
				s.idem[k] = rec
				s.saveLocked()
			}
			return rec.Status
		}
	}
	return ""
}

func terminal(st string) bool {
	return st == "completed" || st == "failed" || st == "cancelled" || st == "interrupted"
}

func (s *Server) notFound(w http.ResponseWriter, id string) {
	writeJSON(w, 404, errBody("Run not found: "+id, "invalid_request_error", "run_not_found"))
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st := s.currentStatus(id)
	s.mu.Lock()
	defer s.mu.Unlock()
	if x := s.runs[id]; x != nil {
		writeJSON(w, 200, s.runJSON(x))
		return
	}
	if st == "" {
		s.notFound(w, id)
		return
	}
	for _, rec := range s.idem {
		if rec.RunID == id {
			writeJSON(w, 200, s.recordJSON(rec))
			return
		}
	}
	s.notFound(w, id)
}

func (s *Server) stopRun(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	st := s.currentStatus(id)
	s.mu.Lock()
	x := s.runs[id]
	if x == nil {
		defer s.mu.Unlock()
		if st == "" {
			s.notFound(w, id)
			return
		}
		for _, rec := range s.idem {
			if rec.RunID == id && terminal(rec.Status) {
				writeJSON(w, 200, s.recordJSON(rec))
				return
			}
		}
		writeJSON(w, 409, errBody("Run is not active in this gateway", "invalid_request_error", "run_not_active"))
		return
	}
	if terminal(x.status) {
		defer s.mu.Unlock()
		writeJSON(w, 200, s.runJSON(x))
		return
	}
	x.stopRequested = true
	if x.status == "queued" {
		s.finishLocked(x, "cancelled", "run.cancelled", nil)
		s.mu.Unlock()
		x.cancel()
		writeJSON(w, 200, map[string]any{"run_id": id, "status": "stopping"})
		return
	}
	x.status, x.updated = "stopping", now()
	s.recordLocked(x)
	s.mu.Unlock()
	x.cancel() // the hard interrupt; the executor settles it as cancelled
	writeJSON(w, 200, map[string]any{"run_id": id, "status": "stopping"})
}

func (s *Server) approve(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	x := s.runs[id]
	s.mu.Unlock()
	if x == nil {
		s.notFound(w, id)
		return
	}
	var body map[string]any
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil {
		writeJSON(w, 400, errBody("Invalid JSON", "invalid_request_error", "invalid_json"))
		return
	}
	var reqID string
	if v, ok := body["request_id"]; ok {
		s, isStr := v.(string)
		if !isStr || s == "" || len(s) > 256 {
			writeJSON(w, 400, errBody("Invalid request_id", "invalid_request_error", "invalid_approval_request"))
			return
		}
		reqID = s
	}
	choice, _ := body["choice"].(string)
	switch choice {
	case "approve", "approved", "allow":
		choice = "once"
	case "once", "session", "always", "deny":
	default:
		writeJSON(w, 400, errBody("Invalid choice", "invalid_request_error", "invalid_approval_choice"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if x.status != "waiting_for_approval" || x.approval == nil {
		if terminal(x.status) {
			writeJSON(w, 409, errBody("No active approval session for this run", "invalid_request_error", "approval_not_active"))
			return
		}
		writeJSON(w, 409, errBody("No pending approval matched", "invalid_request_error", "approval_not_pending"))
		return
	}
	pending, _ := x.approval["request_id"].(string)
	if reqID != "" && reqID != pending {
		writeJSON(w, 409, errBody("No pending approval matched", "invalid_request_error", "approval_not_pending"))
		return
	}
	x.approval = nil
	x.status, x.updated = "running", now()
	x.approvalCh <- approvalAnswer{choice: choice, requestID: pending}
	res := map[string]any{"object": "hermes.run.approval_response", "run_id": id, "choice": choice, "resolved": 1}
	if reqID != "" {
		res["request_id"] = reqID
	}
	writeJSON(w, 200, res)
}

// events serves the one consumer of a run's queue: the whole backlog, then live events,
// keepalives, and ": stream closed" after the terminal event. A second subscriber waits
// ~1 s for a queue that never comes back, then gets 404.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	s.mu.Lock()
	x := s.runs[id]
	if x == nil || !x.queueOpen || x.subscribed {
		s.mu.Unlock()
		select {
		case <-time.After(s.opts.SecondSubDelay):
		case <-r.Context().Done():
			return
		}
		s.notFound(w, id)
		return
	}
	x.subscribed = true
	delete(s.dropped, id)
	s.mu.Unlock()
	defer func() {
		// The consumer is gone: the queue goes with it.
		s.mu.Lock()
		x.queueOpen, x.queue = false, nil
		s.mu.Unlock()
	}()
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.Header().Set("X-Accel-Buffering", "no")
	w.WriteHeader(200)
	fl, _ := w.(http.Flusher)
	flush := func() {
		if fl != nil {
			fl.Flush()
		}
	}
	flush()
	idle := time.NewTimer(s.opts.Keepalive)
	defer idle.Stop()
	for {
		s.mu.Lock()
		batch := x.queue
		x.queue = nil
		done := x.done
		drop := s.dropped[id]
		s.mu.Unlock()
		if drop {
			return // a dropped connection: no ": stream closed"
		}
		for _, ev := range batch {
			b, _ := json.Marshal(ev) // Go marshals maps sorted; the field order is not part of the contract we rely on
			fmt.Fprintf(w, "data: %s\n\n", b)
		}
		if len(batch) > 0 {
			flush()
			idle.Reset(s.opts.Keepalive)
		}
		if done && len(batch) == 0 {
			fmt.Fprint(w, ": stream closed\n\n")
			flush()
			return
		}
		if done {
			continue
		}
		select {
		case <-x.notify:
		case <-idle.C:
			fmt.Fprint(w, ": keepalive\n\n")
			flush()
			idle.Reset(s.opts.Keepalive)
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
	}
}
