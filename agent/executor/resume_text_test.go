package executor_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/hermes"
	"privateassistant/hermes/hermestest"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
)

// visibleText is what a client shows: the deltas, with message.reset honoured.
func visibleText(t *testing.T, evs []queue.Event) string {
	t.Helper()
	var text strings.Builder
	for _, e := range evs {
		switch e.Type {
		case queue.EventMessageDelta:
			var d queue.MessageDeltaData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			text.WriteString(d.Text)
		case queue.EventMessageReset:
			text.Reset()
		}
	}
	return text.String()
}

func (s *hermesSuite) answerText(t *testing.T, id string) string {
	t.Helper()
	rec := s.record(t, id)
	require.NotNil(t, rec.AssistantMessageID, "the run has an answer")
	m, err := schema.For[schema.Message](s.store, schema.CollMessages).Get(context.Background(), *rec.AssistantMessageID)
	require.NoError(t, err)
	require.NotNil(t, m.Text)
	return *m.Text
}

// runFirstAttempt executes id until the log holds n deltas, then cancels the attempt's
// context (a shutdown: the native run goes on) and waits for it to return.
func (s *hermesSuite) runFirstAttempt(t *testing.T, id string, n int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	first := make(chan error, 1)
	go func() { first <- s.exec.Execute(ctx, id) }()
	require.Eventually(t, func() bool {
		evs, _, _ := queue.ReadEvents(context.Background(), s.rdb, id, 0, 0)
		k := 0
		for _, e := range evs {
			if e.Type == queue.EventMessageDelta {
				k++
			}
		}
		return k >= n
	}, 30*time.Second, 5*time.Millisecond)
	cancel()
	<-first
}

// A run resumed by a second attempt and then cancelled keeps a partial answer: that
// answer is the text the user saw, the first attempt's deltas included (before the fix
// the answer held only the text streamed after the resume).
func TestPartialAnswerAfterResumeKeepsTheFirstAttemptsText(t *testing.T) {
	hs := setupHermes(t, hermestest.Options{})
	hs.model.SetScript("#partial", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 200)), TokenDelay: 20 * time.Millisecond}}})
	id := hs.newRunSaying(t, "go #partial")
	hs.runFirstAttempt(t, id, 3)
	before, _, err := queue.ReadEvents(context.Background(), hs.rdb, id, 0, 0)
	require.NoError(t, err)
	shown := visibleText(t, before)
	require.NotEmpty(t, shown)

	cancelRun(t, hs.suite, id)
	require.NoError(t, hs.exec.Execute(context.Background(), id))
	evs := hs.settledLog(t, id)
	require.Equal(t, queue.EventRunCancelled, evs[len(evs)-1].Type)
	answer := hs.answerText(t, id)
	require.True(t, strings.HasPrefix(answer, shown), "the answer starts with the first attempt's text %q; got %q", shown, answer)
	require.Equal(t, visibleText(t, evs), answer, "the partial answer is what the user saw")
}

// Hermes retains a run's last 1000 events; an attempt that re-attaches after more than
// that gets replay.truncated and never sees the events in between. The text the user sees
// must still end equal to the answer: the executor republishes it (message.reset, then the
// whole answer) when the run ends, instead of leaving a hole in the middle.
func TestReplayTruncatedRepublishesTheAnswer(t *testing.T) {
	hs := setupHermes(t, hermestest.Options{})
	const tokens = hermestest.BacklogLimit + 300
	hs.model.SetScript("#gap", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", tokens)), TokenDelay: time.Millisecond}}})
	id := hs.newRunSaying(t, "go #gap")
	hs.runFirstAttempt(t, id, 2)

	// The native run finishes meanwhile, producing more events than Hermes retains.
	b, err := schema.For[schema.RunBinding](hs.store, schema.CollRunBindings).Get(context.Background(), id)
	require.NoError(t, err)
	require.NotNil(t, b.NativeRunID)
	c := hs.client
	require.Eventually(t, func() bool {
		rs, err := c.GetRun(context.Background(), *b.NativeRunID)
		return err == nil && rs.Status == hermes.StatusCompleted
	}, 60*time.Second, 20*time.Millisecond)

	require.NoError(t, hs.exec.Execute(context.Background(), id))
	evs := hs.settledLog(t, id)
	require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
	answer := hs.answerText(t, id)
	require.Equal(t, tokens, strings.Count(answer, "tok"))
	shown := visibleText(t, evs)
	require.Equal(t, tokens, strings.Count(shown, "tok"), "what the user sees ends with every token, none lost in the gap")
	require.True(t, shown == answer, "what the user sees ends equal to the answer")
}
