package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
)

func sumHex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// submit materializes the context and submits (or re-attaches to) the native run.
func (a *attempt) submit(ctx context.Context) error {
	input, history, err := a.context(ctx)
	if err != nil {
		return err
	}
	seed := "pa-" + a.runID
	sub := harness.Submission{Key: a.runID, Input: input, Model: a.route.Alias, SessionSeed: seed}
	if a.route.MaxOutput != nil {
		sub.MaxTokens = int(*a.route.MaxOutput)
	}
	keepsSessions := a.h.Kind() != harness.DirectKind // the direct harness has no native memory
	if a.bind.NativeSessionID != nil && *a.bind.NativeSessionID != "" {
		sub.SessionID = *a.bind.NativeSessionID
	} else if s := a.compatibleSession(ctx); keepsSessions && s != "" {
		sub.SessionID = s
	} else {
		sub.SessionID = seed
	}
	if sub.SessionID == seed {
		sub.History = history // a fresh session starts from the portable context
	}
	if a.bind.NativeSessionID == nil || *a.bind.NativeSessionID != sub.SessionID {
		// Persisted before submitting, so every attempt sends the identical body.
		if _, err := a.binds().Update(ctx, a.runID, map[string]any{"nativeSessionId": sub.SessionID}); err != nil {
			return err
		}
	}
	if sub.SessionID == seed {
		sub.SessionID = "" // the harness creates it (idempotently) with the seed id
	}
	att, err := a.h.Submit(ctx, sub)
	if err != nil {
		return err
	}
	a.nativeID, a.sessionID = att.NativeRunID, att.SessionID
	prev := ""
	if a.bind.NativeRunID != nil {
		prev = *a.bind.NativeRunID
	}
	if prev != att.NativeRunID {
		if _, err := a.binds().Update(ctx, a.runID, map[string]any{"nativeRunId": att.NativeRunID}); err != nil {
			return err
		}
	}
	if prev != "" && !att.Replayed && a.log.Last() > 0 {
		// The harness lost the earlier run (the direct harness lives in the agent's
		// memory): its answer starts over, so the client drops the partial text.
		if err := a.emit(ctx, queue.MessageResetData{Reason: "the answer restarted after an interruption"}, true); err != nil {
			return err
		}
	}
	return a.setStatus(ctx, schema.RunRunning, "thinking", nil)
}

// compatibleSession finds the native session of this conversation's latest run with the
// same harness revision and route: continuing it keeps the harness's own memory.
func (a *attempt) compatibleSession(ctx context.Context) string {
	page, err := a.binds().List(ctx, schema.ListQuery{Filters: []string{
		query.Equal("conversationId", a.bind.ConversationID), query.Equal("harnessProfileId", a.bind.HarnessProfileID),
		query.Equal("harnessRevision", a.bind.HarnessRevision), query.Equal("routeId", a.bind.RouteID),
		query.IsNotNull("nativeSessionId"),
	}, Order: []string{query.OrderDesc("$sequence")}, Limit: 20})
	if err != nil {
		return ""
	}
	for _, b := range page.Items {
		if b.RunID != a.runID && b.NativeSessionID != nil && *b.NativeSessionID != "" {
			return *b.NativeSessionID
		}
	}
	return ""
}

// context returns the user's message and the portable context before it, and makes sure
// the immutable context snapshot record exists.
func (a *attempt) context(ctx context.Context) (string, []harness.Message, error) {
	msgs := schema.For[schema.Message](a.e.Store, schema.CollMessages)
	orig, err := msgs.Get(ctx, a.bind.MessageID)
	if err != nil {
		return "", nil, err
	}
	all, err := msgs.All(ctx, schema.ListQuery{Owner: a.run.OwnerID,
		Filters: []string{query.Equal("conversationId", a.run.ConversationID), query.LessThan("sequence", orig.Sequence)},
		Order:   []string{query.OrderAsc("sequence")}, Limit: 100})
	if err != nil {
		return "", nil, err
	}
	var history []harness.Message
	for _, m := range all {
		if m.Text != nil && *m.Text != "" {
			history = append(history, harness.Message{Role: m.Role, Content: *m.Text})
		}
	}
	input := ""
	if orig.Text != nil {
		input = *orig.Text
	}
	if err := a.snapshot(ctx, orig.Sequence, append(history, harness.Message{Role: "user", Content: input})); err != nil {
		return "", nil, err
	}
	return input, history, nil
}

func (a *attempt) snapshot(ctx context.Context, through int64, msgs []harness.Message) error {
	b, _ := json.Marshal(msgs)
	sum := sumHex(b)
	rec := &schema.ContextSnapshot{OwnerID: a.run.OwnerID, ConversationID: a.run.ConversationID, ThroughSequence: through, Checksum: sum}
	if len([]rune(string(b))) <= schema.SizeSnapshot {
		s := string(b)
		rec.Context = &s
	} else {
		rec.Context = schema.Ptr(`{"truncated":true,"note":"the full context is the conversation's messages through throughSequence"}`)
	}
	_, err := schema.For[schema.ContextSnapshot](a.e.Store, schema.CollContextSnapshots).Create(ctx, a.bind.ContextSnapshotID, "", rec)
	if errors.Is(err, schema.ErrConflict) {
		return nil
	}
	return err
}
