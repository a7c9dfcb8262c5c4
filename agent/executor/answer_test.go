package executor_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/schema"
)

// TestStoredAnswerKeepsEveryTurn: a tool run's stored answer holds the text of every
// model turn, a blank line apart, not only the harness's final text (its last turn): the
// history showed "The listing is done." without "Let me check that.".
func TestStoredAnswerKeepsEveryTurn(t *testing.T) {
	fake := newFake(func(string) []harness.Event {
		return []harness.Event{
			{Kind: harness.KindDelta, Text: "Let me"}, {Kind: harness.KindDelta, Text: " check that."},
			{Kind: harness.KindToolStarted, Tool: "terminal"}, {Kind: harness.KindToolCompleted, Tool: "terminal"},
			{Kind: harness.KindDelta, Text: "The listing"}, {Kind: harness.KindDelta, Text: " is done."},
			{Kind: harness.KindCompleted, Text: "The listing is done."},
		}
	}, 0)
	s := setup(t, fake)
	id := s.newRun(t)
	require.NoError(t, s.exec.Execute(context.Background(), id))
	rec := s.record(t, id)
	require.Equal(t, schema.RunCompleted, rec.Status)
	require.NotNil(t, rec.AssistantMessageID)
	m, err := schema.For[schema.Message](s.store, schema.CollMessages).Get(context.Background(), *rec.AssistantMessageID)
	require.NoError(t, err)
	require.NotNil(t, m.Text)
	require.Equal(t, "Let me check that.\n\nThe listing is done.", *m.Text)
}

// TestStoredAnswerIsTheFinalTextWhenItDiffers: a final text that is not the end of what
// streamed (the harness rewrote it) is stored as the harness gave it.
func TestStoredAnswerIsTheFinalTextWhenItDiffers(t *testing.T) {
	fake := newFake(func(string) []harness.Event {
		return []harness.Event{
			{Kind: harness.KindDelta, Text: "draft"},
			{Kind: harness.KindCompleted, Text: "The final answer."},
		}
	}, 0)
	s := setup(t, fake)
	id := s.newRun(t)
	require.NoError(t, s.exec.Execute(context.Background(), id))
	rec := s.record(t, id)
	m, err := schema.For[schema.Message](s.store, schema.CollMessages).Get(context.Background(), *rec.AssistantMessageID)
	require.NoError(t, err)
	require.Equal(t, "The final answer.", *m.Text)
}
