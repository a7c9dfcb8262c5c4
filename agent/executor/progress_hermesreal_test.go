package executor_test

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/hermes/hermesreal"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// TestTaskProgressOnRealHermes (issue 32 item 6): progress comes from Hermes's own task
// list. The model plans three tasks with the todo tool (one done), then marks a second
// done: the run's status events carry 1 of 3 and then 2 of 3 tasks, the record keeps
// 2 of 3, and nothing before the first list carries any progress (no made-up units).
func TestTaskProgressOnRealHermes(t *testing.T) {
	hermesreal.Require(t)
	model := modeltest.New("demo-model")
	srv := hermesreal.Start(t, hermesreal.Options{Model: model,
		// As deploy/hermes/config.yaml: tool_search off (todo_list is otherwise deferred
		// behind tool_call), plus the todo toolset.
		Config: map[string]any{"platform_toolsets": map[string]any{"api_server": []string{"terminal", "file", "todo"}},
			"tools": map[string]any{"tool_search": map[string]any{"enabled": "off"}}}})
	s := setup(t, nil)
	h := &harness.Hermes{Client: srv.Client()}
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return h, nil }
	hs := &hermesSuite{suite: s, model: model}

	plan := `{"todos":[{"id":"1","content":"read the notes","status":"completed"},` +
		`{"id":"2","content":"write the summary","status":"in_progress"},{"id":"3","content":"check it","status":"pending"}]}`
	step := `{"merge":true,"todos":[{"id":"2","content":"write the summary","status":"completed"}]}`
	model.SetScript("#planned", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: []string{"Planning."}, ToolCalls: []modeltest.ToolCall{{Name: "todo_list", Arguments: plan}}},
		{Tokens: []string{"Writing."}, ToolCalls: []modeltest.ToolCall{{Name: "todo_list", Arguments: step}}},
		{Tokens: []string{"Two", " of", " three", " done."}},
	}})
	id := hs.newRunSaying(t, "summarize the notes #planned")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	require.NoError(t, s.exec.Execute(ctx, id))
	evs := hs.settledLog(t, id)
	require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
	var seen []queue.Progress
	todoDone := false
	for _, e := range evs {
		if e.Type == queue.EventToolCompleted {
			todoDone = true
		}
		if e.Type != queue.EventRunStatus {
			continue
		}
		var d queue.RunStatusData
		require.NoError(t, json.Unmarshal(e.Data, &d))
		if d.Progress != nil {
			require.True(t, todoDone, "no progress before Hermes's task list exists")
			seen = append(seen, *d.Progress)
		}
	}
	require.Equal(t, []queue.Progress{{Completed: 1, Total: 3, Unit: "tasks"}, {Completed: 2, Total: 3, Unit: "tasks"}}, seen)
	r := s.record(t, id)
	require.NotNil(t, r.ProgressCompleted)
	require.NotNil(t, r.ProgressTotal)
	require.Equal(t, int64(2), *r.ProgressCompleted)
	require.Equal(t, int64(3), *r.ProgressTotal)
}
