package settings

import (
	"errors"
	"fmt"

	"privateassistant/fault"
)

// ErrStale is the cause of every stale-revision refusal: the commit named a revision that
// is no longer the current one. The *fault.Error around it carries the current revision
// as the detail "currentRevision".
var ErrStale = errors.New("stale revision")

// ErrNotConfigured: there is no system settings document yet (bootstrap has not run).
var ErrNotConfigured = errors.New("not configured")

func stale(current int64) error {
	return fault.E(fault.Conflict, "stale_revision", fmt.Sprintf("the configuration changed: it is now at revision %d; preview again", current), ErrStale).
		With("currentRevision", current)
}

// bad is an invalid-input refusal with a stable code.
func bad(code, format string, args ...any) error { return fault.Invalidf(code, format, args...) }
