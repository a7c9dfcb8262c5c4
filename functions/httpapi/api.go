// Package httpapi is the HTTP layer every function shares: routing, the caller's
// identity from a verified Appwrite JWT, one JSON error envelope with stable codes, CORS
// from an allow-list, per-endpoint body limits and strict JSON decoding.
//
// Every error a client sees is
//
//	{"error": {"code": "not_found", "message": "run not found"}}
//
// with a stable machine-readable code. Identity only ever comes from
// Authorization: Bearer <Appwrite JWT>, verified by Appwrite; x-appwrite-user-* headers
// and any identity in a body are ignored. When API.Member is set, a verified user it does
// not admit gets 403 not_a_member on every route but the Public and AnyUser ones.
package httpapi

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"privateassistant/fault"
)

// Error is an API error with its HTTP status and stable code.
type Error struct {
	Status     int
	Code       string
	Message    string
	RetryAfter time.Duration // sets Retry-After when > 0
	Extra      map[string]any
	// Param names the request parameter at fault, when one is: the runtime API's
	// envelope (OpenAI's shape, OpenAIPath) carries it as "param", null otherwise.
	Param string
}

func (e *Error) Error() string { return e.Code + ": " + e.Message }

// Errorf builds an *Error.
func Errorf(status int, code, format string, args ...any) *Error {
	return &Error{Status: status, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Common errors.
func NotFound(what string) *Error { return Errorf(404, "not_found", "%s not found", what) }
func BadRequest(code, format string, args ...any) *Error {
	return Errorf(400, code, format, args...)
}
func Unavailable(code, format string, args ...any) *Error {
	return Errorf(503, code, format, args...)
}

// Call is what a handler knows about the request beyond net/http: the verified user.
type Call struct {
	User User
	// AppwriteKey is the server key Appwrite handed this execution (x-appwrite-key).
	AppwriteKey string
}

// Handler serves one route; returning an error writes the envelope.
type Handler func(w http.ResponseWriter, r *http.Request, c *Call) error

// API routes requests to handlers with the shared checks around them.
type API struct {
	mux     *http.ServeMux
	auth    *Authenticator
	origins map[string]bool
	log     *slog.Logger
	// FallbackKey is used when no x-appwrite-key header arrives (running outside Appwrite).
	FallbackKey string
	// Member decides whether a verified user was admitted to the product (closed by
	// default). When set, an authenticated route refuses every other user with 403
	// not_a_member before its handler runs; nil admits every verified user.
	Member func(User) bool

	routes []RouteInfo
}

// RouteInfo is one registered route (the security matrix walks them).
type RouteInfo struct {
	Pattern string // "METHOD /path/{param}"
	Route
}

// ErrClientClosed answers a request whose client went away first (nginx's 499; nobody
// reads it): a failure its cancel caused is not a server error.
var ErrClientClosed = &Error{Status: 499, Code: "client_closed_request", Message: "the client closed the request"}

// ErrNotAMember is the answer to an authenticated user an admin has not admitted.
var ErrNotAMember = Errorf(403, "not_a_member", "this account has not been admitted to the assistant; ask its administrator for an invitation")

// New builds an API. origins is the CORS allow-list (exact origins, e.g.
// "https://chat.example.com"); auth verifies JWTs.
func New(auth *Authenticator, origins []string, log *slog.Logger) *API {
	if log == nil {
		log = DefaultLogger()
	}
	a := &API{mux: http.NewServeMux(), auth: auth, origins: map[string]bool{}, log: log}
	for _, o := range origins {
		if o = strings.TrimRight(strings.TrimSpace(o), "/"); o != "" {
			a.origins[o] = true
		}
	}
	return a
}

// Route options.
type Route struct {
	MaxBody int64 // bytes; 0 means no body is accepted
	Public  bool  // no authentication (health checks, redeeming an invitation, the issuer's public keys)
	// AnyUser admits every verified user, member or not (only "who am I").
	AnyUser bool
	// RuntimeKey: no JWT; the handler authenticates a host app's runtime key itself (the
	// runtime API, runtimeapi) and answers 401 invalid_api_key without one.
	RuntimeKey bool
	// Scheduled: only a function's scheduled execution (x-appwrite-trigger schedule, no
	// user, no Authorization) reaches it; anything else answers like an unknown route.
	// No identity: the trigger header can be forged on Appwrite's executions API
	// (contracts/appwrite.md §3.2), so such a handler must be safe for anyone to start.
	Scheduled bool
}

// Routes lists the registered routes in registration order.
func (a *API) Routes() []RouteInfo { return append([]RouteInfo(nil), a.routes...) }

// Handle registers a handler for a "METHOD /path/{param}" pattern.
func (a *API) Handle(pattern string, rt Route, h Handler) {
	a.routes = append(a.routes, RouteInfo{Pattern: pattern, Route: rt})
	a.mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
		if err := a.serve(w, r, rt, h); err != nil {
			a.WriteError(w, r, err)
		}
	})
}

func (a *API) serve(w http.ResponseWriter, r *http.Request, rt Route, h Handler) error {
	// Body limit: read it whole, up to the route's bound.
	if r.Body != nil {
		b, err := io.ReadAll(io.LimitReader(r.Body, rt.MaxBody+1))
		if err != nil {
			return BadRequest("invalid_body", "could not read the request body")
		}
		if int64(len(b)) > rt.MaxBody {
			return Errorf(413, "body_too_large", "request body exceeds %d bytes", rt.MaxBody)
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
	}
	c := &Call{AppwriteKey: r.Header.Get("X-Appwrite-Key")}
	if c.AppwriteKey == "" {
		c.AppwriteKey = a.FallbackKey
	}
	if rt.Scheduled && (r.Header.Get("X-Appwrite-Trigger") != "schedule" || r.Header.Get("X-Appwrite-User-Id") != "" || r.Header.Get("Authorization") != "") {
		return Errorf(404, "route_not_found", "no such endpoint")
	}
	if !rt.Public && !rt.RuntimeKey && !rt.Scheduled {
		u, err := a.auth.Verify(r.Context(), r.Header.Get("Authorization"))
		if err != nil {
			return err
		}
		c.User = u
		if st := stateOf(r); st != nil {
			st.userID = u.ID
		}
		if a.Member != nil && !rt.AnyUser && !a.Member(u) {
			return ErrNotAMember
		}
	}
	return h(w, r, c)
}

// ServeHTTP implements http.Handler with CORS, the 404/405 envelopes, the request id
// and the request's log line (logging.go).
func (a *API) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	a.logged(w, r, a.serveHTTP)
}

func (a *API) serveHTTP(w http.ResponseWriter, r *http.Request) {
	origin := r.Header.Get("Origin")
	allowed := origin != "" && a.origins[origin]
	if allowed {
		h := w.Header()
		h.Set("Access-Control-Allow-Origin", origin)
		h.Add("Vary", "Origin")
		h.Set("Access-Control-Expose-Headers", "Retry-After, Content-Range, Content-Disposition, Content-Length, X-Request-Id")
	}
	if r.Method == http.MethodOptions {
		if !allowed {
			a.WriteError(w, r, Errorf(403, "origin_not_allowed", "origin is not allowed"))
			return
		}
		h := w.Header()
		h.Set("Access-Control-Allow-Methods", "GET, POST, PUT, PATCH, DELETE, OPTIONS")
		// Last-Event-ID: the web resumes an event stream of the stream service (which
		// shares this API) where it left off; a web on another origin sends it too.
		h.Set("Access-Control-Allow-Headers", "Authorization, Content-Type, Range, Last-Event-ID")
		h.Set("Access-Control-Max-Age", "600")
		w.WriteHeader(204)
		return
	}
	if origin != "" && !allowed {
		a.WriteError(w, r, Errorf(403, "origin_not_allowed", "origin is not allowed"))
		return
	}
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	_, pattern := a.mux.Handler(r)
	if st := stateOf(r); st != nil {
		st.pattern = pattern
	}
	if pattern == "" {
		// Distinguish a wrong method from an unknown path.
		for _, m := range []string{"GET", "POST", "PUT", "DELETE", "PATCH"} {
			probe := r.Clone(r.Context())
			probe.Method = m
			if _, p := a.mux.Handler(probe); p != "" {
				w.Header().Set("Allow", m)
				a.WriteError(w, r, Errorf(405, "method_not_allowed", "%s is not allowed here", r.Method))
				return
			}
		}
		a.WriteError(w, r, Errorf(404, "route_not_found", "no such endpoint"))
		return
	}
	a.mux.ServeHTTP(w, r)
}

// statusOf is the HTTP status of each domain error kind.
var statusOf = map[fault.Kind]int{
	fault.Invalid:         http.StatusBadRequest,
	fault.Forbidden:       http.StatusForbidden,
	fault.NotFound:        http.StatusNotFound,
	fault.Conflict:        http.StatusConflict,
	fault.RateLimited:     http.StatusTooManyRequests,
	fault.Unavailable:     http.StatusServiceUnavailable,
	fault.TooLarge:        http.StatusRequestEntityTooLarge,
	fault.Unauthenticated: http.StatusUnauthorized,
	// A deployment that lacks something says what (the code and message name no secret).
	fault.Misconfigured: http.StatusInternalServerError,
}

// FromError turns err into the error the client sees: an *Error in err's chain as it is,
// a *fault.Error as the status of its kind with its code, message, Retry-After and
// details; anything else (including a fault of kind Internal) is nil, meaning 500.
func FromError(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	f := fault.As(err)
	if f == nil {
		return nil
	}
	status, ok := statusOf[f.Kind]
	if !ok {
		return nil
	}
	return &Error{Status: status, Code: f.Code, Message: f.Message, RetryAfter: f.RetryAfter, Extra: f.Details, Param: f.Param}
}

// WriteError writes the envelope for err (see FromError; unknown errors become 500
// internal). The request's log line carries the code and, for a 5xx, the cause; the
// envelope carries the request id.
func (a *API) WriteError(w http.ResponseWriter, r *http.Request, err error) {
	e := FromError(err)
	st := stateOf(r)
	if r.Context().Err() != nil && (e == nil || e.Status >= 500) {
		// The client left before the answer: its cancel ended a read (context canceled),
		// which is no fault of the server (499, logged at info with its cause).
		e = ErrClientClosed
	}
	if e == nil {
		if st == nil {
			a.log.Error("internal error", "method", r.Method, "path", r.URL.Path, "err", err)
		}
		e = Errorf(500, "internal", "internal error")
	}
	if st != nil {
		st.code, st.cause = e.Code, err
	}
	if e.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int(max(1, e.RetryAfter.Round(time.Second)/time.Second))))
	}
	body := map[string]any{"code": e.Code, "message": e.Message}
	for k, v := range e.Extra {
		body[k] = v
	}
	if OpenAIPath(r.URL.Path) {
		body["type"] = OpenAIErrorType(e.Status)
		body["param"] = nil
		if e.Param != "" {
			body["param"] = e.Param
		}
	}
	if st != nil {
		body["requestId"] = st.id
	}
	WriteJSON(w, e.Status, map[string]any{"error": body})
}

// OpenAIPath says whether path belongs to the runtime API (/api/v1/…, and its event
// streams on the stream service, /stream/v1/…), whose error
// envelope is OpenAI's: code and message as everywhere, plus "type" (OpenAIErrorType)
// and "param" (the parameter at fault, or null), which OpenAI's clients and the Open
// Responses types read.
func OpenAIPath(path string) bool {
	return strings.HasPrefix(path, "/api/v1/") || strings.HasPrefix(path, "/stream/v1/")
}

// OpenAIErrorType is the error type OpenAI's API answers with for an HTTP status: a
// wrong key, a missing response and a bad parameter are all "invalid_request_error"
// there (its 401 invalid_api_key and 404 bodies), a rate limit "requests", a failure on
// its side "server_error".
func OpenAIErrorType(status int) string {
	switch {
	case status == http.StatusTooManyRequests:
		return "requests"
	case status >= 500:
		return "server_error"
	}
	return "invalid_request_error"
}

// WriteJSON writes v as JSON with status.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status, b = 500, []byte(`{"error":{"code":"internal","message":"internal error"}}`)
	}
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write(b)
}

// DecodeJSON reads exactly one JSON object into v, rejecting unknown fields, trailing
// data and anything that is not an object (null, an array, a string, a number: json
// would leave v untouched for a null and the handler would run on zero values).
func DecodeJSON(r *http.Request, v any) error {
	if ct := r.Header.Get("Content-Type"); ct != "" && !strings.HasPrefix(ct, "application/json") {
		return Errorf(415, "unsupported_media_type", "send application/json")
	}
	raw, err := io.ReadAll(r.Body)
	if err != nil {
		return BadRequest("invalid_body", "could not read the request body")
	}
	if t := bytes.TrimLeft(raw, " \t\r\n"); len(t) == 0 || t[0] != '{' {
		return BadRequest("invalid_json", "request body must be a JSON object")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		msg := err.Error()
		if strings.HasPrefix(msg, "json: unknown field") {
			return BadRequest("unknown_field", "%s", strings.TrimPrefix(msg, "json: "))
		}
		return BadRequest("invalid_json", "request body is not the expected JSON object")
	}
	if dec.More() {
		return BadRequest("invalid_json", "request body has trailing data")
	}
	if _, err := dec.Token(); err != io.EOF {
		return BadRequest("invalid_json", "request body has trailing data")
	}
	return nil
}
