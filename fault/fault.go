// Package fault is how the domain packages (admit, control, settings, longpoll) and the
// functions' handlers say what went wrong without choosing an HTTP status: the one error
// vocabulary of the functions (internal/repocheck TestTheFunctionsSpeakOneErrorVocabulary).
//
// A *Error carries a Kind (the class a caller branches on), a stable machine-readable
// Code (the one clients see, e.g. "approval_not_pending"), a user-facing Message, an
// optional RetryAfter and Details, and the cause it wraps, so errors.Is still finds
// schema.ErrUnavailable or a Redis error beneath it. It is modelled on asynq's internal
// errors.E(Op, Code, err).
//
// Only the HTTP layer (functions/httpapi) turns a Kind into a status code; the domain
// packages never choose one.
package fault

import (
	"errors"
	"fmt"
	"maps"
	"time"
)

// Kind classifies an error for the caller. The zero Kind is Internal.
type Kind uint8

// Kinds.
const (
	Internal        Kind = iota // a defect or an unexpected failure; details stay in the log
	Invalid                     // the request is malformed or names something impossible
	NotFound                    // the thing does not exist, or the caller may not know it does
	Conflict                    // the request contradicts the current state
	Forbidden                   // the caller may not do this
	Unavailable                 // a dependency is down; retrying later may succeed
	RateLimited                 // the caller is over a rate limit; RetryAfter says when to try
	TooLarge                    // the request is over a size limit (its message says the limit)
	Misconfigured               // the deployment lacks something it needs; the code and message say what (no secret)
	Unauthenticated             // the caller's credentials are missing or not valid
)

var kindNames = [...]string{"internal", "invalid", "not_found", "conflict", "forbidden", "unavailable", "rate_limited", "too_large", "misconfigured", "unauthenticated"}

// Kinds lists every Kind, Internal first.
func Kinds() []Kind {
	out := make([]Kind, len(kindNames))
	for i := range out {
		out[i] = Kind(i)
	}
	return out
}

func (k Kind) String() string {
	if int(k) < len(kindNames) {
		return kindNames[k]
	}
	return fmt.Sprintf("kind(%d)", k)
}

// Error is a domain error.
type Error struct {
	Kind       Kind
	Code       string        // stable, machine-readable
	Message    string        // for the user; never includes the cause
	RetryAfter time.Duration // > 0 when retrying later is the advice
	Details    map[string]any
	Param      string // the request parameter at fault, when one is (the runtime API answers it as "param")
	Err        error  // the cause, for logs and errors.Is; never shown to the user
}

func (e *Error) Error() string {
	s := e.Code + ": " + e.Message
	if e.Err != nil {
		s += ": " + e.Err.Error()
	}
	return s
}

// Unwrap returns the cause.
func (e *Error) Unwrap() error { return e.Err }

// E builds an *Error of kind with code and message, wrapping cause (which may be nil).
func E(kind Kind, code, message string, cause error) *Error {
	return &Error{Kind: kind, Code: code, Message: message, Err: cause}
}

// Errorf builds an *Error without a cause, its message formatted.
func Errorf(kind Kind, code, format string, args ...any) *Error {
	return &Error{Kind: kind, Code: code, Message: fmt.Sprintf(format, args...)}
}

// Missing says what does not exist: kind NotFound, code "not_found", message "<what> not
// found". A record of another owner must be reported with exactly this error, so it
// reads like a missing one (the cause is for logs and never reaches the answer).
func Missing(what string, cause error) *Error {
	return &Error{Kind: NotFound, Code: "not_found", Message: what + " not found", Err: cause}
}

// Invalidf is an Invalid error with a formatted message.
func Invalidf(code, format string, args ...any) *Error {
	return Errorf(Invalid, code, format, args...)
}

// Forbiddenf is a Forbidden error with a formatted message.
func Forbiddenf(code, format string, args ...any) *Error {
	return Errorf(Forbidden, code, format, args...)
}

// Conflictf is a Conflict error with a formatted message.
func Conflictf(code, format string, args ...any) *Error {
	return Errorf(Conflict, code, format, args...)
}

// Retry returns a copy of e advising a retry after the given delay (a copy, so a sentinel
// stays as it is).
func (e *Error) Retry(after time.Duration) *Error {
	c := *e
	c.RetryAfter = after
	return &c
}

// At returns a copy of e naming the request parameter at fault.
func (e *Error) At(param string) *Error {
	c := *e
	c.Param = param
	return &c
}

// With returns a copy of e with one detail added (a field beside code and message in the
// answer).
func (e *Error) With(key string, value any) *Error {
	c := *e
	c.Details = maps.Clone(e.Details)
	if c.Details == nil {
		c.Details = map[string]any{}
	}
	c.Details[key] = value
	return &c
}

// As returns the *Error in err's chain, or nil.
func As(err error) *Error {
	var e *Error
	if errors.As(err, &e) {
		return e
	}
	return nil
}

// KindOf returns the Kind of the *Error in err's chain; Internal when there is none.
func KindOf(err error) Kind {
	if e := As(err); e != nil {
		return e.Kind
	}
	return Internal
}
