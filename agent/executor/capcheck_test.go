package executor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/hermes"
	"privateassistant/hermes/hermestest"
	"privateassistant/queue"
	"privateassistant/schema"
	"privateassistant/settings"
)

// Hermes's capabilities are checked again before each submission (harness.Checker, cached
// for CheckTTL): a Hermes that passed validation and then lost durable run idempotency (a
// restart whose runs_idempotency.db fell back to memory), or that reports no retention, is
// refused before anything reaches it. The run fails and says why; the double created no
// session and no run, and the model was never called.
func TestSubmissionRechecksCapabilities(t *testing.T) {
	for name, degrade := range map[string]struct {
		durable   bool
		retention int
		why       string
	}{
		"not durable":  {false, 86400, "durable=false"},
		"no retention": {true, 0, "retention=0s"},
	} {
		t.Run(name, func(t *testing.T) {
			s := setupHermes(t, hermestest.Options{})
			s.h.CheckTTL = 50 * time.Millisecond
			ctx := context.Background()
			// Validation verified it, and the agent's own check passed.
			hp := &schema.HarnessProfile{Kind: "hermes", BaseURL: s.client.BaseURL}
			pr := settings.ProbeHarness(ctx, nil, hp, s.client.APIKey)
			require.True(t, pr.Verified, pr.Reason)
			_, err := s.h.Check(ctx)
			require.NoError(t, err)

			s.double.DegradeIdempotency(degrade.durable, degrade.retention)
			time.Sleep(60 * time.Millisecond) // the agent's check is older than its TTL
			id := s.newRunSaying(t, "hello after the restart")
			require.NoError(t, s.exec.Execute(ctx, id))

			rec := s.record(t, id)
			require.Equal(t, schema.RunFailed, rec.Status)
			require.NotNil(t, rec.ErrorSummary)
			require.Contains(t, *rec.ErrorSummary, "lacks a capability runs rely on")
			require.Contains(t, *rec.ErrorSummary, degrade.why)
			evs := s.settledLog(t, id)
			require.Equal(t, queue.EventRunFailed, evs[len(evs)-1].Type)
			require.Zero(t, s.double.RunsCreated(), "nothing submitted")
			_, err = s.client.SessionMessages(ctx, "pa-"+id, 10, 0)
			require.ErrorIs(t, err, hermes.ErrNotFound, "not even the session was created")
			require.Empty(t, s.model.Requests(), "the model was never called")
			b, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Get(ctx, id)
			require.NoError(t, err)
			require.Nil(t, b.NativeRunID)
			// The check that refused it is on the binding.
			require.NotNil(t, b.HarnessCheck)
			var chk struct {
				Capabilities struct {
					RunsIdempotency hermes.RunsIdempotency `json:"runs_idempotency"`
				} `json:"capabilities"`
			}
			require.NoError(t, json.Unmarshal([]byte(*b.HarnessCheck), &chk))
			require.Equal(t, degrade.durable, chk.Capabilities.RunsIdempotency.Durable)
			require.Equal(t, degrade.retention, chk.Capabilities.RunsIdempotency.RetentionSeconds)
		})
	}
}

// Every submission records the harness's build and capability output on the run's
// binding: the server's version, the commit (or why it is unknown) and the run features.
func TestSubmissionRecordsTheHarnessCheck(t *testing.T) {
	s := setupHermes(t, hermestest.Options{Version: "0.22.2.post1"})
	s.h.Build = func(v string) hermes.Build {
		return hermes.Build{Version: v, CommitUnknown: "no source names it (test)"}
	}
	id := s.newRunSaying(t, "hello")
	require.NoError(t, s.exec.Execute(context.Background(), id))
	require.Equal(t, schema.RunCompleted, s.record(t, id).Status)
	b, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Get(context.Background(), id)
	require.NoError(t, err)
	require.NotNil(t, b.HarnessCheck)
	var chk harness.Check
	require.NoError(t, json.Unmarshal([]byte(*b.HarnessCheck), &chk))
	require.Equal(t, "0.22.2.post1", chk.Build.Version)
	require.Empty(t, chk.Build.Commit)
	require.Equal(t, "no source names it (test)", chk.Build.CommitUnknown)
	require.Equal(t, true, chk.Capabilities["run_stop"])
	idem, _ := json.Marshal(chk.Capabilities["runs_idempotency"])
	require.JSONEq(t, `{"supported":true,"durable":true,"retention_seconds":86400}`, string(idem))
	require.WithinDuration(t, time.Now(), chk.CheckedAt, time.Minute)
}
