package release

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/file"
	"github.com/appwrite/sdk-for-go/functions"
	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/outbox"
	"privateassistant/backup"
	"privateassistant/queue"
	"privateassistant/queue/redistest"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

const deployKey = "deploy-key-0123456789abcdef"

var fnIDs = []string{"admin", "artifacts", "conversations", "runs", "system"}

// deploy uploads a deployment of every function, activates it and waits until it is.
func deploy(t *testing.T, fn *functions.Functions) map[string]string {
	t.Helper()
	code := filepath.Join(t.TempDir(), "code.tar.gz")
	require.NoError(t, os.WriteFile(code, []byte("bundle"), 0o600))
	out := map[string]string{}
	for _, id := range fnIDs {
		d, err := fn.CreateDeployment(id, file.NewInputFile(code, "code.tar.gz"), true)
		require.NoError(t, err)
		out[id] = d.Id
	}
	require.Eventually(t, func() bool {
		for id, dep := range out {
			if f, err := fn.Get(id); err != nil || f.DeploymentId != dep {
				return false
			}
		}
		return true
	}, 10*time.Second, 5*time.Millisecond)
	return out
}

func active(t *testing.T, fn *functions.Functions) map[string]string {
	t.Helper()
	out := map[string]string{}
	for _, id := range fnIDs {
		f, err := fn.Get(id)
		require.NoError(t, err)
		out[id] = f.DeploymentId
	}
	return out
}

// TestRollbackActivatesThePreviousDeployments is the runbook's rollback: two releases
// recorded, rollback activates the first one's deployments through the Functions API,
// prints the agent's step, leaves the schema and every record alone, and the outbox
// replays no completed run.
func TestRollbackActivatesThePreviousDeployments(t *testing.T) {
	env := schematest.New(t, map[string][]string{deployKey: {"functions.read", "functions.write"}})
	fn := functions.New(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(deployKey)))
	for _, id := range fnIDs {
		_, err := fn.Create(id, id, "go-1.26", fn.WithCreateEntrypoint("main.go"))
		require.NoError(t, err)
	}
	dir := t.TempDir()
	current := backup.Schema(env.Model)
	t0 := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)

	v1 := deploy(t, fn)
	m1, err := Record(fn, fnIDs, "v1.0.0", current, dir, t0)
	require.NoError(t, err)
	require.Equal(t, v1, m1.Functions)
	v2 := deploy(t, fn)
	_, err = Record(fn, fnIDs, "v1.1.0", current, dir, t0.Add(time.Hour))
	require.NoError(t, err)

	// Data as it stands: a completed run (its task done in Redis) and its records.
	ctx := context.Background()
	runs := schema.For[schema.Run](env.Store, schema.CollRuns)
	_, err = schema.For[schema.RunBinding](env.Store, schema.CollRunBindings).Create(ctx, "done-run", "", &schema.RunBinding{OwnerID: "u1",
		RunID: "done-run", ConversationID: "c1", MessageID: "m1", ContextSnapshotID: "s", HarnessProfileID: "h", HarnessRevision: 1,
		RouteID: "r", RouteRevision: 1, Queue: queue.DeviceQueue("xtx")})
	require.NoError(t, err)
	_, err = runs.Create(ctx, "done-run", "u1", &schema.Run{OwnerID: "u1", ConversationID: "c1", MessageID: "m1", RequestID: "q1",
		Role: "chat", Status: schema.RunCompleted, QueuedAt: t0.Format(time.RFC3339Nano)})
	require.NoError(t, err)
	before, err := runs.Get(ctx, "done-run")
	require.NoError(t, err)

	releases, err := List(dir)
	require.NoError(t, err)
	require.Len(t, releases, 2)
	plan, err := Choose(fn, releases, "")
	require.NoError(t, err)
	require.Equal(t, "v1.1.0", plan.From.Version)
	require.Equal(t, "v1.0.0", plan.To.Version)

	var out bytes.Buffer
	require.NoError(t, Rollback(fn, plan, current, &out, true))
	require.Equal(t, v2, active(t, fn), "a dry run activates nothing")
	out.Reset()
	require.NoError(t, Rollback(fn, plan, current, &out, false))
	require.Equal(t, v1, active(t, fn), "the previous release's deployments are active")
	require.Contains(t, out.String(), "sudo ln -sfn /opt/privateassistant/releases/v1.0.0 /opt/privateassistant/current && sudo systemctl restart privateassistant-agent")
	require.Contains(t, out.String(), "schema: stays at "+current.Version)

	// Nothing older to go back to now.
	_, err = Choose(fn, releases, "")
	require.ErrorIs(t, err, ErrNoPrevious)
	// Forward again by name.
	plan, err = Choose(fn, releases, "v1.1.0")
	require.NoError(t, err)
	require.NoError(t, Rollback(fn, plan, current, io.Discard, false))
	require.Equal(t, v2, active(t, fn))

	// The records are as they were, and the outbox (a fresh Redis: nothing remembered)
	// gives the completed run no task.
	after, err := runs.Get(ctx, "done-run")
	require.NoError(t, err)
	require.Equal(t, before, after)
	rs := redistest.Start(t)
	rdb := rs.Client()
	t.Cleanup(func() { _ = rdb.Close() })
	insp := asynq.NewInspectorFromRedisClient(rdb)
	t.Cleanup(func() { _ = insp.Close() })
	n, err := (&outbox.Reconciler{Store: env.Store, Inspector: insp, Enq: queue.NewEnqueuer(asynq.NewClientFromRedisClient(rdb)), RDB: rdb,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}).Once(ctx)
	require.NoError(t, err)
	require.Zero(t, n, "a completed run is never replayed")
}

func TestRollbackRefusesWhatItCannotDo(t *testing.T) {
	env := schematest.New(t, map[string][]string{deployKey: {"functions.read", "functions.write"}})
	fn := functions.New(appwrite.NewClient(appwrite.WithEndpoint(env.TS.URL), appwrite.WithProject(env.TS.Project), appwrite.WithKey(deployKey)))
	for _, id := range fnIDs {
		_, err := fn.Create(id, id, "go-1.26", fn.WithCreateEntrypoint("main.go"))
		require.NoError(t, err)
	}
	dir := t.TempDir()
	current := backup.Schema(env.Model)
	deploy(t, fn)
	_, err := Record(fn, fnIDs, "v1", current, dir, time.Unix(1, 0))
	require.NoError(t, err)
	deploy(t, fn)
	releases, err := List(dir)
	require.NoError(t, err)
	_, err = Choose(fn, releases, "")
	require.ErrorIs(t, err, ErrNoCurrent, "what is active now was never recorded")

	_, err = Record(fn, fnIDs, "v2", current, dir, time.Unix(2, 0))
	require.NoError(t, err)
	releases, err = List(dir)
	require.NoError(t, err)
	plan, err := Choose(fn, releases, "")
	require.NoError(t, err)
	// A target whose schema has an attribute the current one lacks would need a downgrade.
	plan.To.Schema.Collections = map[string][]string{schema.CollRuns: {"fromTheFuture"}}
	err = Rollback(fn, plan, current, io.Discard, false)
	require.ErrorIs(t, err, ErrSchema)
}
