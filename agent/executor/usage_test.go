package executor_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/gateway"
	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
)

type recordedUsage struct {
	InputTokens  int    `json:"inputTokens"`
	OutputTokens int    `json:"outputTokens"`
	TotalTokens  int    `json:"totalTokens"`
	Model        string `json:"model"`
	Alias        string `json:"alias"`
	Device       string `json:"device"`
	Requests     int    `json:"requests"`
	Source       string `json:"source"`
}

func usageOf(t *testing.T, r *schema.Run) recordedUsage {
	t.Helper()
	require.NotNil(t, r.Usage, "the run record has no usage")
	var u recordedUsage
	require.NoError(t, json.Unmarshal([]byte(*r.Usage), &u))
	return u
}

// The gateway records each request of the run (its real RedisSink, so the field names
// are the gateway's); at the end the run record carries the totals over every request and
// the model that answered last, and the terminal event carries the same tokens. The
// harness's own report (3 tokens) loses to the gateway's count.
func TestRunRecordCarriesGatewayUsage(t *testing.T) {
	var s *suite
	fake := newFake(func(run string) []harness.Event {
		sink := gateway.RedisSink{RDB: s.rdb}
		sink.Record(context.Background(), gateway.Usage{Run: run, Alias: "work", Device: "xtx", Generation: 3,
			EffectiveModel: "qwen3-30b-a3b-q4", PromptTokens: 1200, CompletionTokens: 80, Status: 200})
		sink.Record(context.Background(), gateway.Usage{Run: run, Alias: "work", Device: "xtx", Generation: 3,
			EffectiveModel: "qwen3-30b-a3b-q8", PromptTokens: 1300, CompletionTokens: 120, Status: 200})
		return deltas("a", "b", "c")
	}, 0)
	s = setup(t, fake)
	id := s.newRun(t)
	require.NoError(t, s.exec.Execute(context.Background(), id))
	evs := s.requireLog(t, id)
	u := usageOf(t, s.record(t, id))
	require.Equal(t, recordedUsage{InputTokens: 2500, OutputTokens: 200, TotalTokens: 2700, Model: "qwen3-30b-a3b-q8",
		Alias: "work", Device: "xtx", Requests: 2, Source: "gateway"}, u)
	var end queue.RunEndData
	require.NoError(t, json.Unmarshal(evs[len(evs)-1].Data, &end))
	require.Equal(t, &queue.Usage{InputTokens: 2500, OutputTokens: 200, TotalTokens: 2700}, end.Usage)
}

// A run that fails after using the model still records what it used.
func TestFailedRunRecordsGatewayUsage(t *testing.T) {
	var s *suite
	fake := newFake(func(run string) []harness.Event {
		gateway.RedisSink{RDB: s.rdb}.Record(context.Background(), gateway.Usage{Run: run, Alias: "chat", Device: "arc",
			EffectiveModel: "m-served", PromptTokens: 10, CompletionTokens: 2, Status: 200})
		return []harness.Event{{Kind: harness.KindDelta, Text: "x"}, {Kind: harness.KindFailed, Error: "boom"}}
	}, 0)
	s = setup(t, fake)
	id := s.newRun(t)
	require.NoError(t, s.exec.Execute(context.Background(), id))
	rec := s.record(t, id)
	require.Equal(t, schema.RunFailed, rec.Status)
	u := usageOf(t, rec)
	require.Equal(t, "m-served", u.Model)
	require.Equal(t, 12, u.TotalTokens)
}

// Without the gateway in the path the harness's report is kept, and says so.
func TestRunRecordKeepsHarnessUsageWithoutGateway(t *testing.T) {
	fake := newFake(func(string) []harness.Event { return deltas("a", "b") }, 0)
	s := setup(t, fake)
	id := s.newRun(t)
	require.NoError(t, s.exec.Execute(context.Background(), id))
	u := usageOf(t, s.record(t, id))
	require.Equal(t, recordedUsage{TotalTokens: 2, Source: "harness"}, u)
}

// The gateway's records leave before each answer ends but are acknowledged after it
// (gateway.UsageWriter): the run's usage is read only once the executor's UsageSettled
// says the run's records are applied. Here the last record lands inside UsageSettled; a
// read before it would find only the harness's report.
func TestRunUsageIsReadOnceTheGatewaysRecordsAreSettled(t *testing.T) {
	fake := newFake(func(string) []harness.Event { return deltas("a", "b") }, 0)
	s := setup(t, fake)
	var settled []string
	s.exec.UsageSettled = func(ctx context.Context, run string) error {
		settled = append(settled, run)
		gateway.RedisSink{RDB: s.rdb}.Record(ctx, gateway.Usage{Run: run, Alias: "chat", Device: "arc",
			EffectiveModel: "m-served", PromptTokens: 40, CompletionTokens: 2, Status: 200})
		return nil
	}
	id := s.newRun(t)
	require.NoError(t, s.exec.Execute(context.Background(), id))
	require.Equal(t, []string{id}, settled)
	u := usageOf(t, s.record(t, id))
	require.Equal(t, recordedUsage{InputTokens: 40, OutputTokens: 2, TotalTokens: 42, Model: "m-served",
		Alias: "chat", Device: "arc", Requests: 1, Source: "gateway"}, u)
}

// A harness that fails a run without a word (Hermes after the agent was SIGKILLed) still
// leaves the run with an error text: never failed without one.
func TestAFailedRunAlwaysHasAnErrorText(t *testing.T) {
	fake := newFake(func(string) []harness.Event { return []harness.Event{{Kind: harness.KindFailed}} }, 0)
	s := setup(t, fake)
	id := s.newRun(t)
	require.NoError(t, s.exec.Execute(context.Background(), id))
	rec := s.record(t, id)
	require.Equal(t, schema.RunFailed, rec.Status)
	require.NotNil(t, rec.ErrorSummary)
	require.NotEmpty(t, *rec.ErrorSummary)
	evs := s.requireLog(t, id)
	var end queue.RunEndData
	require.NoError(t, json.Unmarshal(evs[len(evs)-1].Data, &end))
	require.NotEmpty(t, end.Error)
}
