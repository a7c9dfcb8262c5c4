package executor_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/hermes"
	"privateassistant/hermes/hermestest"
	"privateassistant/modeltest"
	"privateassistant/queue"
	"privateassistant/schema"
)

const doubleKey = "executor-test-key-0123456789abcdef"

// hermesSuite is the executor over the Hermes harness and the double (hermes/hermestest)
// on a real loopback port, with the scripted model behind it.
type hermesSuite struct {
	*suite
	model  *modeltest.Backend
	double *hermestest.Server
	client *hermes.Client
	h      *harness.Hermes
}

func setupHermes(t *testing.T, opts hermestest.Options) *hermesSuite {
	t.Helper()
	s := setup(t, nil)
	model := modeltest.New("demo-model")
	ms := httptest.NewServer(model)
	t.Cleanup(ms.Close)
	opts.APIKey, opts.ModelURL, opts.Model, opts.DataDir = doubleKey, ms.URL+"/v1", "demo-model", t.TempDir()
	d, err := hermestest.New(opts)
	require.NoError(t, err)
	hs := httptest.NewServer(d)
	t.Cleanup(func() { hs.Close(); d.Close() })
	c := &hermes.Client{BaseURL: hs.URL, APIKey: doubleKey}
	h := &harness.Hermes{Client: c}
	s.exec.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return h, nil }
	return &hermesSuite{suite: s, model: model, double: d, client: c, h: h}
}

// newRunSaying is newRun with the user's message text.
func (s *hermesSuite) newRunSaying(t *testing.T, text string) string {
	t.Helper()
	id := s.newRun(t)
	ctx := context.Background()
	b, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Get(ctx, id)
	require.NoError(t, err)
	_, err = schema.For[schema.Message](s.store, schema.CollMessages).Update(ctx, b.MessageID, map[string]any{"text": text})
	require.NoError(t, err)
	return id
}

// settledLog reads a settled run's log (checkLog's answer-equals-deltas rule does not
// hold for tool turns: Hermes's final output is the last turn's text only).
func (s *hermesSuite) settledLog(t *testing.T, id string) []queue.Event {
	t.Helper()
	evs, _, err := queue.ReadEvents(context.Background(), s.rdb, id, 0, 0)
	require.NoError(t, err)
	require.NotEmpty(t, evs)
	for i, ev := range evs {
		require.Equal(t, int64(i+1), ev.Sequence)
		require.Equal(t, i == len(evs)-1, queue.IsTerminalEvent(ev.Type), ev.Type)
	}
	require.True(t, s.record(t, id).Status.Terminal())
	return evs
}

func approvalEvents(t *testing.T, evs []queue.Event) (requests []queue.ApprovalRequestData, responses []queue.ApprovalRespondedData) {
	t.Helper()
	for _, e := range evs {
		switch e.Type {
		case queue.EventApprovalRequest:
			var d queue.ApprovalRequestData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			requests = append(requests, d)
		case queue.EventApprovalResponse:
			var d queue.ApprovalRespondedData
			require.NoError(t, json.Unmarshal(e.Data, &d))
			responses = append(responses, d)
		}
	}
	return requests, responses
}

// Hermes denies an unanswered approval after approvals.timeout, says nothing on the
// stream and keeps the stale approval in the run's status. The run must record the
// expiry (approval.responded deny with the reason, back to running) and never ask again.
func TestApprovalExpiryIsRecordedOnce(t *testing.T) {
	s := setupHermes(t, hermestest.Options{ApprovalTTL: 300 * time.Millisecond})
	id := s.newRunSaying(t, "please run #tool")
	require.NoError(t, s.exec.Execute(context.Background(), id))
	evs := s.settledLog(t, id)
	require.Equal(t, queue.EventRunCompleted, evs[len(evs)-1].Type)
	reqs, resps := approvalEvents(t, evs)
	require.Len(t, reqs, 1, "asked once")
	require.Len(t, resps, 1, "the expiry is recorded once")
	require.Equal(t, reqs[0].RequestID, resps[0].RequestID)
	require.Equal(t, "deny", resps[0].Choice)
	require.Equal(t, executor.ExpiredReason, resps[0].Reason)
	b, err := schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Get(context.Background(), id)
	require.NoError(t, err)
	require.Nil(t, b.PendingApprovalID)
}

// A user who answers after the expiry gets Hermes's 409 approval_not_pending: the run
// records the expiry (not a silent warning) and does not ask again.
func TestLateAnswerToAnExpiredApproval(t *testing.T) {
	s := setupHermes(t, hermestest.Options{ApprovalTTL: 200 * time.Millisecond})
	// The model takes its time after the denial, so the late answer arrives first.
	s.model.SetScript("#slowtool", modeltest.Script{Turns: []modeltest.Turn{
		{Tokens: []string{"Checking."}, ToolCalls: []modeltest.ToolCall{{Name: "terminal", Arguments: `{"command":"ls"}`}}},
		{Tokens: []string{"Done", "."}, FirstDelay: 3 * time.Second},
	}})
	id := s.newRunSaying(t, "please #slowtool")
	ctx := context.Background()
	done := make(chan error, 1)
	go func() { done <- s.exec.Execute(ctx, id) }()
	var reqID string
	require.Eventually(t, func() bool {
		evs, _, _ := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
		reqs, _ := approvalEvents(t, evs)
		if len(reqs) > 0 {
			reqID = reqs[0].RequestID
		}
		return reqID != ""
	}, 20*time.Second, 5*time.Millisecond)
	// Past the timeout (the double denied it), the user answers.
	time.Sleep(400 * time.Millisecond) // the double's approvals.timeout is 200 ms: wait it out
	require.NoError(t, queue.SendControl(ctx, s.rdb, id, queue.Control{Type: queue.ControlApproval, RequestID: reqID, Choice: "once", By: owner}))
	var resps []queue.ApprovalRespondedData
	var deltasBefore int
	require.Eventually(t, func() bool {
		evs, _, _ := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
		_, resps = approvalEvents(t, evs)
		deltasBefore = 0
		for _, e := range evs {
			if e.Type == queue.EventMessageDelta && strings.Contains(string(e.Data), "Done") {
				deltasBefore++
			}
		}
		return len(resps) > 0
	}, 2*time.Second, 5*time.Millisecond, "the 409 is recorded as an expiry before the model goes on")
	require.Zero(t, deltasBefore)
	require.NoError(t, <-done)
	evs := s.settledLog(t, id)
	reqs, resps := approvalEvents(t, evs)
	require.Len(t, reqs, 1)
	require.Len(t, resps, 1)
	require.Equal(t, "deny", resps[0].Choice)
	require.Equal(t, executor.ExpiredReason, resps[0].Reason)
}
