package service

import (
	"context"
	"fmt"
	"strings"

	"privateassistant/schema"
	"privateassistant/settings"
)

// AlertView is something an admin must act on, in plain words (GET /api/system, admin
// only). Kind names it for scripts; Message is the sentence the console shows.
type AlertView struct {
	Kind     string   `json:"kind"`
	Message  string   `json:"message"`
	Harness  string   `json:"harness,omitempty"`
	Revision int64    `json:"revision,omitempty"`
	Roles    []string `json:"roles,omitempty"`
	Since    string   `json:"since,omitempty"`
	Reason   string   `json:"reason,omitempty"`
}

// adminAlerts lists the live harness revisions whose latest check failed: their roles
// keep serving, and no role can be switched to them until a check passes.
func adminAlerts(ctx context.Context, st *schema.Store) ([]AlertView, error) {
	fs, err := settings.LiveCheckFailures(ctx, st)
	if err != nil {
		return nil, err
	}
	out := []AlertView{}
	for _, f := range fs {
		verb := "keep"
		if len(f.Roles) == 1 {
			verb = "keeps"
		}
		out = append(out, AlertView{Kind: "harness_check_failed", Harness: f.Harness, Revision: f.Revision, Roles: f.Roles,
			Since: f.FailedAt, Reason: f.Reason,
			Message: fmt.Sprintf("The latest check of harness %s (version %d) failed: %s. %s %s working on it, but no role can be moved to it until a check passes.",
				f.Harness, f.Revision, f.Reason, sentenceList(f.Roles), verb)})
	}
	return out, nil
}

// sentenceList joins names as "a", "a and b", "a, b and c", capitalised.
func sentenceList(xs []string) string {
	s := ""
	switch len(xs) {
	case 0:
		return "Its roles"
	case 1:
		s = xs[0]
	default:
		s = strings.Join(xs[:len(xs)-1], ", ") + " and " + xs[len(xs)-1]
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
