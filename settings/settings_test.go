package settings_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/fault"
	"privateassistant/functions/functionstest"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
	"privateassistant/settings"
)

func admin(st *schema.Store) *settings.Admin {
	return &settings.Admin{Store: st, Devices: func(context.Context) ([]string, error) { return []string{"arc", "xtx"}, nil },
		Probe: func(context.Context, *schema.HarnessProfile) (settings.Probe, error) {
			return settings.Probe{Verified: true}, nil
		}}
}

// bootstrapped is an emulator with the tests' standard configuration.
func bootstrapped(t *testing.T) *schema.Store {
	env := schematest.New(t)
	f, err := runconfig.ParseBootstrap([]byte(functionstest.Bootstrap))
	require.NoError(t, err)
	require.NoError(t, runconfig.Bootstrap(context.Background(), env.Store, f, "test"))
	// Release 1's evidence (its roles are held until it passes: runconfig.Hold).
	require.NoError(t, (&settings.Reconciler{Admin: &settings.Admin{Store: env.Store}, Holder: "bootstrap"}).Pass(context.Background()))
	return env.Store
}

func requireFault(t *testing.T, err error, kind fault.Kind, code string) *fault.Error {
	t.Helper()
	f := fault.As(err)
	require.NotNil(t, f, "%v is not a fault", err)
	require.Equal(t, kind, f.Kind, "%v", err)
	require.Equal(t, code, f.Code)
	return f
}

// TestBadInputIsInvalidBeforeAnyRead: malformed mutations are refused with a stable code
// before the store is touched (the Admin has no store here).
func TestBadInputIsInvalidBeforeAnyRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := admin(nil)
	for _, tc := range []struct {
		in   settings.HarnessInput
		code string
	}{
		{settings.HarnessInput{ProfileID: "bad id", Kind: "direct", BaseURL: "http://h"}, "invalid_id"},
		{settings.HarnessInput{ProfileID: "h", Kind: "other", BaseURL: "http://h"}, "invalid_kind"},
		{settings.HarnessInput{ProfileID: "h", Kind: "direct", BaseURL: "http://user:pw@h"}, "invalid_url"},
		{settings.HarnessInput{ProfileID: "h", Kind: "direct", BaseURL: "http://h", KeyRef: "sk-0123456789abcdef0123456789abcdef"}, "key_not_reference"},
	} {
		_, err := a.PlanHarness(ctx, tc.in)
		requireFault(t, err, fault.Invalid, tc.code)
	}
	for _, tc := range []struct {
		in   settings.RouteInput
		code string
	}{
		{settings.RouteInput{RouteID: "", Alias: "a", BackendModel: "m", ContextBudget: 1}, "invalid_id"},
		{settings.RouteInput{RouteID: "r", Alias: "a", BackendModel: "m", ContextBudget: 0}, "invalid_budget"},
		{settings.RouteInput{RouteID: "r", Alias: "a", BackendModel: "m", ContextBudget: 1, MaxOutput: -1}, "invalid_max_output"},
		{settings.RouteInput{RouteID: "r", Alias: "a", BackendModel: "m", ContextBudget: 1, Device: "gpu9"}, "unknown_device"},
	} {
		_, err := a.PlanRoute(ctx, tc.in)
		requireFault(t, err, fault.Invalid, tc.code)
	}
}

func TestStaleCommitIsAConflictNamingTheCurrentRevision(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a := admin(bootstrapped(t))
	in := settings.RouteInput{RouteID: "chat", Alias: "chat", Device: "arc", BackendModel: "bigger", ContextBudget: 131072}
	p, _, err := a.CommitRoute(ctx, "admin", in, 1)
	require.NoError(t, err)
	require.EqualValues(t, 2, p.NextRevision)

	// A second admin who planned on revision 1 loses, and is told where it is now.
	_, _, err = a.CommitRoute(ctx, "admin2", in, 1)
	f := requireFault(t, err, fault.Conflict, "stale_revision")
	require.True(t, errors.Is(err, settings.ErrStale))
	require.EqualValues(t, 2, f.Details["currentRevision"])

	sel := settings.SelectionInput{ExpectedRevision: 0, Roles: map[string]runconfig.RoleBinding{
		"chat": {Harness: "direct", HarnessRevision: 1, Route: "chat", RouteRevision: 2}}}
	_, err = a.CommitSelection(ctx, "admin", sel)
	f = requireFault(t, err, fault.Conflict, "stale_revision")
	require.EqualValues(t, 1, f.Details["currentRevision"])

	// Naming what does not exist is invalid input, not a missing page.
	sel.ExpectedRevision = 1
	sel.Roles["chat"] = runconfig.RoleBinding{Harness: "direct", HarnessRevision: 1, Route: "chat", RouteRevision: 9}
	_, err = a.PlanSelection(ctx, sel)
	requireFault(t, err, fault.Invalid, "unknown_route")

	_, _, err = a.Validate(ctx, "admin", "nosuch", 1)
	requireFault(t, err, fault.NotFound, "not_found")
}

func TestUnconfiguredIsUnavailable(t *testing.T) {
	t.Parallel()
	a := admin(schematest.New(t).Store)
	_, err := a.PlanSelection(context.Background(), settings.SelectionInput{Roles: map[string]runconfig.RoleBinding{"chat": {}}})
	requireFault(t, err, fault.Unavailable, "not_configured")
	require.ErrorIs(t, err, settings.ErrNotConfigured)
}
