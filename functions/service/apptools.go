package service

import (
	"context"
	"errors"
	"net/http"
	"strconv"
	"time"

	"privateassistant/apptools"
	"privateassistant/fault"
	"privateassistant/functions/httpapi"
	"privateassistant/runtimeapi"
	"privateassistant/schema"
)

// Host-app tools (issue 19 item 3; apptools): an app declares the tools the runs it
// starts may call, with its runtime key (the key names the app; nothing in the body does).
const (
	actionDeclareTools = "runtime.tools.declare"
	actionRotateSecret = "runtime.tools.rotate_secret"
)

// runtimeApp verifies a runtime key and counts the call against its rate limit, without an
// app user (declaring tools acts for the app itself; runtimeCaller adds the user).
func (s *Service) runtimeApp(r *http.Request, c *httpapi.Call) (*rtCall, error) {
	st, err := s.store(c)
	if err != nil {
		return nil, err
	}
	id, key, err := VerifyRuntimeKey(r.Context(), st, r.Header.Get("Authorization"))
	if err != nil {
		return nil, err
	}
	wait, err := runtimeapi.Limit(r.Context(), s.rdb, key, time.Now())
	if err != nil {
		return nil, &fault.Error{Kind: fault.Unavailable, Code: "queue_unavailable", Message: "the rate limiter is unavailable; try again", RetryAfter: 2 * time.Second}
	}
	if wait > 0 {
		return nil, &fault.Error{Kind: fault.RateLimited, Code: "rate_limited", RetryAfter: wait, Message: "too many calls with this key: at most " + strconv.FormatInt(key.RateLimit, 10) + " per " + (time.Duration(key.RateWindowMs) * time.Millisecond).String()}
	}
	return &rtCall{st: st, id: id, key: key}, nil
}

// VerifyRuntimeKey checks a runtime key with the runtime API's answers (401
// invalid_api_key); the stream service authenticates with it too.
func VerifyRuntimeKey(ctx context.Context, st *schema.Store, authorization string) (runtimeapi.Identity, *schema.RuntimeKey, error) {
	id, key, err := runtimeapi.Verify(ctx, st, authorization)
	switch {
	case errors.Is(err, runtimeapi.ErrRevoked):
		return id, nil, invalidKey("this runtime key was revoked")
	case errors.Is(err, runtimeapi.ErrInvalidKey):
		return id, nil, invalidKey("send Authorization: Bearer <runtime key>")
	case err != nil:
		return id, nil, storeErr(err, "runtime key")
	}
	return id, key, nil
}

func (s *Service) appToolRoutes(a *httpapi.API) {
	s.appUserKeysRoute(a)
	// PUT replaces the app's tools; the answer carries the signing secret only when this
	// call created it (shown once).
	a.Handle("PUT /api/v1/tools", httpapi.Route{MaxBody: 600 << 10, RuntimeKey: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		rc, err := s.runtimeApp(r, c)
		if err != nil {
			return err
		}
		var body struct {
			Tools []apptools.Tool `json:"tools"`
		}
		if err := httpapi.DecodeJSON(r, &body); err != nil {
			return err
		}
		allow, err := apptools.ParseAllowList(s.cfg.AppCallbackAllow)
		if err != nil {
			return &fault.Error{Kind: fault.Unavailable, Code: "not_configured", Message: "the callback allow-list is misconfigured"}
		}
		reg := &apptools.Registry{RDB: s.rdb}
		secret, err := reg.Declare(r.Context(), rc.id.Space(), body.Tools, allow)
		switch {
		case errors.Is(err, apptools.ErrNotAllowed):
			return fault.Invalidf("callback_not_allowed", "%s", err.Error())
		case errors.Is(err, apptools.ErrInvalidTool):
			return fault.Invalidf("invalid_tool", "%s", err.Error())
		case err != nil:
			return &fault.Error{Kind: fault.Unavailable, Code: "queue_unavailable", Message: "the tool registry is unavailable; try again", RetryAfter: 2 * time.Second}
		}
		names := make([]string, 0, len(body.Tools))
		for _, t := range body.Tools {
			names = append(names, t.Name)
		}
		if err := runtimeapi.Audit(r.Context(), rc.st, rc.id, actionDeclareTools, "app/"+rc.id.Space()+"/tools", map[string]any{"tools": names}); err != nil {
			return storeErr(err, "audit")
		}
		tools, err := reg.List(r.Context(), rc.id.Space())
		if err != nil {
			tools = nil
		}
		out := map[string]any{"tools": tools}
		if secret != "" {
			out["signingSecret"] = secret
		}
		httpapi.WriteJSON(w, 200, out)
		return nil
	})
	// POST …/signing-secret replaces the app's signing secret and answers the new one (shown
	// once): callbacks are signed with it from the next one on. A retry whose answer was
	// lost rotates again; the last answer is the secret in use.
	a.Handle("POST /api/v1/tools/signing-secret", httpapi.Route{MaxBody: 1 << 10, RuntimeKey: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		rc, err := s.runtimeApp(r, c)
		if err != nil {
			return err
		}
		// Audited before the change: a rotation nobody can account for never happens.
		if err := runtimeapi.Audit(r.Context(), rc.st, rc.id, actionRotateSecret, "app/"+rc.id.Space()+"/signing-secret", nil); err != nil {
			return storeErr(err, "audit")
		}
		secret, err := (&apptools.Registry{RDB: s.rdb}).RotateSecret(r.Context(), rc.id.Space())
		if err != nil {
			return &fault.Error{Kind: fault.Unavailable, Code: "queue_unavailable", Message: "the tool registry is unavailable; try again", RetryAfter: 2 * time.Second}
		}
		httpapi.WriteJSON(w, 200, map[string]any{"signingSecret": secret})
		return nil
	})
	a.Handle("GET /api/v1/tools", httpapi.Route{RuntimeKey: true}, func(w http.ResponseWriter, r *http.Request, c *httpapi.Call) error {
		rc, err := s.runtimeApp(r, c)
		if err != nil {
			return err
		}
		tools, err := (&apptools.Registry{RDB: s.rdb}).List(r.Context(), rc.id.Space())
		if err != nil {
			return &fault.Error{Kind: fault.Unavailable, Code: "queue_unavailable", Message: "the tool registry is unavailable; try again", RetryAfter: 2 * time.Second}
		}
		httpapi.WriteJSON(w, 200, map[string]any{"tools": tools})
		return nil
	})
}
