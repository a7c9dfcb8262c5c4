package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"privateassistant/hermes/hermesreal"
	"privateassistant/queue"
)

// TestDevOnAHermesOfYours (issue 30): HERMES_URL names a Hermes the operator runs — here
// the real one (hermes/hermesreal), its profile made the way README tells an operator to
// (deploy/hermes/config.yaml with the dev gateway as its only model provider and the
// gateway key as its GATEWAY_API_KEY, PA_GATEWAY_API_KEY keeping that key across data
// folders). A data folder made with the Hermes double started again with HERMES_URL
// follows it (the bug: every job failed "native run not found: hermes 404"): the harness
// gets a new revision the agent verifies against that profile (PA_AGENT_HERMES_CONFIG),
// "#research" runs on that Hermes and its write_file file comes back as the run's artifact
// (PA_AGENT_HERMES_WORKDIR).
func TestDevOnAHermesOfYours(t *testing.T) {
	hermesreal.Require(t)
	root, err := filepath.Abs(filepath.Join("..", ".."))
	require.NoError(t, err)
	gatewayAddr := freeAddr()
	gatewayKey := "gw-operator-chosen-key-0123456789abcdef"
	cfg := Config{Root: root, DataDir: t.TempDir(), Addr: freeAddr(), GatewayAddr: gatewayAddr, GatewayKey: gatewayKey}
	s, err := Start(t.Context(), cfg) // the double makes the data folder
	require.NoError(t, err)
	s.Close()

	// The operator's Hermes: the shipped profile pointed at the dev gateway.
	tmpl, err := writeTemplate(root, t.TempDir(), "http://"+gatewayAddr+"/v1", gatewayKey, "")
	require.NoError(t, err)
	b, err := os.ReadFile(tmpl)
	require.NoError(t, err)
	profile := map[string]any{}
	require.NoError(t, yaml.Unmarshal(b, &profile))
	delete(profile, "terminal") // the helper's work folder is the one tools may touch
	delete(profile, "gateway")  // the helper's API server (loopback, its own port and key)
	hs := hermesreal.Start(t, hermesreal.Options{Config: profile, Env: []string{"GATEWAY_API_KEY=" + gatewayKey}})
	keyFile := filepath.Join(t.TempDir(), "hermes.key")
	require.NoError(t, os.WriteFile(keyFile, []byte(hs.Key), 0o600))
	t.Setenv("PA_AGENT_HERMES_CONFIG", filepath.Join(hs.HermesHome, "config.yaml"))
	t.Setenv("PA_AGENT_HERMES_WORKDIR", hs.WorkDir)

	cfg.HermesURL, cfg.HermesKeyRef = hs.URL, "file:"+keyFile
	s, err = Start(t.Context(), cfg)
	require.NoError(t, err)
	defer s.Close()
	require.Contains(t, s.HermesInfo, "the Hermes at "+hs.URL)
	api := devAPI{t: t, url: s.URL}
	admin := api.jwt(s.AdminEmail, s.AdminPass)
	var hp map[string]any
	require.Eventually(t, func() bool {
		code, out := api.call("GET", "/api/harnesses", admin, nil)
		require.Equal(t, 200, code, out)
		hp = nil
		for _, h := range out["harnesses"].([]any) {
			h := h.(map[string]any)
			if h["profileId"] == "hermes" && (hp == nil || h["revision"].(float64) > hp["revision"].(float64)) {
				hp = h
			}
		}
		return hp["verified"] == true
	}, 2*time.Minute, 250*time.Millisecond, "the agent verifies the Hermes of HERMES_URL")
	require.Equal(t, hs.URL, hp["baseUrl"], "a new revision follows the Hermes this start uses: %v", hp)
	require.Contains(t, hp["hermesVersion"], "0.22", "%v", hp)

	jwt := api.jwt(s.DemoEmail, s.DemoPass)
	code, conv := api.call("POST", "/api/conversations", jwt, map[string]any{"title": "your hermes"})
	require.Equal(t, 201, code, conv)
	code, adm := api.call("POST", "/api/conversations/"+conv["id"].(string)+"/messages", jwt,
		map[string]any{"requestId": "yours-research", "text": "#research a topic", "role": "research"})
	require.Equal(t, 202, code, adm)
	id := adm["runId"].(string)
	var run map[string]any
	require.Eventually(t, func() bool {
		_, run = api.call("GET", "/api/runs/"+id, jwt, nil)
		return run["terminal"] == true
	}, 3*time.Minute, 200*time.Millisecond)
	require.Equal(t, "completed", run["status"], "%v", run)
	var art queue.ArtifactData
	for _, ev := range api.events(jwt, id) {
		if ev.Type == queue.EventArtifact {
			require.NoError(t, json.Unmarshal(ev.Data, &art))
		}
	}
	require.Equal(t, "notes.md", art.Filename, "the file Hermes's write_file wrote is the run's artifact")
	require.Zero(t, hs.Model.Calls(), "nothing reached the helper's own model: the gateway served every call")
	require.Positive(t, s.Model.Calls())
}
