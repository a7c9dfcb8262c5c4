package daemon_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/daemon"
	"privateassistant/keyref"
	"privateassistant/stacktest"
)

func get(t *testing.T, url, user, pass string) (int, string) {
	t.Helper()
	req, _ := http.NewRequest("GET", url, nil)
	if user != "" {
		req.SetBasicAuth(user, pass)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestOpsListener(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	a := env.StartAgent(t)
	base := "http://" + a.Ops.Bound()
	_, jwt := env.SignUp(t, "ops@example.com", "password-opsops")
	conv := env.Conversation(t, jwt)
	r := env.Admit(t, jwt, conv, "o1", "hello", "")
	_, status := env.Follow(t, jwt, r.RunID, 30*time.Second, nil)
	require.Equal(t, "completed", status)

	code, body := get(t, base+"/healthz", "", "")
	require.Equal(t, 200, code)
	require.Equal(t, "ok\n", body)

	code, body = get(t, base+"/readyz", "", "")
	require.Equal(t, 200, code, body)
	var ready struct {
		Ready  bool
		Checks map[string]string
	}
	require.NoError(t, json.Unmarshal([]byte(body), &ready))
	require.Equal(t, map[string]string{"redis": "ok", "appwrite": "ok", "hermes:hermes": "ok", "model_server:profile:direct": "ok",
		"queue:gpu:arc": "ok", "queue:gpu:xtx": "ok"}, ready.Checks)

	// The run's terminal event reaches followers before the executor records its metrics.
	require.Eventually(t, func() bool {
		code, body = get(t, base+"/metrics", "", "")
		return code == 200 && strings.Contains(body, `pa_runs_finished_total{role="chat",status="completed"} 1`)
	}, 10*time.Second, 20*time.Millisecond)
	require.Contains(t, body, "pa_events_emitted_total")
	require.Contains(t, body, `asynq_tasks_processed_total{queue="gpu:arc"}`)

	code, _ = get(t, base+"/asynqmon/", "", "")
	require.Equal(t, 401, code, "asynqmon is behind authentication")
	code, _ = get(t, base+"/asynqmon/", "admin", "wrong")
	require.Equal(t, 401, code)
	code, body = get(t, base+"/asynqmon/", "admin", env.Settings.OpsPassword)
	require.Equal(t, 200, code)
	require.Contains(t, strings.ToLower(body), "<html")
	code, body = get(t, base+"/asynqmon/api/queues", "admin", env.Settings.OpsPassword)
	require.Equal(t, 200, code, body)
	require.Contains(t, body, "gpu:arc")

	// Each dependency is reported separately: the harness fails, the rest is fine.
	env.KillHermes()
	code, body = get(t, base+"/readyz", "", "")
	require.Equal(t, 503, code)
	require.NoError(t, json.Unmarshal([]byte(body), &ready))
	require.Equal(t, "ok", ready.Checks["redis"])
	require.Equal(t, "ok", ready.Checks["appwrite"])
	require.True(t, strings.HasPrefix(ready.Checks["hermes:hermes"], "error:"))
}

func TestSettingsValidation(t *testing.T) {
	t.Parallel()
	good := daemon.Settings{RedisAddr: "127.0.0.1:6390", Devices: "arc:4,xtx:1", LeaseTTL: 15 * time.Second, Heartbeat: 2 * time.Second, Grace: time.Minute}
	require.NoError(t, good.Validate())
	for _, mut := range []func(*daemon.Settings){
		func(s *daemon.Settings) { s.RedisAddr = "" }, // neither an address nor Sentinel
		func(s *daemon.Settings) { s.Devices = "" },
		func(s *daemon.Settings) { s.Devices = "arc:0" },
		func(s *daemon.Settings) { s.Devices = "bad name:1" },
		func(s *daemon.Settings) { s.LeaseTTL = 500 * time.Millisecond },
		func(s *daemon.Settings) { s.Heartbeat = 10 * time.Second },
		func(s *daemon.Settings) { s.HermesHomes, s.HermesVenv = "/var/lib/pa/homes", "/opt/hermes/venv" }, // no template
		func(s *daemon.Settings) {
			s.HermesHomes, s.HermesConfig = "/var/lib/pa/homes", "/etc/hermes/config.yaml"
		},
	} {
		s := good
		mut(&s)
		require.Error(t, s.Validate())
	}
	d, err := daemon.ParseDevices("arc, xtx:2")
	require.NoError(t, err)
	require.Equal(t, map[string]int{"arc": 1, "xtx": 2}, d)
	_, err = keyref.Resolve("env:PA_TEST_SURELY_UNSET_VARIABLE")
	require.ErrorContains(t, err, "not set")
}
