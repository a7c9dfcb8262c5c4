package executor_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
	"privateassistant/schema/schematest"
)

// newTurn admits a run in conversation conv on the given harness profile, after the
// conversation's earlier turns.
func (s *suite) newTurn(t *testing.T, conv, profile string) string {
	t.Helper()
	id, _ := s.newBranchTurn(t, conv, profile, nil)
	return id
}

// newBranchTurn is newTurn for a user message that names its parent (issue 34; nil: none
// named). It returns the run and message ids.
func (s *suite) newBranchTurn(t *testing.T, conv, profile string, parent *string) (string, string) {
	t.Helper()
	ctx := context.Background()
	if _, err := schema.For[schema.Conversation](s.store, schema.CollConversations).Get(ctx, conv); err != nil {
		_, err = schema.For[schema.Conversation](s.store, schema.CollConversations).Create(ctx, conv, owner, &schema.Conversation{
			OwnerID: owner, Title: "t", LastActivityAt: time.Now().UTC().Format(time.RFC3339Nano)})
		require.NoError(t, err)
	}
	seq, err := s.rdb.Incr(ctx, queue.ConvSeqKey(conv)).Result()
	require.NoError(t, err)
	tok := eventlog.NewToken()
	id, msgID := "r"+tok[:31], "m"+tok[:31]
	_, err = schema.For[schema.Message](s.store, schema.CollMessages).Create(ctx, msgID, owner, &schema.Message{
		OwnerID: owner, ConversationID: conv, Sequence: seq, Role: "user", Text: schema.Ptr("turn " + id), RunID: schema.Ptr(id), ParentID: parent})
	require.NoError(t, err)
	_, err = schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Create(ctx, id, "", &schema.RunBinding{
		OwnerID: owner, RunID: id, ConversationID: conv, MessageID: msgID, ContextSnapshotID: "s" + tok[:31],
		HarnessProfileID: profile, HarnessRevision: 1, RouteID: "chat", RouteRevision: 1, Queue: "q"})
	require.NoError(t, err)
	_, err = schema.For[schema.Run](s.store, schema.CollRuns).Create(ctx, id, owner, &schema.Run{
		OwnerID: owner, ConversationID: conv, MessageID: msgID, RequestID: "q" + id, Role: "chat",
		Status: schema.RunQueued, QueuedAt: time.Now().UTC().Format(time.RFC3339Nano)})
	require.NoError(t, err)
	return id, msgID
}

func (f *fakeHarness) lastSub() harness.Submission {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.subs[len(f.subs)-1]
}

// Serialized turns on the same harness continue its native session; a session whose run
// is in flight is never reused; after a turn handled by another harness the next turn
// starts a fresh session with the portable context (all earlier turns), never the older
// session that lacks the other harness's turns.
func TestNativeSessionReuse(t *testing.T) {
	fake := newFake(func(string) []harness.Event { return deltas("ok") }, 0)
	s := setup(t, fake)
	ctx := context.Background()
	_, err := schema.For[schema.HarnessProfile](s.store, schema.CollHarnessProfiles).Create(ctx, "hp2", "", &schema.HarnessProfile{
		ProfileID: "other", Revision: 1, Kind: "hermes", BaseURL: "http://127.0.0.1:2", Verified: true})
	require.NoError(t, err)
	conv := "c-sessions"

	r1 := s.newTurn(t, conv, "fake")
	require.NoError(t, s.exec.Execute(ctx, r1))
	require.Equal(t, "", fake.lastSub().SessionID, "the first turn creates its session")
	require.Equal(t, "pa-"+r1, fake.lastSub().SessionSeed)

	r2 := s.newTurn(t, conv, "fake")
	require.NoError(t, s.exec.Execute(ctx, r2))
	require.Equal(t, "pa-"+r1, fake.lastSub().SessionID, "a serialized turn continues the session")
	require.Empty(t, fake.lastSub().History)

	r3 := s.newTurn(t, conv, "other") // another harness takes a turn
	require.NoError(t, s.exec.Execute(ctx, r3))
	require.Equal(t, "", fake.lastSub().SessionID)

	r4 := s.newTurn(t, conv, "fake")
	require.NoError(t, s.exec.Execute(ctx, r4))
	sub := fake.lastSub()
	require.Equal(t, "", sub.SessionID, "not pa-"+r1+": it lacks the other harness's turn")
	require.Equal(t, "pa-"+r4, sub.SessionSeed)
	require.Len(t, sub.History, 6, "the portable handoff holds every earlier turn (3 user + 3 assistant)")

	// A turn whose previous turn is still running on its session starts fresh.
	r5 := s.newTurn(t, conv, "fake")
	_, err = schema.For[schema.RunBinding](s.store, schema.CollRunBindings).Update(ctx, r5, map[string]any{"nativeSessionId": "pa-busy", "nativeRunId": "native-busy"})
	require.NoError(t, err)
	schematest.SetRunStatus(t, s.store, r5, schema.RunRunning, nil)
	r6 := s.newTurn(t, conv, "fake")
	require.NoError(t, s.exec.Execute(ctx, r6))
	require.Equal(t, "", fake.lastSub().SessionID, "never the busy session")
	require.Equal(t, "pa-"+r6, fake.lastSub().SessionSeed)
}

// An edited turn (a sibling of the one it replaces) sees only its own branch, and starts a
// fresh session: the session of the turn before it by sequence holds the other version.
// The turn after the edit continues the edit's session; a turn naming no parent follows
// the latest user message.
func TestBranchesHaveTheirOwnContext(t *testing.T) {
	fake := newFake(func(string) []harness.Event { return deltas("ok") }, 0)
	s := setup(t, fake)
	ctx := context.Background()
	conv := "c-branches"
	texts := func(h []harness.Message) []string {
		out := []string{}
		for _, m := range h {
			out = append(out, m.Role+":"+m.Content)
		}
		return out
	}

	r1, m1 := s.newBranchTurn(t, conv, "fake", nil)
	require.NoError(t, s.exec.Execute(ctx, r1))
	r2, _ := s.newBranchTurn(t, conv, "fake", nil)
	require.NoError(t, s.exec.Execute(ctx, r2))
	require.Equal(t, "pa-"+r1, fake.lastSub().SessionID)

	r2b, m2b := s.newBranchTurn(t, conv, "fake", schema.Ptr(m1)) // r2's message edited
	require.NoError(t, s.exec.Execute(ctx, r2b))
	sub := fake.lastSub()
	require.Equal(t, "", sub.SessionID, "never the session that holds the other version")
	require.Equal(t, []string{"user:turn " + r1, "assistant:ok"}, texts(sub.History))

	r3, _ := s.newBranchTurn(t, conv, "fake", schema.Ptr(m2b))
	require.NoError(t, s.exec.Execute(ctx, r3))
	require.Equal(t, "pa-"+r2b, fake.lastSub().SessionID, "the turn after the edit continues the edit's session")

	r1b, _ := s.newBranchTurn(t, conv, "fake", schema.Ptr(schema.RootParent)) // the first message edited
	require.NoError(t, s.exec.Execute(ctx, r1b))
	require.Equal(t, "", fake.lastSub().SessionID)
	require.Empty(t, fake.lastSub().History)

	r4, _ := s.newBranchTurn(t, conv, "other-none", nil)
	_ = r4
	r5, _ := s.newBranchTurn(t, conv, "fake", nil) // no parent named: after r4's message
	require.NoError(t, s.exec.Execute(ctx, r5))
	require.Equal(t, []string{"user:turn " + r1b, "assistant:ok", "user:turn " + r4}, texts(fake.lastSub().History))
}

// The direct harness keeps no native sessions: a turn on it does not look for one to
// continue (the previous turn's message, binding and run), so its model call waits for
// none of those reads (issue 29: send → first character). The same turn on a harness that
// keeps sessions reads them, and continues the session.
func TestDirectTurnLooksForNoSession(t *testing.T) {
	fake := newFake(func(string) []harness.Event { return deltas("ok") }, 0)
	s := setup(t, fake)
	ctx := context.Background()
	store, cnt := s.env.CountingStore()
	readsBeforeSubmit := func(h harness.Harness, conv string) (int, harness.Submission) {
		ex := s.newExecutorOn("agent", store)
		ex.HeartbeatEvery = time.Hour // no beat's reads among the counted ones
		ex.Harness = func(*schema.HarnessProfile) (harness.Harness, error) { return h, nil }
		r1 := s.newTurn(t, conv, "fake")
		require.NoError(t, ex.Execute(ctx, r1))
		r2 := s.newTurn(t, conv, "fake")
		reads := -1
		fake.mu.Lock()
		fake.onSubmit = func() { reads = cnt.Reads() }
		fake.mu.Unlock()
		cnt.Reset()
		require.NoError(t, ex.Execute(ctx, r2))
		fake.mu.Lock()
		fake.onSubmit = nil
		fake.mu.Unlock()
		require.GreaterOrEqual(t, reads, 0, "submitted")
		return reads, fake.lastSub()
	}
	hermes, hsub := readsBeforeSubmit(fake, "c-keeps")
	require.NotEmpty(t, hsub.SessionID, "a harness that keeps sessions continues the previous turn's")
	direct, dsub := readsBeforeSubmit(directFake{fake}, "c-direct")
	require.Empty(t, dsub.SessionID)
	require.Len(t, dsub.History, 2, "a direct turn carries the portable context")
	require.Equal(t, hermes-4, direct, "no message, message list, binding list or run read for a session")
}
