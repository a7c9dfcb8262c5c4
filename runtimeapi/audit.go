package runtimeapi

import (
	"context"
	"time"

	"privateassistant/schema"
)

// Audit actions of the runtime API.
const (
	ActionCreate   = "runtime.response.create"
	ActionContinue = "runtime.response.continue" // previous_response_id read
	ActionGet      = "runtime.response.get"
	ActionCancel   = "runtime.response.cancel"
	ActionDelete   = "runtime.response.delete"      // the response's conversation deleted
	ActionInput    = "runtime.response.input_items" // its input items listed
	ActionUserKeys = "runtime.key.user_keys"        // the app registered its user keys
	ActionApprove  = "runtime.response.approve"     // an mcp_approval_response answered
	ActionForget   = "runtime.user.forget"          // DELETE /api/v1/user
	ActionEvents   = "runtime.response.events"
	ActionRefused  = "runtime.refused"
)

// Audit records one use of a key: the key id is the actor, target the response (or the
// role refused), detail the app, the Appwrite user acted for and the outcome. Never the
// secret, never the app's own user identifier.
func Audit(ctx context.Context, st *schema.Store, id Identity, action, target string, detail map[string]any) error {
	if detail == nil {
		detail = map[string]any{}
	}
	detail["appId"] = id.AppID
	if id.Env != "" {
		detail["environment"] = id.Env
	}
	if len(target) > 128 {
		target = target[:128]
	}
	_, err := schema.For[schema.Audit](st, schema.CollAudit).Create(ctx, "unique()", "", &schema.Audit{
		ActorID: id.KeyID, Action: action, Target: target, Detail: Describe(detail),
		At: time.Now().UTC().Format(time.RFC3339Nano),
	})
	return err
}
