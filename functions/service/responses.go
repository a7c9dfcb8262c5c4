package service

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/redis/go-redis/v9"

	"privateassistant/admit"
	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/issuer"
	"privateassistant/longpoll"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
)

// The runtime API (issue 19 item 2): a host app's server calls it with a runtime key
// (Authorization: Bearer pak_…) and its user's stable id (X-App-User), OpenAI Responses
// style in background mode. A response is a run: its id is ResponseIDPrefix + the run id.

// ResponseIDPrefix starts every response id.
const ResponseIDPrefix = "resp_"

// AppUserHeader carries the host app's own identifier of the user it acts for.
const AppUserHeader = "X-App-User"

// rtCall is a verified runtime call: the key, its app and the user acted for.
type rtCall struct {
	st   *schema.Store
	id   runtimeapi.Identity
	key  *schema.RuntimeKey
	user runtimeapi.User
}

func invalidKey(msg string) error {
	return &fault.Error{Kind: fault.Unauthenticated, Code: "invalid_api_key", Message: msg}
}

// runtimeCaller verifies the key, counts the call against its rate limit and resolves
// the user. Nothing is read for the caller before the key is verified.
func (s *Service) runtimeCaller(r *http.Request, c *httpapi.Call) (*rtCall, error) {
	rc, err := s.runtimeApp(r, c)
	if err != nil {
		return nil, err
	}
	ext, err := RuntimeUser(r, rc.key, &s.userTokens)
	if err != nil {
		return nil, err
	}
	u, err := runtimeapi.NewUsers(rc.st, s.rdb).ResolveIn(r.Context(), rc.id, ext)
	if errors.Is(err, runtimeapi.ErrNotAppUser) {
		return nil, fault.Forbiddenf("user_not_available", "this user cannot be acted for with this key")
	}
	if err != nil {
		return nil, storeErr(err, "user")
	}
	rc.user = u
	return rc, nil
}

// RuntimeUser is the app's user a runtime call acts for. A key with user keys registered
// (runtimeapi.UserKeys) names it only by a user token its app signed
// (X-App-User-Token, verified on every call): the bare X-App-User header is refused, so
// the key alone cannot speak for a user. Other keys name it with X-App-User.
func RuntimeUser(r *http.Request, key *schema.RuntimeKey, v *runtimeapi.UserVerifier) (string, error) {
	tok := r.Header.Get(runtimeapi.UserTokenHeader)
	if _, ok := runtimeapi.KeysOf(key); ok {
		if tok == "" {
			return "", &fault.Error{Kind: fault.Unauthenticated, Code: "user_token_required", Message: "this key acts for a user only with " + runtimeapi.UserTokenHeader + ": a JWT your app signs (iss your issuer, aud your app id, sub the user, exp within 10 minutes)"}
		}
		ext, err := v.Subject(r.Context(), key, tok, time.Now())
		if err != nil {
			return "", &fault.Error{Kind: fault.Unauthenticated, Code: "invalid_user_token", Message: err.Error()}
		}
		if h := r.Header.Get(AppUserHeader); h != "" && h != ext {
			return "", &fault.Error{Kind: fault.Unauthenticated, Code: "invalid_user_token", Message: AppUserHeader + " names another user than the token"}
		}
		return ext, nil
	}
	if tok != "" {
		return "", badParam(runtimeapi.UserTokenHeader, "user_keys_not_registered",
			"this key has no user keys: register your issuer and keys (PUT /api/v1/user-keys) or send %s", AppUserHeader)
	}
	return AppUser(r)
}

// AppUser is the host app's user id from X-App-User, validated (400 invalid_user).
func AppUser(r *http.Request) (string, error) {
	ext := r.Header.Get(AppUserHeader)
	if !runtimeapi.ValidExternalID(ext) {
		return "", fault.Invalidf("invalid_user", "send %s: your user's stable id (1-%d printable characters)", AppUserHeader, schema.SizeExternalID)
	}
	return ext, nil
}

// audit records the use; a failed audit fails the call (every use is audited).
func (s *Service) audit(ctx context.Context, rc *rtCall, action, target string, detail map[string]any) error {
	if detail == nil {
		detail = map[string]any{}
	}
	detail["userId"] = rc.user.ID
	if err := runtimeapi.Audit(ctx, rc.st, rc.id, action, target, detail); err != nil {
		return storeErr(err, "audit")
	}
	return nil
}

// ownedResponse reads the run a response id names when it belongs to the caller: owned by
// the resolved user and admitted through this app. Anything else is 404, the same bytes
// as a missing one.
func (s *Service) ownedResponse(ctx context.Context, rc *rtCall, respID string) (*schema.Run, error) {
	return OwnedResponse(ctx, rc.st, s.rdb, rc.id.Space(), rc.user.ID, respID)
}

// OwnedResponse is ownedResponse for a caller already resolved to (space, userID): the
// stream service checks runtime event streams with it. appID is the key's space
// (runtimeapi.Identity.Space): a response admitted in another environment is missing.
func OwnedResponse(ctx context.Context, st *schema.Store, rdb redis.Cmdable, appID, userID, respID string) (*schema.Run, error) {
	notFound := fault.Missing("response", nil)
	runID, ok := strings.CutPrefix(respID, ResponseIDPrefix)
	if !ok || !validRunID(runID) {
		return nil, notFound
	}
	run, err := schema.For[schema.Run](st, schema.CollRuns).GetOwned(ctx, userID, runID)
	if errors.Is(err, schema.ErrNotFound) {
		return nil, notFound
	}
	if err != nil {
		return nil, storeErr(err, "response")
	}
	if !strings.HasPrefix(run.RequestID, runtimeapi.RequestIDPrefix(appID)) {
		return nil, notFound
	}
	// A response whose conversation was deleted (DELETE /api/v1/user, or a linked member's
	// delete in the web) is gone too: the cached owner says so ("-"), or, once that has
	// expired, the conversation's record is missing.
	gone, err := goneConversations(ctx, st, rdb, userID, []string{run.ConversationID})
	if err != nil {
		return nil, err
	}
	if gone[run.ConversationID] {
		return nil, notFound
	}
	return run, nil
}

// usedResponse is ownedResponse for a call that uses the response: the use is audited
// under action, and a response the caller may not see is audited as a refusal.
func (s *Service) usedResponse(ctx context.Context, rc *rtCall, respID, action string) (*schema.Run, error) {
	run, err := s.ownedResponse(ctx, rc, respID)
	if fault.KindOf(err) == fault.NotFound {
		if len(respID) > 64 {
			respID = respID[:64]
		}
		if aerr := s.audit(ctx, rc, runtimeapi.ActionRefused, "response/"+respID, map[string]any{"reason": "not_found", "action": action}); aerr != nil {
			return nil, aerr
		}
		return nil, err
	}
	if err != nil {
		return nil, err
	}
	if err := s.audit(ctx, rc, action, "response/"+ResponseIDPrefix+run.ID, nil); err != nil {
		return nil, err
	}
	return run, nil
}

func validRunID(id string) bool {
	if len(id) == 0 || len(id) > schema.SizeID {
		return false
	}
	for _, r := range id {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9') {
			return false
		}
	}
	return true
}

// responseStatus maps a run status onto OpenAI's response statuses.
func responseStatus(st schema.RunStatus) string {
	switch st {
	case schema.RunQueued, schema.RunWaitingForResource:
		return "queued"
	case schema.RunCompleted:
		return "completed"
	case schema.RunFailed, schema.RunInterrupted:
		return "failed"
	case schema.RunCancelled:
		return "cancelled"
	}
	return "in_progress" // running, waiting_for_approval, cancelling
}

// responseObject is a run as an Open Responses "response" object: every field its schema
// requires (openresponses/openresponses schema/components/schemas/ResponseResource.json)
// is present. Sampling parameters (temperature, top_p, the penalties, top_logprobs) are
// null: the role's model server applies its own defaults, which this API does not know
// and will not guess.
func (s *Service) responseObject(ctx context.Context, rc *rtCall, run *schema.Run) (map[string]any, error) {
	created := time.Now()
	if t, err := time.Parse(time.RFC3339Nano, run.QueuedAt); err == nil {
		created = t
	}
	out := []any{}
	if run.AssistantMessageID != nil && *run.AssistantMessageID != "" && schema.IsTerminal(run.Status) {
		msg, err := schema.For[schema.Message](rc.st, schema.CollMessages).GetOwned(ctx, rc.user.ID, *run.AssistantMessageID)
		if err != nil && !errors.Is(err, schema.ErrNotFound) {
			return nil, storeErr(err, "response")
		}
		if err == nil && msg.Text != nil {
			out = append(out, map[string]any{
				"type": "message", "id": "msg_" + msg.ID, "status": "completed", "role": "assistant",
				"content": []any{map[string]any{"type": "output_text", "text": *msg.Text, "annotations": []any{}}},
			})
		}
	}
	if run.Status == schema.RunWaitingForApproval {
		item, err := s.approvalRequestItem(ctx, rc, run)
		if err != nil {
			return nil, err
		}
		if item != nil {
			out = append(out, item)
		}
	}
	obj := map[string]any{
		"id": ResponseIDPrefix + run.ID, "object": "response", "created_at": created.Unix(), "completed_at": nil,
		"status": responseStatus(run.Status), "model": run.Role, "background": true, "store": true,
		"output": out, "error": nil, "incomplete_details": nil, "metadata": runtimeapi.Metadata(run.Metadata),
		"previous_response_id": nil, "instructions": nil, "reasoning": nil, "user": nil,
		"parallel_tool_calls": false, "tools": []any{}, "tool_choice": "auto", "truncation": "disabled",
		"text": map[string]any{"format": map[string]any{"type": "text"}}, "usage": nil,
		"temperature": nil, "top_p": nil, "presence_penalty": nil, "frequency_penalty": nil, "top_logprobs": nil,
		"max_output_tokens": nil, "max_tool_calls": nil, "service_tier": "default",
		"safety_identifier": nil, "prompt_cache_key": nil,
	}
	if run.PreviousRunID != nil && *run.PreviousRunID != "" {
		obj["previous_response_id"] = ResponseIDPrefix + *run.PreviousRunID
	}
	if run.Status == schema.RunCompleted && run.FinishedAt != nil {
		if t, err := time.Parse(time.RFC3339Nano, *run.FinishedAt); err == nil {
			obj["completed_at"] = t.Unix()
		}
	}
	if run.Status == schema.RunFailed || run.Status == schema.RunInterrupted {
		msg := "the run failed"
		if run.ErrorSummary != nil && *run.ErrorSummary != "" {
			msg = *run.ErrorSummary
		}
		obj["error"] = map[string]any{"code": "server_error", "message": msg}
	}
	if u := usageView(run.Usage); u != nil {
		obj["usage"] = map[string]any{
			"input_tokens": u.InputTokens, "output_tokens": u.OutputTokens, "total_tokens": u.TotalTokens,
			"input_tokens_details":  map[string]any{"cached_tokens": 0, "cache_write_tokens": 0},
			"output_tokens_details": map[string]any{"reasoning_tokens": 0},
		}
	}
	return obj, nil
}

// inputItems is the response's input as Open Responses input items: the user message
// admission stored for the run.
func (s *Service) inputItems(ctx context.Context, rc *rtCall, run *schema.Run) ([]any, error) {
	msg, err := schema.For[schema.Message](rc.st, schema.CollMessages).GetOwned(ctx, rc.user.ID, run.MessageID)
	if errors.Is(err, schema.ErrNotFound) {
		return []any{}, nil
	}
	if err != nil {
		return nil, storeErr(err, "response")
	}
	text := ""
	if msg.Text != nil {
		text = *msg.Text
	}
	return []any{map[string]any{
		"type": "message", "id": "msg_" + msg.ID, "status": "completed", "role": "user",
		"content": []any{map[string]any{"type": "input_text", "text": text}},
	}}, nil
}

// createBody is what POST /api/v1/responses reads; fields of OpenAI's API that the
// assistant cannot honour are refused by name, others ignored.
type createBody struct {
	Metadata           json.RawMessage `json:"metadata"`
	Model              string          `json:"model"`
	Input              json.RawMessage `json:"input"`
	Background         *bool           `json:"background"`
	Stream             *bool           `json:"stream"`
	PreviousResponseID string          `json:"previous_response_id"`
}

var unsupportedFields = []string{"instructions", "tools", "conversation", "prompt", "reasoning", "text"}

// inputText reads input: a string, or a list of user messages (content a string or
// input_text parts), joined by blank lines.
func inputText(raw json.RawMessage) (string, error) {
	bad := fault.Invalidf("invalid_input", "input must be a string or a list of user messages with text content")
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var items []struct {
		Type    string          `json:"type"`
		Role    string          `json:"role"`
		Content json.RawMessage `json:"content"`
	}
	if json.Unmarshal(raw, &items) != nil || len(items) == 0 {
		return "", bad
	}
	var parts []string
	for _, it := range items {
		if it.Type != "" && it.Type != "message" {
			return "", bad
		}
		switch it.Role {
		case "user":
		case "system", "developer":
			return "", fault.Invalidf("unsupported_input", "%s messages are not accepted: the role's instructions are set by the administrator", it.Role)
		case "assistant":
			return "", fault.Invalidf("unsupported_input", "assistant messages are not accepted: continue a conversation with previous_response_id, which keeps its history")
		default:
			return "", bad
		}
		if json.Unmarshal(it.Content, &s) == nil {
			parts = append(parts, s)
			continue
		}
		var cs []struct{ Type, Text string }
		if json.Unmarshal(it.Content, &cs) != nil {
			return "", bad
		}
		for _, c := range cs {
			if c.Type != "input_text" {
				return "", bad
			}
			parts = append(parts, c.Text)
		}
	}
	return strings.Join(parts, "\n\n"), nil
}

func (s *Service) runtimeRoutes(a *httpapi.API) {
	s.forgetRoute(a)
	// The project issuer's public keys (issuer.Keyring, made and rotated by the agents):
	// a host app verifies callback tokens with them. Public: it holds public keys only.
	a.Handle("GET /api/v1/jwks", httpapi.Route{Public: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		b, err := issuer.PublicJWKS(r.Context(), s.rdb)
		cache := "public, max-age=300"
		if errors.Is(err, redis.Nil) {
			// No agent with PA_ISSUER has made a key yet: an empty set, not kept.
			b, err, cache = []byte(`{"keys":[]}`), nil, "no-store"
		}
		if err != nil {
			return &fault.Error{Kind: fault.Unavailable, Code: "queue_unavailable", Message: "the key set is unavailable; try again", RetryAfter: 2 * time.Second}
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		w.Header().Set("Cache-Control", cache)
		w.WriteHeader(200)
		_, _ = w.Write(b)
		return nil
	})
	a.Handle("POST /api/v1/responses", httpapi.Route{MaxBody: 96 << 10, RuntimeKey: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		rc, err := s.runtimeCaller(r, c)
		if err != nil {
			return err
		}
		raw, _ := io.ReadAll(r.Body)
		req, err := parseCreate(raw, r.Header.Get("Idempotency-Key"))
		if err != nil {
			return err
		}
		if req.approval != nil {
			return s.answerApproval(w, r, rc, req.body, *req.approval)
		}
		obj, err := s.createResponse(r.Context(), rc, req)
		if err != nil {
			return err
		}
		httpapi.WriteJSON(w, 200, obj)
		return nil
	})

	a.Handle("GET /api/v1/responses/{id}", httpapi.Route{RuntimeKey: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		// A function cannot stream: refused plainly, never answered with JSON the
		// client would read as an empty stream (OpenAI's retrieve(id, stream=True)).
		if v := r.URL.Query().Get("stream"); v != "" && v != "false" {
			return badParam("stream", "unsupported_parameter", "streaming a response is served by the stream service at /stream/v1/responses/{id}/events; this endpoint answers only stream=false")
		}
		rc, err := s.runtimeCaller(r, c)
		if err != nil {
			return err
		}
		run, err := s.usedResponse(r.Context(), rc, r.PathValue("id"), runtimeapi.ActionGet)
		if err != nil {
			return err
		}
		obj, err := s.responseObject(r.Context(), rc, run)
		if err != nil {
			return err
		}
		httpapi.WriteJSON(w, 200, obj)
		return nil
	})

	a.Handle("POST /api/v1/responses/{id}/cancel", httpapi.Route{MaxBody: 1 << 10, RuntimeKey: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		rc, err := s.runtimeCaller(r, c)
		if err != nil {
			return err
		}
		run, err := s.usedResponse(r.Context(), rc, r.PathValue("id"), runtimeapi.ActionCancel)
		if err != nil {
			return err
		}
		if _, err := s.controller().Cancel(r.Context(), rc.st, rc.user.ID, run.ID); err != nil {
			return storeErr(err, "response")
		}
		deadline := s.awaitSettled(r.Context(), rc, run)
		for {
			if run, err = s.ownedResponse(r.Context(), rc, ResponseIDPrefix+run.ID); err != nil {
				return err
			}
			// The run's terminal event comes before its record says so: read the record
			// again, briefly, within the same bound.
			if schema.IsTerminal(run.Status) || time.Until(deadline) < 100*time.Millisecond {
				break
			}
			select {
			case <-r.Context().Done():
				return r.Context().Err()
			case <-time.After(100 * time.Millisecond):
			}
		}
		obj, err := s.responseObject(r.Context(), rc, run)
		if err != nil {
			return err
		}
		httpapi.WriteJSON(w, 200, obj)
		return nil
	})

	a.Handle("GET /api/v1/responses/{id}/input_items", httpapi.Route{RuntimeKey: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		rc, err := s.runtimeCaller(r, c)
		if err != nil {
			return err
		}
		run, err := s.usedResponse(r.Context(), rc, r.PathValue("id"), runtimeapi.ActionInput)
		if err != nil {
			return err
		}
		items, err := s.inputItems(r.Context(), rc, run)
		if err != nil {
			return err
		}
		list := map[string]any{"object": "list", "data": items, "has_more": false, "first_id": nil, "last_id": nil}
		if len(items) > 0 {
			id := items[0].(map[string]any)["id"]
			list["first_id"], list["last_id"] = id, id
		}
		httpapi.WriteJSON(w, 200, list)
		return nil
	})

	// Deleting a response deletes the conversation it is a turn of: every response of
	// its chain, earlier and later, with their messages and artifacts (a later turn's
	// context holds this one's text, so deleting one turn alone would leave it readable).
	// Runs still going are cancelled first, exactly as the web's delete does.
	a.Handle("DELETE /api/v1/responses/{id}", httpapi.Route{MaxBody: 1 << 10, RuntimeKey: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		rc, err := s.runtimeCaller(r, c)
		if err != nil {
			return err
		}
		run, err := s.usedResponse(r.Context(), rc, r.PathValue("id"), runtimeapi.ActionDelete)
		if err != nil {
			return err
		}
		if err := s.deleteConversation(r.Context(), rc.st, rc.user.ID, run.ConversationID); err != nil {
			return err
		}
		if rc.user.Linked {
			s.publish(r.Context(), rc.user.ID, FeedConversationDeleted, map[string]string{"id": run.ConversationID})
		}
		httpapi.WriteJSON(w, 200, map[string]any{"id": ResponseIDPrefix + run.ID, "object": "response.deleted", "deleted": true})
		return nil
	})

	// The run's events, long-polled exactly like GET /api/runs/{id}/events.
	a.Handle("GET /api/v1/responses/{id}/events", httpapi.Route{RuntimeKey: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		after, wait, err := pollQuery(r.URL.Query(), 0)
		if err != nil {
			return err
		}
		rc, err := s.runtimeCaller(r, c)
		if err != nil {
			return err
		}
		run, err := s.usedResponse(r.Context(), rc, r.PathValue("id"), runtimeapi.ActionEvents)
		if err != nil {
			return err
		}
		s.rememberRunOwner(run.ID, rc.user.ID, run.ConversationID)
		wait, release := s.pollWait(r.Context(), wait)
		defer release()
		p := &longpoll.Poller{Hub: s.follow, Coalesce: s.cfg.Coalesce}
		b, err := p.Poll(r.Context(), rc.st, longpoll.Run{ID: run.ID, Owner: rc.user.ID}, after, wait)
		if errors.Is(err, longpoll.ErrRedis) {
			return &fault.Error{Kind: fault.Unavailable, Code: "events_unavailable", Message: "live events are unavailable; retry", RetryAfter: 2 * time.Second}
		}
		if err != nil {
			return storeErr(err, "response")
		}
		httpapi.WriteJSON(w, 200, b)
		return nil
	})
}

// awaitSettled waits, as long as a long-poll may (PA_LONGPOLL_MAX, and only while a
// waiting slot is free), for a cancelled run's terminal event, so a cancel usually
// answers "cancelled"; it returns the bound, which the record's re-read keeps too. A run
// that has not stopped by then answers "in_progress" with its cancel recorded and
// reaches "cancelled" when the agent has stopped it.
func (s *Service) awaitSettled(ctx context.Context, rc *rtCall, run *schema.Run) time.Time {
	if schema.IsTerminal(run.Status) {
		return time.Now()
	}
	wait, release := s.pollWait(ctx, s.cfg.LongPollMax)
	defer release()
	deadline := time.Now().Add(wait)
	p := &longpoll.Poller{Hub: s.follow, Coalesce: s.cfg.Coalesce}
	var after int64
	if run.LastSequence != nil {
		after = *run.LastSequence
	}
	for left := time.Until(deadline); left > 0; left = time.Until(deadline) {
		b, err := p.Poll(ctx, rc.st, longpoll.Run{ID: run.ID, Owner: rc.user.ID}, after, left)
		if err != nil || b.Terminal {
			return deadline
		}
		for _, ev := range b.Events {
			after = max(after, ev.Sequence)
		}
	}
	return deadline
}

// badParam is a 400 naming the request parameter at fault.
func badParam(param, code, format string, args ...any) *fault.Error {
	return fault.Invalidf(code, format, args...).At(param)
}

// appConversation is the conversation a new response (no previous_response_id) starts:
// one per create, its id derived from the request id so a retried create reuses it.
func (s *Service) appConversation(ctx context.Context, rc *rtCall, requestID string) (string, error) {
	id, _ := admit.IDs(rc.user.ID, "conversation:"+requestID)
	id = "c" + id[1:]
	convs := schema.For[schema.Conversation](rc.st, schema.CollConversations)
	now := time.Now().UTC().Format(time.RFC3339Nano)
	_, err := convs.Create(ctx, id, rc.user.ID, &schema.Conversation{OwnerID: rc.user.ID, Title: "App " + rc.id.Space(), LastActivityAt: now})
	if errors.Is(err, schema.ErrConflict) {
		_, err = convs.GetOwned(ctx, rc.user.ID, id)
	}
	if err != nil {
		return "", storeErr(err, "conversation")
	}
	return id, nil
}

// createRequest is a parsed POST /api/v1/responses: either an approval answer or a new
// turn (text for a role, with its metadata and idempotency key).
type createRequest struct {
	body     createBody
	approval *approvalAnswer // an answer to a pending approval, not a new turn
	text     string
	meta     string
	idem     string
}

// parseCreate reads and checks a create request's body and Idempotency-Key (idem; a
// random one when empty): every refusal names the parameter at fault.
func parseCreate(raw []byte, idem string) (createRequest, error) {
	var (
		fields map[string]json.RawMessage
		req    createRequest
	)
	body := &req.body
	if t := strings.TrimLeft(string(raw), " \t\r\n"); !strings.HasPrefix(t, "{") || json.Unmarshal(raw, &fields) != nil || json.Unmarshal(raw, body) != nil {
		return req, fault.Invalidf("invalid_json", "request body is not the expected JSON object")
	}
	for _, f := range unsupportedFields {
		if v, ok := fields[f]; ok && string(v) != "null" {
			if f == "tools" {
				return req, badParam(f, "unsupported_parameter", "tools cannot be given per request: declare your app's tools once with PUT /api/v1/tools, and the model calls them through your callback")
			}
			return req, badParam(f, "unsupported_parameter", "%s is not supported by this server: the role (model) decides it", f)
		}
	}
	if body.Stream != nil && *body.Stream {
		return req, badParam("stream", "unsupported_parameter", "stream is not supported: create in background mode and poll GET /api/v1/responses/{id} or its events")
	}
	if body.Background != nil && !*body.Background {
		return req, badParam("background", "background_required", "only background mode is supported: send background: true (or omit it)")
	}
	if ans, ok, err := approvalInput(body.Input); ok || err != nil {
		req.approval = &ans
		return req, err
	}
	if !roleRe.MatchString(body.Model) {
		return req, badParam("model", "invalid_model", "model must be a role name")
	}
	meta, err := runtimeapi.ParseMetadata(body.Metadata)
	if err != nil {
		return req, badParam("metadata", "invalid_metadata", "%s", strings.TrimPrefix(err.Error(), runtimeapi.ErrMetadata.Error()+": "))
	}
	req.meta = meta
	text, err := inputText(body.Input)
	if f := fault.As(err); f != nil {
		return req, f.At("input")
	}
	if err != nil {
		return req, err
	}
	if !utf8.ValidString(text) || strings.TrimSpace(text) == "" {
		return req, badParam("input", "invalid_input", "input must contain non-empty text")
	}
	if n := utf8.RuneCountInString(text); n > schema.SizeMessageText {
		return req, fault.Errorf(fault.TooLarge, "text_too_long", "input is %d characters; the limit is %d", n, schema.SizeMessageText).At("input")
	}
	req.text = text
	if idem == "" {
		var b [16]byte
		_, _ = rand.Read(b[:])
		idem = hex.EncodeToString(b[:])
	}
	if len(idem) > 256 {
		return req, fault.Invalidf("invalid_idempotency_key", "Idempotency-Key must be at most 256 characters")
	}
	req.idem = idem
	return req, nil
}

// createResponse admits a new turn for the key's user (exactly once per idempotency key)
// in the conversation of its previous response, or a new one, and returns the response
// object as it stands.
func (s *Service) createResponse(ctx context.Context, rc *rtCall, req createRequest) (map[string]any, error) {
	body := req.body
	if !rc.id.AllowsRole(body.Model) {
		if err := s.audit(ctx, rc, runtimeapi.ActionRefused, "role/"+body.Model, map[string]any{"reason": "role_not_in_scope"}); err != nil {
			return nil, err
		}
		return nil, fault.Forbiddenf("model_not_allowed", "this key may not use the %q role", body.Model)
	}
	requestID := runtimeapi.RequestID(rc.id.Space(), req.idem)
	convID, prevRunID := "", ""
	if body.PreviousResponseID != "" {
		prev, err := s.usedResponse(ctx, rc, body.PreviousResponseID, runtimeapi.ActionContinue)
		if fault.KindOf(err) == fault.NotFound {
			return nil, fault.Missing("previous response", err).At("previous_response_id")
		}
		if err != nil {
			return nil, err
		}
		convID, prevRunID = prev.ConversationID, prev.ID
	} else {
		var err error
		if convID, err = s.appConversation(ctx, rc, requestID); err != nil {
			return nil, err
		}
	}
	res, err := s.admitter.Admit(ctx, rc.st, admit.Request{Owner: rc.user.ID, ConversationID: convID,
		RequestID: requestID, Text: req.text, Role: body.Model, Labels: rc.user.Labels, PreviousRunID: prevRunID, Metadata: req.meta,
		Environment: rc.id.Env})
	if err != nil {
		return nil, storeErr(err, "conversation")
	}
	s.rememberRunOwner(res.RunID, rc.user.ID, convID)
	if rc.user.Linked {
		// A linked member's web chat shows the message live, as if sent from another tab.
		fm := FeedMessage{ConversationID: convID, MessageID: res.MessageID, RunID: res.RunID, RequestID: requestID,
			Role: res.Role, Sequence: res.Sequence, Status: res.Status, Text: req.text}
		if utf8.RuneCountInString(req.text) > feedTextMax {
			fm.Text, fm.TextOmitted = "", true
		}
		s.publish(ctx, rc.user.ID, FeedMessageCreated, fm)
	}
	respID := ResponseIDPrefix + res.RunID
	if err := s.audit(ctx, rc, runtimeapi.ActionCreate, "response/"+respID, map[string]any{"role": body.Model}); err != nil {
		return nil, err
	}
	run, err := s.ownedResponse(ctx, rc, respID)
	if err != nil {
		return nil, err
	}
	return s.responseObject(ctx, rc, run)
}
