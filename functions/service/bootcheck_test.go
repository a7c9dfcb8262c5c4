package service_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/queue"
)

// TestBootstrapReleaseHoldsUncheckedRoles (issue 33 gap 2): the bootstrap's release 1 is
// live before its evidence, but no role runs on it unchecked. Before the first evidence
// every role answers 503 awaiting_checks ("being checked"); once the reconciler's pass
// (the admin function's schedule) has checked it, the chat role, whose route is on a
// device no agent manages, is served, while the work roles, whose route is on a managed
// device (the xtx reported status) without a qualification, keep answering
// awaiting_checks: "waiting for its GPU qualification". The release is failed, so it
// cannot be promoted; an admin qualifies the route and promotes a release naming the
// qualified revision.
func TestBootstrapReleaseHoldsUncheckedRoles(t *testing.T) {
	t.Parallel()
	env := functionstest.New(t, functionstest.Options{Unchecked: true})
	ctx := context.Background()
	_, alice := env.SignUp(t, "held-alice@example.com", "password-held")
	conv := env.Conversation(t, alice)
	ask := func(id, role string) functionstest.Response {
		return env.Do(t, "POST", "/api/conversations/"+conv+"/messages", alice, map[string]any{"requestId": id, "text": "hello", "role": role})
	}

	for _, role := range []string{"chat", "research"} {
		res := ask("before-"+role, role)
		require.Equal(t, 503, res.Status, "%s: %s", role, res.Body)
		require.Equal(t, "awaiting_checks", res.ErrorCode())
		require.Contains(t, string(res.Body), "being checked")
	}

	// The xtx's agent reported status: a route on it needs a qualification.
	rc := env.Redis.Client()
	defer rc.Close()
	require.NoError(t, rc.SAdd(ctx, queue.GPUDevicesKey(), "xtx").Err())
	require.NoError(t, env.Svc.Reconcile(ctx, functionstest.FunctionKey("admin"), "schedule:test"))

	res := ask("after-chat", "chat")
	require.Less(t, res.Status, 300, "chat's route needs no qualification: %s", res.Body)
	for _, role := range []string{"research", "coding"} {
		res := ask("after-"+role, role)
		require.Equal(t, 503, res.Status, "%s: %s", role, res.Body)
		require.Equal(t, "awaiting_checks", res.ErrorCode())
		require.Contains(t, string(res.Body), "waiting for its GPU qualification")
		require.Contains(t, string(res.Body), "never been qualified on xtx")
	}
}
