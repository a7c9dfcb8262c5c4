package gateway

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/queue/redistest"
)

// TestFailedRequestKeepsTheModelServed: a request the gateway refused or could not serve
// (no model in its usage) adds to the counts but never erases the model an earlier request
// of the run was answered by.
func TestFailedRequestKeepsTheModelServed(t *testing.T) {
	rdb := redistest.Start(t).Client()
	defer rdb.Close()
	ctx := context.Background()
	sink := RedisSink{RDB: rdb}
	sink.Record(ctx, Usage{Run: "run-1", Alias: "work", Device: "xtx", EffectiveModel: "qwen3-30b", PromptTokens: 10, CompletionTokens: 5})
	sink.Record(ctx, Usage{Run: "run-1", Alias: "work", Device: "xtx"})
	h, err := rdb.HGetAll(ctx, UsageKey("run-1")).Result()
	require.NoError(t, err)
	require.Equal(t, "qwen3-30b", h["effectiveModel"])
	require.Equal(t, "2", h["requests"])
	require.Equal(t, "10", h["promptTokens"])
}
