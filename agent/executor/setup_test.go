package executor_test

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"privateassistant/agent/executor"
	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/queue/redistest"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

const owner = "u1"

type suite struct {
	env   *schematest.Env
	store *schema.Store
	rdb   *redis.Client
	exec  *executor.Executor
	fake  *fakeHarness
	seq   atomic.Int64
}

// setup starts a real Redis, the Appwrite emulator (provisioned by the real code), one
// harness profile, one route and one conversation, and an executor over a fake harness.
func setup(t testing.TB, fake *fakeHarness) *suite {
	t.Helper()
	env := schematest.New(t)
	rdb := redistest.Start(t).Client()
	t.Cleanup(func() { _ = rdb.Close() })
	ctx := context.Background()
	s := &suite{env: env, store: env.Store, rdb: rdb, fake: fake}
	_, err := schema.For[schema.HarnessProfile](s.store, schema.CollHarnessProfiles).Create(ctx, "hp1", "", &schema.HarnessProfile{
		ProfileID: "fake", Revision: 1, Kind: "hermes", BaseURL: "http://127.0.0.1:1", Verified: true})
	require.NoError(t, err)
	_, err = schema.For[schema.ModelRoute](s.store, schema.CollModelRoutes).Create(ctx, "mr1", "", &schema.ModelRoute{
		RouteID: "chat", Revision: 1, Alias: "chat", Device: "dev", BackendModel: "m", ContextBudget: 4096, Enabled: true})
	require.NoError(t, err)
	s.exec = s.newExecutor("agent")
	return s
}

// newExecutor is an executor over the suite's stores and fake harness, as another agent
// process would have one.
func (s *suite) newExecutor(agentID string) *executor.Executor {
	return s.newExecutorOn(agentID, s.store)
}

// newExecutorOn is newExecutor with a Store of its own (one whose requests a test holds).
func (s *suite) newExecutorOn(agentID string, store *schema.Store) *executor.Executor {
	return &executor.Executor{Store: store, RDB: s.rdb, Slots: executor.NewSlots(map[string]int{"dev": 64}),
		Harness: func(*schema.HarnessProfile) (harness.Harness, error) { return s.fake, nil },
		Log:     slog.New(slog.NewTextHandler(io.Discard, nil)), AgentID: agentID,
		LeaseTTL: 5 * time.Second, HeartbeatEvery: time.Millisecond, DeltaWindow: 2 * time.Millisecond,
		StopWait: 5 * time.Second, ReconcileEvery: 5 * time.Millisecond, ControlEvery: 2 * time.Millisecond}
}

// newRun admits a run the way admission does: the user's message, the bindings, the
// queued run.
func (s *suite) newRun(t testing.TB) string {
	t.Helper()
	ctx := context.Background()
	seq := s.seq.Add(1)
	tok := eventlog.NewToken() // random: ids differ in their first 22 characters, as real ones do
	id, msgID := "r"+tok[:31], "m"+tok[:31]
	conv := "c" + tok[:31] // a conversation per run: its history stays one message long
	_, err := schema.For[schema.Conversation](s.store, schema.CollConversations).Create(ctx, conv, owner, &schema.Conversation{
		OwnerID: owner, Title: "t", LastActivityAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	_, err = schema.For[schema.Message](s.store, schema.CollMessages).Create(ctx, msgID, owner, &schema.Message{
		OwnerID: owner, ConversationID: conv, Sequence: seq, Role: "user", Text: schema.Ptr("hello")})
	require.NoError(t, err)
	// The assistant answers take later sequences from the counter.
	require.NoError(t, s.rdb.Set(ctx, queue.ConvSeqKey(conv), seq, 0).Err())
	_, err = schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Create(ctx, id, "", &schema.RunBinding{
		OwnerID: owner, RunID: id, ConversationID: conv, MessageID: msgID, ContextSnapshotID: "s" + tok[:31],
		HarnessProfileID: "fake", HarnessRevision: 1, RouteID: "chat", RouteRevision: 1, Queue: "q"})
	require.NoError(t, err)
	_, err = schema.For[schema.Run](s.store, schema.CollRuns).Create(ctx, id, owner, &schema.Run{
		OwnerID: owner, ConversationID: conv, MessageID: msgID, RequestID: "q" + id, Role: "chat",
		Status: schema.RunQueued, QueuedAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	return id
}

func (s *suite) record(t testing.TB, id string) *schema.Run {
	t.Helper()
	r, err := schema.For[schema.Run](s.store, schema.CollRuns).Get(context.Background(), id)
	require.NoError(t, err)
	return r
}

// requireLog checks a settled run (checkLog).
func (s *suite) requireLog(t testing.TB, id string) []queue.Event {
	t.Helper()
	evs, err := s.checkLog(id)
	require.NoError(t, err)
	return evs
}

// checkLog checks a settled run: the stream holds 1..n with exactly one terminal event,
// last; Appwrite holds the same sequences with the same types (0 lost, 0 duplicated); the
// record is terminal with lastSequence n; the answer (if any) is the deltas joined.
func (s *suite) checkLog(id string) ([]queue.Event, error) {
	ctx := context.Background()
	evs, _, err := queue.ReadEvents(ctx, s.rdb, id, 0, 0)
	if err != nil {
		return nil, err
	}
	if len(evs) == 0 {
		return nil, fmt.Errorf("run %s: no events", id)
	}
	var text strings.Builder
	turnBreak := false // the stored answer keeps a blank line between model turns (answer.go)
	for i, ev := range evs {
		if ev.Sequence != int64(i+1) {
			return evs, fmt.Errorf("run %s: stream entry %d has sequence %d", id, i, ev.Sequence)
		}
		if queue.IsTerminalEvent(ev.Type) != (i == len(evs)-1) {
			return evs, fmt.Errorf("run %s: event %d %s: want exactly one terminal event, last", id, ev.Sequence, ev.Type)
		}
		switch ev.Type {
		case queue.EventToolStarted, queue.EventApprovalRequest, queue.EventApprovalResponse:
			turnBreak = true
		case queue.EventMessageDelta:
			var d queue.MessageDeltaData
			if err := json.Unmarshal(ev.Data, &d); err != nil {
				return evs, err
			}
			if d.Text != "" && turnBreak && text.Len() > 0 {
				if !strings.HasSuffix(text.String(), "\n\n") && !strings.HasPrefix(d.Text, "\n") {
					text.WriteString("\n\n")
				}
				turnBreak = false
			}
			if d.Text != "" {
				turnBreak = false
			}
			text.WriteString(d.Text)
		}
	}
	stored, err := schema.For[schema.Event](s.store, schema.CollEvents).All(ctx, schema.ListQuery{Owner: owner,
		Filters: []string{query.Equal("runId", id)}, Limit: 100})
	if err != nil {
		return evs, err
	}
	if len(stored) != len(evs) {
		return evs, fmt.Errorf("run %s: appwrite holds %d events, the stream %d", id, len(stored), len(evs))
	}
	types := map[int64]string{}
	for _, e := range stored {
		types[e.Sequence] = e.Type
	}
	for _, ev := range evs {
		if types[ev.Sequence] != ev.Type {
			return evs, fmt.Errorf("run %s: appwrite event %d is %q, the stream's %q", id, ev.Sequence, types[ev.Sequence], ev.Type)
		}
	}
	rec, err := schema.For[schema.Run](s.store, schema.CollRuns).Get(ctx, id)
	if err != nil {
		return evs, err
	}
	if !rec.Status.Terminal() || rec.LastSequence == nil || *rec.LastSequence != int64(len(evs)) {
		return evs, fmt.Errorf("run %s: record %s lastSequence %v, want terminal and %d", id, rec.Status, rec.LastSequence, len(evs))
	}
	if rec.AssistantMessageID != nil {
		m, err := schema.For[schema.Message](s.store, schema.CollMessages).Get(ctx, *rec.AssistantMessageID)
		if err != nil {
			return evs, err
		}
		if *m.Text != text.String() {
			return evs, fmt.Errorf("run %s: the answer %q is not the streamed deltas %q", id, *m.Text, text.String())
		}
	}
	return evs, nil
}

func deltas(parts ...string) []harness.Event {
	var out []harness.Event
	var all strings.Builder
	for _, p := range parts {
		out = append(out, harness.Event{Kind: harness.KindDelta, Text: p})
		all.WriteString(p)
	}
	return append(out, harness.Event{Kind: harness.KindCompleted, Text: all.String(), Usage: &harness.Usage{TotalTokens: len(parts)}})
}

func jsonUnmarshal(b []byte, v any) error { return json.Unmarshal(b, v) }
