package daemon_test

import (
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/functions/service"
	"privateassistant/modeltest"
	"privateassistant/settings"
	"privateassistant/stacktest"
)

// TestReleaseProbeRunsThroughTheGateway (issue 33 item 2): a proposed candidate's
// evidence holds a probe run per role that the agent made through the candidate's harness
// and route on the inference gateway (the scripted model behind the gateway saw the probe
// prompt, under the route's backend model); a candidate whose route's model server fails
// the probe fails its evidence with the reason.
func TestReleaseProbeRunsThroughTheGateway(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t, stacktest.Options{Gateway: true, Functions: func(c *service.Config) {
		c.ReleaseProbe, c.RouteQualification, c.ReleaseProbeWait = "agent", "off", time.Minute
	}})
	env.StartAgent(t)
	adminID, admin := env.SignUp(t, "probe-admin@example.com", "password-probe")
	env.Label(t, adminID, "member", "admin")

	propose := func(expected int, tools []string) int64 {
		t.Helper()
		d := map[string]any{"harness": "direct", "harnessRevision": 1, "route": "chat", "routeRevision": 1, "tools": []string{}}
		r := map[string]any{"harness": "direct", "harnessRevision": 1, "route": "chat", "routeRevision": 1, "tools": tools}
		res := env.Do(t, "PUT", "/api/harness-selection", admin, map[string]any{"propose": true, "expectedRevision": expected,
			"roles": map[string]any{"chat": d, "research": r, "coding": d}})
		require.Equal(t, 200, res.Status, string(res.Body))
		var got struct{ Release struct{ Seq int64 } }
		res.JSON(t, &got)
		require.NotZero(t, got.Release.Seq, string(res.Body))
		return got.Release.Seq
	}
	// collect runs reconciler passes until the candidate's evidence is complete.
	collect := func(seq int64) service.ReleaseView {
		t.Helper()
		var v struct{ Release service.ReleaseView }
		require.Eventually(t, func() bool {
			v.Release = service.ReleaseView{}
			res := env.Do(t, "POST", "/api/releases/"+strconv.FormatInt(seq, 10)+"/evidence", admin, map[string]any{})
			require.Equal(t, 200, res.Status, string(res.Body))
			res.JSON(t, &v)
			return v.Release.State != "collecting"
		}, 60*time.Second, 250*time.Millisecond, "the evidence never completed: %+v", v.Release.Evidence)
		return v.Release
	}

	seq := propose(1, []string{})
	rel := collect(seq)
	require.Equal(t, "ready", rel.State, "%+v", rel.Evidence)
	require.Empty(t, rel.Evidence.ProbeSkipped)
	require.Len(t, rel.Evidence.Probes, 3)
	for _, p := range rel.Evidence.Probes {
		require.True(t, p.OK, "%+v", p)
		require.Contains(t, p.Detail, "answered by demo-model on device arc through direct harness direct revision 1")
	}
	// The gateway served them: the model saw the probe prompt under the route's backend
	// model (the harness asked for the route alias tagged with the probe's run).
	var probes int
	for _, r := range env.Model.Requests() {
		if len(r.Messages) > 0 && strings.Contains(fmt.Sprint(r.Messages[len(r.Messages)-1].Content), executor.ProbePrompt) {
			probes++
			require.Equal(t, "demo-model", r.Model)
		}
	}
	require.GreaterOrEqual(t, probes, 3)

	// The route's model server fails: the probe fails, and so does the evidence, saying why.
	env.Model.SetScript(executor.ProbePrompt, modeltest.Script{Turns: []modeltest.Turn{{FailStatus: 500}}})
	seq = propose(2, []string{"write_file"})
	rel = collect(seq)
	require.Equal(t, "failed", rel.State, "%+v", rel.Evidence)
	require.NotEmpty(t, rel.Evidence.Probes)
	var failed []settings.ProbeEvidence
	for _, p := range rel.Evidence.Probes {
		if !p.OK {
			failed = append(failed, p)
		}
	}
	require.NotEmpty(t, failed, "%+v", rel.Evidence.Probes)
	require.Contains(t, strings.Join(rel.Evidence.Problems, "\n"), "the probe run failed")
}
