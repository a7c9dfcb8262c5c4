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
	// /health/detailed is behind the key in this version (observed: hermesreal
	// TestCapabilitiesAdvertiseDurableRunIdempotency); its readiness checks are not modelled.
	authed("GET /health/detailed", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, 200, map[string]any{"status": "ok", "platform": "hermes-agent", "version": s.opts.Version, "checks": map[string]any{}})
	})
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
	s.mu.Lock()
	idem := s.idempotencyLocked()
	s.mu.Unlock()
	writeJSON(w, 200, map[string]any{
		"object": "hermes.api_server.capabilities", "platform": "hermes-agent", "model": "hermes-agent",
		"auth":    map[string]any{"type": "bearer", "required": true},
		"runtime": map[string]any{"mode": "server_agent", "tool_execution": "server", "split_runtime": false},
		"features": map[string]any{
			"chat_completions": false, "responses_api": false, "run_submission": true,
			"runs_idempotency": idem,
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
		s.pruneLocked()
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
	// The cap counts only genuinely new runs: the replay lookup above comes first
	// (api_server_runs.py:683-693; observed: hermesreal ConcurrencyCapAndReplay).
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
	// The run's stream exists from admission, so events are retained before anyone
	// subscribes (api_server_runs.py:714).
	x := &run{id: id, sessionID: sessionID, model: model, status: "queued", created: t, updated: t,
		stream: &runStream{subs: map[*subscriber]struct{}{}}, cancel: cancel, approvalCh: make(chan approvalAnswer, 4), createdAt: time.Now()}
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
		s.finishLocked(x, "cancelled", "run.cancelled", nil, nil)
		s.mu.Unlock()
		x.cancel()
		writeJSON(w, 200, map[string]any{"run_id": id, "status": "stopping"})
		return
	}
	// Stop records last_event run.stopping with the status (api_server_runs.py:1266).
	x.status, x.updated, x.lastEvent = "stopping", now(), "run.stopping"
	s.recordLocked(x)
	s.mu.Unlock()
	x.cancel() // the hard interrupt; the executor settles it as cancelled
	writeJSON(w, 200, map[string]any{"run_id": id, "status": "stopping"})
}

// approve follows _handle_run_approval (api_server_runs.py:1168-1217).
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
	if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body == nil {
		writeJSON(w, 400, errBody("Invalid JSON", "invalid_request_error", ""))
		return
	}
	// The choice is str()-ed, trimmed and lower-cased, then aliased (:1179-1180).
	choice := ""
	if v, ok := body["choice"]; ok && v != nil {
		choice = strings.ToLower(strings.TrimSpace(fmt.Sprint(v)))
	}
	switch choice {
	case "approve", "approved", "allow":
		choice = "once"
	}
	// request_id is trimmed; present but empty, not a string or over 256 is invalid (:1182-1190).
	rawReqID, hasReqID := body["request_id"]
	reqID := ""
	if v, ok := rawReqID.(string); ok {
		reqID = strings.TrimSpace(v)
	}
	if hasReqID && rawReqID != nil && (reqID == "" || len(reqID) > 256) {
		writeJSON(w, 400, errBody("Approval request_id is invalid.", "invalid_request_error", "invalid_approval_request"))
		return
	}
	switch choice {
	case "once", "session", "always", "deny":
	default:
		writeJSON(w, 400, errBody("Invalid approval choice; expected one of: always, deny, once, session", "invalid_request_error", "invalid_approval_choice"))
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	// The approval session lives until the run's task ends (:523-527 retire, :1191-1193).
	if terminal(x.status) {
		writeJSON(w, 409, errBody("Run has no active approval session: "+id, "invalid_request_error", "approval_not_active"))
		return
	}
	// Nothing pending (never asked, answered, or expired) or another request_id: 409 (:1208-1211).
	if x.pending == "" || (reqID != "" && reqID != x.pending) {
		writeJSON(w, 409, errBody("Run has no pending approval: "+id, "invalid_request_error", "approval_not_pending"))
		return
	}
	pending := x.pending
	x.pending, x.approval = "", nil
	// The answer resets the status to running, records last_event approval.responded and
	// queues the event, with request_id only when the client sent one (:1156-1158, :1212-1213).
	x.status = "running"
	ev := map[string]any{"choice": choice, "resolved": 1}
	res := map[string]any{"object": "hermes.run.approval_response", "run_id": id, "choice": choice}
	if reqID != "" {
		ev["request_id"], res["request_id"] = reqID, reqID
	}
	res["resolved"] = 1
	s.emitLocked(x, "approval.responded", ev)
	s.recordLocked(x)
	x.approvalCh <- approvalAnswer{choice: choice, requestID: pending}
	writeJSON(w, 200, res)
}

// events follows _handle_run_events (api_server_runs.py:1064-1153): wait up to
// SubscribeWait for the run's stream, attach after Last-Event-ID (or ?last_seq=), write
// ": open", a replay.truncated event when the backlog no longer reaches back that far,
// the retained events after that seq, then the live ones, each as "id: <seq>" plus data
// with a "seq" field, keepalives when idle, and ": stream closed" after the terminal
// event. Every subscriber gets all of this; none takes events from another.
func (s *Server) events(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	deadline := time.Now().Add(s.opts.SubscribeWait)
	var x *run
	for {
		s.mu.Lock()
		x = s.runs[id]
		if x != nil && x.stream != nil && len(x.stream.subs) == 0 && time.Since(x.createdAt) > s.opts.StreamTTL {
			x.stream = nil // swept: the transport buffer outlived _RUN_STREAM_TTL unwatched (:1284-1296)
		}
		if x != nil && x.stream != nil {
			break
		}
		s.mu.Unlock()
		if time.Now().After(deadline) {
			s.notFound(w, id)
			return
		}
		select {
		case <-time.After(50 * time.Millisecond):
		case <-r.Context().Done():
			return
		}
	}
	last := int64(-1)
	raw := r.Header.Get("Last-Event-ID")
	if raw == "" {
		raw = r.URL.Query().Get("last_seq")
	}
	if raw != "" {
		if n, err := strconv.ParseInt(strings.TrimSpace(raw), 10, 64); err == nil {
			last = max(-1, n)
		}
	}
	st := x.stream
	sub := &subscriber{notify: make(chan struct{}, 1), drop: make(chan struct{})}
	st.subs[sub] = struct{}{}
	batch := st.after(last)
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(st.subs, sub)
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
	fmt.Fprint(w, ": open\n\n")
	if len(batch) > 0 && batch[0].seq > last+1 {
		ev := map[string]any{"event": "replay.truncated", "run_id": id, "timestamp": now(), "oldest_retained_seq": batch[0].seq}
		if raw != "" {
			ev["requested_seq"] = last
		}
		b, _ := json.Marshal(ev)
		fmt.Fprintf(w, "data: %s\n\n", b)
	}
	flush()
	sent := last
	idle := time.NewTimer(s.opts.Keepalive)
	defer idle.Stop()
	for {
		for _, f := range batch {
			if f.ev == nil {
				fmt.Fprint(w, ": stream closed\n\n")
				flush()
				return
			}
			payload := make(map[string]any, len(f.ev)+1)
			for k, v := range f.ev {
				payload[k] = v
			}
			payload["seq"] = f.seq
			b, _ := json.Marshal(payload) // Go sorts map keys; field order is not part of what we rely on
			fmt.Fprintf(w, "id: %d\ndata: %s\n\n", f.seq, b)
			sent = f.seq
		}
		if len(batch) > 0 {
			flush()
			idle.Reset(s.opts.Keepalive)
		}
		select {
		case <-sub.notify:
		case <-sub.drop:
			return // a dropped connection: no ": stream closed"
		case <-idle.C:
			fmt.Fprint(w, ": keepalive\n\n")
			flush()
			idle.Reset(s.opts.Keepalive)
		case <-r.Context().Done():
			return
		case <-s.ctx.Done():
			return
		}
		s.mu.Lock()
		batch = st.after(sent)
		s.mu.Unlock()
		if len(batch) > 0 && batch[0].seq > sent+1 {
			return // this subscriber fell behind the retained backlog: closed, as a slow one is (:1139-1141)
		}
	}
}
