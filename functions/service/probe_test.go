package service_test

import (
	"strings"
	"testing"
	"time"

	"github.com/hibiken/asynq"
	"github.com/stretchr/testify/require"

	"privateassistant/functions/functionstest"
	"privateassistant/functions/service"
	"privateassistant/queue"
)

// TestReleaseProbeNobodyAnswers (issue 33 item 2): with PA_RELEASE_PROBE=agent a
// candidate's evidence enqueues one probe task per role on its route's device queue (a
// fixed task id: passes never enqueue it twice) and waits, the candidate collecting; when
// no agent answered within PA_RELEASE_PROBE_WAIT the probe fails and so does the evidence,
// saying so.
func TestReleaseProbeNobodyAnswers(t *testing.T) {
	t.Parallel()
	wait := 2 * time.Second
	env := functionstest.New(t, functionstest.Options{Mutate: func(c *service.Config) {
		c.ReleaseProbe, c.ReleaseProbeWait = "agent", wait
	}})
	adminID, admin := env.SignUp(t, "probe-none@example.com", "password-probe")
	env.Label(t, adminID, "member", "admin")
	work := map[string]any{"harness": "direct", "harnessRevision": 1, "route": "work", "routeRevision": 1, "tools": []string{}}
	res := env.Do(t, "PUT", "/api/harness-selection", admin, map[string]any{"propose": true, "expectedRevision": 1,
		"roles": map[string]any{"chat": work, "research": work, "coding": work}})
	require.Equal(t, 200, res.Status, string(res.Body))

	collect := func() service.ReleaseView {
		var v struct{ Release service.ReleaseView }
		res := env.Do(t, "POST", "/api/releases/2/evidence", admin, map[string]any{})
		require.Equal(t, 200, res.Status, string(res.Body))
		res.JSON(t, &v)
		return v.Release
	}
	start := time.Now()
	var fp string
	for range 2 {
		rel := collect()
		fp = rel.Fingerprint
		require.Equal(t, "collecting", rel.State)
		require.Contains(t, rel.Evidence.Waiting, "waiting for the probe run on device xtx")
	}
	rdb := env.Redis.Client()
	defer rdb.Close()
	insp := asynq.NewInspectorFromRedisClient(rdb)
	defer insp.Close()
	tasks, err := insp.ListPendingTasks(queue.DeviceQueue("xtx"))
	require.NoError(t, err)
	var probes []string
	for _, tk := range tasks {
		if tk.Type == queue.TypeProbe && strings.HasPrefix(tk.ID, "probe-"+fp[:16]) { // (the bootstrap release's probes wait too)
			probes = append(probes, tk.ID)
			p, err := queue.Decode[queue.ProbeTask](asynq.NewTask(tk.Type, tk.Payload))
			require.NoError(t, err)
			require.Equal(t, "work", p.Route)
		}
	}
	require.Len(t, probes, 3, "one probe per role, whatever the passes: %v", probes)

	time.Sleep(time.Until(start.Add(wait + 100*time.Millisecond)))
	rel := collect()
	require.Equal(t, "failed", rel.State, "%+v", rel.Evidence)
	require.Contains(t, strings.Join(rel.Evidence.Problems, "\n"), "the probe run failed: no agent answered the probe on device xtx within 2s")
}
