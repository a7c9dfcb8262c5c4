package daemon_test

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/stacktest"
)

// An agent restarted mid-run re-attaches to the native run; Hermes gives a new subscriber
// the whole retained backlog, so the new attempt must resume after the last native event
// the first attempt published. The user's visible text (the deltas, with message.reset
// honoured) must equal the final answer: no token twice, none lost.
func TestRestartMidRunDeltasEqualTheAnswer(t *testing.T) {
	t.Parallel()
	env := stacktest.New(t, stacktest.Options{ChatHarness: "hermes"})
	env.Model.SetScript("#exact", modeltest.Script{Turns: []modeltest.Turn{{Tokens: strings.Fields(strings.Repeat("tok ", 60)), TokenDelay: 25 * time.Millisecond}}})
	first := env.StartAgent(t)
	owner, jwt := env.SignUp(t, "exact@example.com", "password-exact")
	conv := env.Conversation(t, jwt)
	a := env.Admit(t, jwt, conv, "x1", "go #exact", "")
	deltas, restarted := 0, false
	evs, status := env.Follow(t, jwt, a.RunID, 60*time.Second, func(ev queue.Event) bool {
		if ev.Type == queue.EventMessageDelta {
			deltas++
		}
		if deltas >= 3 && !restarted {
			restarted = true
			first.StopIntake()
			first.Shutdown() // abort: the handler returns without stopping Hermes
			env.StartAgent(t)
		}
		return true
	})
	require.Equal(t, "completed", status)
	require.True(t, restarted)
	require.Equal(t, 1, env.Hermes.RunsCreated(), "one native run across both agents")
	msgs := answers(t, env, owner, a.RunID)
	require.Len(t, msgs, 1)
	require.NotNil(t, msgs[0].Text)
	require.Equal(t, strings.Count(*msgs[0].Text, "tok"), strings.Count(deltaText(evs), "tok"), "tokens shown vs tokens in the answer")
	require.Equal(t, *msgs[0].Text, deltaText(evs))
}
