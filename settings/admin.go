package settings

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/fault"
	"privateassistant/runconfig"
	"privateassistant/schema"
)

// Admin performs configuration changes.
type Admin struct {
	Store   *schema.Store
	Plans   *runconfig.Cache // the settings pointer moves on commit (may be nil in tests)
	Devices func(ctx context.Context) ([]string, error)
	Probe   func(ctx context.Context, p *schema.HarnessProfile) (Probe, error)
	// RouteGate, when set, refuses a route revision a role may not be switched to yet,
	// with an error wrapping runconfig.ErrUnqualified (the GPU qualification gate; the
	// service wires it). nil: no gate.
	RouteGate func(ctx context.Context, r *schema.ModelRoute) error
	// Admins counts the administrators (the two-admin rule applies from two); nil: the
	// rule never applies.
	Admins func(ctx context.Context) (int, error)
	// SoloPromotion turns the two-admin rule off (it is on by default).
	SoloPromotion bool
	// ProbeRun, when set, is the evidence's probe run through a role's harness and route.
	ProbeRun ProbeRun
}

// Probe is the result of a harness capability check.
type Probe struct {
	Verified bool
	Version  string
	// Commit is the Hermes build's commit, or "unknown: <why>" (hermes.Build.CommitOrReason;
	// only the agent, beside Hermes, reads it).
	Commit       string
	Capabilities string // JSON, trimmed
	Reason       string // why it is not verified
	// Pending: the validation was handed to the agent, which holds the key; Verified is
	// the revision's state until its result is stored.
	Pending bool
}

// Change is one field that a mutation changes.
type Change struct {
	Field string `json:"field"`
	From  any    `json:"from"`
	To    any    `json:"to"`
}

// Plan is the semantic preview of a mutation.
type ChangePreview struct {
	Kind           string   `json:"kind"` // harness, route, selection
	Target         string   `json:"target"`
	BasedOn        int64    `json:"basedOnRevision"`
	NextRevision   int64    `json:"nextRevision"`
	Changes        []Change `json:"changes"`
	AffectedRoles  []string `json:"affectedRoles"`
	AffectedRoutes []string `json:"affectedRoutes"`
	PinnedRuns     int      `json:"pinnedRuns"` // queued/running runs that keep their old revisions
	Warnings       []string `json:"warnings"`
}

// AuditID is the deterministic id of the audit record of (target, revision).
func AuditID(target string, rev int64) string {
	h := sha256.Sum256([]byte(fmt.Sprintf("%s\x00%d", target, rev)))
	return "u" + hex.EncodeToString(h[:])[:32]
}

type lastChange struct {
	Actor  string `json:"actor"`
	Action string `json:"action"`
	From   int64  `json:"from"`
	To     int64  `json:"to"`
	At     string `json:"at"`
	Detail string `json:"detail"`
}

func now() string { return time.Now().UTC().Format(time.RFC3339Nano) }

func (a *Admin) audit(ctx context.Context, target string, c lastChange) error {
	_, err := schema.For[schema.Audit](a.Store, schema.CollAudit).Create(ctx, AuditID(target, c.To), "", &schema.Audit{
		ActorID: truncate(c.Actor, schema.SizeID), Action: c.Action, Target: target, FromRevision: schema.Ptr(c.From), ToRevision: schema.Ptr(c.To),
		Detail: schema.Ptr(truncate(c.Detail, schema.SizeJSONSmall)), At: c.At})
	if errors.Is(err, schema.ErrConflict) {
		return nil
	}
	return err
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n]
	}
	return s
}

var live = []interface{}{schema.RunQueued, schema.RunWaitingForResource, schema.RunRunning, schema.RunWaitingForApproval, schema.RunCancelling}

// pinned counts live runs whose bindings match (profile or route id, any revision below next).
func (a *Admin) pinned(ctx context.Context, match func(b *schema.RunBinding) bool) (int, error) {
	runs, err := schema.For[schema.Run](a.Store, schema.CollRuns).All(ctx, schema.ListQuery{AllOwners: true,
		Filters: []string{query.Equal("status", live)}, Limit: 100})
	if err != nil {
		return 0, err
	}
	n := 0
	binds := schema.For[schema.RunBinding](a.Store, schema.CollRunBindings)
	for _, r := range runs {
		b, err := binds.Get(ctx, r.ID)
		if err == nil && match(b) {
			n++
		}
	}
	return n, nil
}

func (a *Admin) currentSettings(ctx context.Context) (*schema.Settings, map[string]runconfig.RoleBinding, []string, error) {
	s, err := schema.For[schema.Settings](a.Store, schema.CollSettings).Get(ctx, runconfig.SystemSettingsID)
	if errors.Is(err, schema.ErrNotFound) {
		return nil, nil, nil, fault.E(fault.Unavailable, "not_configured", "no settings yet: run `make bootstrap` first", ErrNotConfigured)
	}
	if err != nil {
		return nil, nil, nil, err
	}
	roles := map[string]runconfig.RoleBinding{}
	if s.Roles != nil {
		_ = json.Unmarshal([]byte(*s.Roles), &roles)
	}
	var ceiling []string
	if s.ToolCeiling != nil {
		_ = json.Unmarshal([]byte(*s.ToolCeiling), &ceiling)
	}
	return s, roles, ceiling, nil
}
