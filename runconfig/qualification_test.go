package runconfig_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/runconfig"
	"privateassistant/schema"
)

// TestCheckQualified: only a passing qualification for the revision's device, model and
// budget lets it through; each refusal wraps ErrUnqualified and says why.
func TestCheckQualified(t *testing.T) {
	route := func(q *runconfig.Qualification) *schema.ModelRoute {
		r := &schema.ModelRoute{RouteID: "work", Revision: 3, Device: "xtx", BackendModel: "qwen3-32b", ContextBudget: 65536}
		if q != nil {
			b, _ := json.Marshal(q)
			s := string(b)
			r.Qualification = &s
		}
		return r
	}
	ok := runconfig.Qualification{Device: "xtx", Model: "qwen3-32b", ContextBudget: 65536, Passed: true, ContextServed: 65536, PromptTPS: 900, GenerationTPS: 31.5}
	require.NoError(t, runconfig.CheckQualified(route(&ok)))
	require.Contains(t, ok.Summary(), "passed: 65536 tokens of context served, 900 prompt and 31.5 generation tokens/s")

	for name, tc := range map[string]struct {
		q    *runconfig.Qualification
		want string
	}{
		"never":        {nil, "route work revision 3 has never been qualified on xtx (pa admin gpu qualify work)"},
		"other model":  {&runconfig.Qualification{Device: "xtx", Model: "qwen3-14b", ContextBudget: 65536, Passed: true}, "was for qwen3-14b on xtx at 65536 tokens, not qwen3-32b on xtx at 65536"},
		"other budget": {&runconfig.Qualification{Device: "xtx", Model: "qwen3-32b", ContextBudget: 32768, Passed: true}, "at 32768 tokens, not qwen3-32b on xtx at 65536; qualify it again"},
		"other device": {&runconfig.Qualification{Device: "arc", Model: "qwen3-32b", ContextBudget: 65536, Passed: true}, "on arc"},
		"failed":       {&runconfig.Qualification{Device: "xtx", Model: "qwen3-32b", ContextBudget: 65536, FinishedAt: "T", Reasons: []string{"peak temperature 101.0 °C is above the limit of 95 °C"}}, "failed its qualification at T: peak temperature 101.0 °C"},
	} {
		err := runconfig.CheckQualified(route(tc.q))
		require.ErrorIs(t, err, runconfig.ErrUnqualified, name)
		require.ErrorContains(t, err, tc.want, name)
	}
	bad := "{not json"
	r := route(nil)
	r.Qualification = &bad
	require.ErrorIs(t, runconfig.CheckQualified(r), runconfig.ErrUnqualified)
}

// A waiting or running request whose agent stopped beating reads as waiting for an agent,
// in words (its task is still asynq's: the next agent serving the device runs it); a
// beating one, and every settled or queued one, reads as stored.
func TestQualifyStatusViewSaysAbandoned(t *testing.T) {
	now := time.Date(2026, 12, 7, 12, 0, 0, 0, time.UTC)
	at := func(d time.Duration) string { return now.Add(-d).Format(time.RFC3339Nano) }
	live := map[string]string{"state": runconfig.QualifyRunning, "step": "fill", "reason": "filling", "updatedAt": at(runconfig.QualifyHeartbeat)}
	require.Equal(t, live, runconfig.QualifyStatusView(live, now))
	noBeat := map[string]string{"state": runconfig.QualifyRunning}
	require.Equal(t, noBeat, runconfig.QualifyStatusView(noBeat, now), "no beat to judge by")
	for _, state := range []string{runconfig.QualifyWaiting, runconfig.QualifyRunning} {
		dead := map[string]string{"state": state, "step": "fill", "reason": "filling", "updatedAt": at(runconfig.QualifyAbandonedAfter + time.Second), "requestId": "q1"}
		got := runconfig.QualifyStatusView(dead, now)
		require.Equal(t, map[string]string{"state": runconfig.QualifyWaiting, "step": "", "reason": runconfig.QualifyAbandoned, "position": "0",
			"updatedAt": dead["updatedAt"], "requestId": "q1"}, got)
		require.Equal(t, state, dead["state"], "the stored hash is not changed")
	}
	for _, state := range []string{runconfig.QualifyQueued, runconfig.QualifyPassed, runconfig.QualifyFailed, runconfig.QualifyError} {
		m := map[string]string{"state": state, "updatedAt": at(time.Hour)}
		require.Equal(t, m, runconfig.QualifyStatusView(m, now))
	}
}
