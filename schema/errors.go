package schema

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/appwrite/sdk-for-go/client"
)

// Sentinel errors for the states callers handle. Test with errors.Is.
var (
	// ErrNotFound: missing, or owned by someone else (indistinguishable on purpose).
	ErrNotFound = errors.New("not found")
	// ErrStatusOutsideRunstate: a patch of a run record changes its status without a
	// version; only schema/runstate changes a run's status (it claims each version).
	ErrStatusOutsideRunstate = errors.New("a run's status changes only through schema/runstate (a status patch without a version)")
	// ErrConflict: a unique index (or the document id) is already taken.
	ErrConflict = errors.New("conflict")
	// ErrStale: the record changed since it was read (revision or timestamp guard).
	ErrStale = errors.New("stale revision")
	// ErrNotAvailable: an attribute or index is still processing on the server.
	ErrNotAvailable = errors.New("attribute not available")
	// ErrUnauthorized: the credential lacks a scope or a permission.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrUnavailable: Appwrite could not be reached or failed (5xx).
	ErrUnavailable = errors.New("appwrite unavailable")
	// ErrInvalid: the server refused the data (structure, type, size).
	ErrInvalid = errors.New("invalid")
)

// APIError is an Appwrite error body ({message, code, type, version}) with its status.
type APIError struct {
	Status  int
	Type    string
	Message string
}

func (e *APIError) Error() string {
	return fmt.Sprintf("appwrite %d %s: %s", e.Status, e.Type, e.Message)
}

// Is maps Appwrite's error types onto the sentinels.
func (e *APIError) Is(target error) bool {
	switch target {
	case ErrNotFound:
		return e.Status == 404
	case ErrConflict:
		return e.Status == 409 && e.Type != "document_update_conflict"
	case ErrStale:
		return e.Type == "document_update_conflict"
	case ErrNotAvailable:
		return e.Type == "attribute_not_available"
	case ErrUnauthorized:
		return e.Status == 401 || e.Status == 403
	case ErrUnavailable:
		return e.Status >= 500 || e.Status == 429 || e.Status == 408
	case ErrInvalid:
		return e.Status == 400 && e.Type != "attribute_not_available"
	}
	return false
}

// MapError turns an SDK error into an *APIError (or ErrUnavailable), for callers that
// use the SDK directly (Storage).
func MapError(err error) error { return mapError(err) }

// mapError turns an SDK error into an *APIError (or wraps a transport error in
// ErrUnavailable). nil stays nil.
func mapError(err error) error {
	if err == nil {
		return nil
	}
	var ae *client.AppwriteError
	if errors.As(err, &ae) {
		out := &APIError{Status: ae.GetStatusCode(), Message: ae.GetMessage()}
		var body struct {
			Type    string `json:"type"`
			Message string `json:"message"`
		}
		if json.Unmarshal([]byte(ae.GetResponse()), &body) == nil {
			out.Type = body.Type
			if body.Message != "" {
				out.Message = body.Message
			}
		}
		return out
	}
	return fmt.Errorf("%w: %v", ErrUnavailable, err)
}

// FieldError names a field whose value does not fit its declaration.
type FieldError struct {
	Collection, Field, Reason string
}

func (e *FieldError) Error() string {
	return fmt.Sprintf("%s.%s: %s", e.Collection, e.Field, e.Reason)
}

// Is makes a FieldError an ErrInvalid.
func (e *FieldError) Is(target error) bool { return target == ErrInvalid }
