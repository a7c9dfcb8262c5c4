package control_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"privateassistant/control"
	"privateassistant/fault"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

const owner, mallory = "alice", "mallory"

type env struct {
	st    *schema.Store
	redis *redistest.Server
	c     *control.Controller
}

func setup(t *testing.T) *env {
	t.Helper()
	sc := schematest.New(t)
	rs := redistest.Start(t)
	rdb := rs.Client()
	insp := asynq.NewInspectorFromRedisClient(rdb)
	t.Cleanup(func() { _ = insp.Close(); _ = rdb.Close() })
	return &env{st: sc.Store, redis: rs, c: &control.Controller{RDB: rdb, Inspector: insp}}
}

// run writes a run and its bindings as admission would, with the given pending approval.
func (e *env) run(t *testing.T, id string, status schema.RunStatus, pending string) {
	t.Helper()
	ctx := context.Background()
	_, err := schema.For[schema.Run](e.st, schema.CollRuns).Create(ctx, id, owner, &schema.Run{OwnerID: owner,
		ConversationID: "conv1", MessageID: "msg-" + id, RequestID: "req-" + id, Role: "research", Status: status,
		QueuedAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	b := &schema.RunBinding{OwnerID: owner, RunID: id, ConversationID: "conv1", MessageID: "msg-" + id, ContextSnapshotID: "snap1",
		HarnessProfileID: "hermes", HarnessRevision: 1, RouteID: "work", RouteRevision: 1, Queue: queue.DeviceQueue("xtx")}
	if pending != "" {
		b.PendingApprovalID = schema.Ptr(pending)
	}
	_, err = schema.For[schema.RunBinding](e.st, schema.CollRunBindings).Create(ctx, id, "", b)
	require.NoError(t, err)
}

func requireFault(t *testing.T, err error, kind fault.Kind, code string) *fault.Error {
	t.Helper()
	f := fault.As(err)
	require.NotNil(t, f, "%v is not a fault", err)
	require.Equal(t, kind, f.Kind, "%v", err)
	require.Equal(t, code, f.Code)
	return f
}

func TestApprovalErrorsSayWhatWentWrong(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	e.run(t, "r-wait", schema.RunWaitingForApproval, "req-1")
	e.run(t, "r-running", schema.RunRunning, "")

	err := e.c.Approve(ctx, e.st, owner, "r-running", "req-1", "once")
	requireFault(t, err, fault.Conflict, "approval_not_pending")
	require.ErrorIs(t, err, control.ErrApprovalNotPending)
	require.Contains(t, fault.As(err).Message, "running")

	err = e.c.Approve(ctx, e.st, owner, "r-wait", "req-other", "once")
	require.ErrorIs(t, err, control.ErrApprovalMismatch)

	require.NoError(t, e.c.Approve(ctx, e.st, owner, "r-wait", "req-1", "once"))
	require.NoError(t, e.c.Approve(ctx, e.st, owner, "r-wait", "req-1", "once"), "the same decision again is harmless")
	err = e.c.Approve(ctx, e.st, owner, "r-wait", "req-1", "deny")
	require.ErrorIs(t, err, control.ErrApprovalAlreadyDecided)
	requireFault(t, err, fault.Conflict, "approval_already_decided")
}

func TestForeignRunsAreMissingRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	e.run(t, "r-wait", schema.RunWaitingForApproval, "req-1")

	foreign := e.c.Approve(ctx, e.st, mallory, "r-wait", "req-1", "once")
	missing := e.c.Approve(ctx, e.st, mallory, "r-nothing", "req-1", "once")
	for _, err := range []error{foreign, missing} {
		f := requireFault(t, err, fault.NotFound, "not_found")
		require.Equal(t, "run not found", f.Message)
	}
	_, foreign = e.c.Cancel(ctx, e.st, mallory, "r-wait")
	_, missing = e.c.Cancel(ctx, e.st, mallory, "r-nothing")
	require.Equal(t, fault.As(missing).Message, fault.As(foreign).Message)
	requireFault(t, foreign, fault.NotFound, "not_found")
}

func TestApprovalWithRedisDownIsUnavailable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	e := setup(t)
	e.run(t, "r-wait", schema.RunWaitingForApproval, "req-1")
	e.redis.Stop()
	err := e.c.Approve(ctx, e.st, owner, "r-wait", "req-1", "once")
	f := requireFault(t, err, fault.Unavailable, "queue_unavailable")
	require.Positive(t, f.RetryAfter)
	require.False(t, errors.Is(err, control.ErrApprovalAlreadyDecided))
	require.NotNil(t, errors.Unwrap(err), "the Redis error stays wrapped")
}
