package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/runconfig"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

func sumHex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// submit checks the harness, materializes the context and submits (or re-attaches to)
// the native run.
func (a *attempt) submit(ctx context.Context) error {
	if err := a.checkHarness(ctx); err != nil {
		return err
	}
	input, history, err := a.context(ctx)
	if err != nil {
		return err
	}
	a.input = input
	seed := "pa-" + a.runID
	sub := harness.Submission{Key: a.runID, Input: input, Model: a.route.Alias, SessionSeed: seed}
	if a.e.Instructions != nil {
		sub.Instructions = a.e.Instructions(ctx, a.run)
	}
	if note := a.runNote(); note != "" {
		sub.Instructions = strings.TrimSpace(sub.Instructions + "\n\n" + note)
	}
	// The tool policy pinned at admission; unreadable, it allows nothing.
	sub.Tools, _ = runconfig.ParseToolPolicy(a.bind.ToolPolicy)
	if a.route.MaxOutput != nil {
		sub.MaxTokens = int(*a.route.MaxOutput)
	}
	keepsSessions := a.h.Kind() != harness.DirectKind // the direct harness has no native memory
	if a.bind.NativeSessionID != nil && *a.bind.NativeSessionID != "" {
		sub.SessionID = *a.bind.NativeSessionID
	} else if s := a.compatibleSession(ctx, keepsSessions); s != "" {
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
		sid := sub.SessionID
		a.bind.NativeSessionID = &sid
	}
	if sub.SessionID == seed {
		sub.SessionID = "" // the harness creates it (idempotently) with the seed id
	}
	handoff := false
	if sid := a.sessionID; a.pauses > 0 {
		if sid == "" {
			sid = *a.bind.NativeSessionID // persisted above
		}
		handoff = true
		// A paused run goes on in its own session with the handoff (preempt.go).
		sub.Run, sub.Key = a.runID, fmt.Sprintf("%s:p%d", a.runID, a.pauses)
		sub.Input, sub.History, sub.SessionID = Handoff, nil, sid
	}
	// The run's own folder, and the session pointed at it (runfolder.go).
	session := sub.SessionID
	if session == "" {
		session = seed
	}
	if err := a.prepareRunFolder(session); err != nil {
		return err
	}
	if prev, why := a.pastRetention(ctx); prev != "" {
		// Never resubmit: the harness may have forgotten the key and would start the run a
		// second time. Follow the native run this run already has; if the harness no
		// longer knows it, the run ends interrupted with this reason (reconcileOnce).
		a.nativeID, a.sessionID, a.reattached, a.retentionReason = prev, *a.bind.NativeSessionID, true, why
		return a.setStatus(ctx, schema.RunRunning, "thinking", runstate.Patch{})
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
	// Re-attached only when the harness replayed the earlier run: the direct harness (in
	// the agent's memory) starts a new run under the same id after a restart, and that
	// one's stream starts over (after the message.reset below).
	a.reattached = prev != "" && prev == att.NativeRunID && att.Replayed
	if prev != att.NativeRunID {
		if _, err := a.binds().Update(ctx, a.runID, map[string]any{"nativeRunId": att.NativeRunID}); err != nil {
			return err
		}
		a.bind.NativeRunID = &att.NativeRunID
	}
	if handoff && !a.reattached && a.text.Len() == 0 {
		// A handoff this attempt started after an earlier one paused: the text published
		// before the pause is the start of the answer.
		a.carryPublished = true
	}
	if prev != "" && !att.Replayed && a.log.Last() > 0 && !handoff {
		// The harness lost the earlier run (the direct harness lives in the agent's
		// memory): its answer starts over, so the client drops the partial text.
		if err := a.emit(ctx, queue.MessageResetData{Reason: "the answer restarted after an interruption"}, true); err != nil {
			return err
		}
	}
	return a.setStatus(ctx, schema.RunRunning, "thinking", runstate.Patch{})
}

// checkHarness re-checks a harness whose capabilities can change (harness.Checker: its
// check is cached briefly) before anything is submitted, and records the check on the
// run's binding (harnessCheck). A harness that lost what runs rely on fails with
// harness.ErrIncapable: the run fails with the reason and nothing reaches the harness.
func (a *attempt) checkHarness(ctx context.Context) error {
	c, ok := a.h.(harness.Checker)
	if !ok {
		return nil
	}
	chk, err := c.Check(ctx)
	if chk.Capabilities != nil {
		b, _ := json.Marshal(chk)
		if rec := string(b); len(rec) <= schema.SizeJSONSmall && (a.bind.HarnessCheck == nil || *a.bind.HarnessCheck != rec) {
			if _, werr := a.binds().Update(ctx, a.runID, map[string]any{"harnessCheck": rec}); werr != nil {
				return werr
			}
			a.bind.HarnessCheck = &rec
		}
	}
	return err
}

// retentionMargin is taken off the harness's retention: a record about to expire counts
// as expired.
const retentionMargin = time.Minute

// pastRetention returns the native run id this run was submitted as, and why it must not
// be resubmitted, when the run started longer ago than the harness keeps idempotency
// records (runs_idempotency.retention_seconds). The run's startedAt precedes its first
// submission, so the test errs on the side of not resubmitting. A retention of 0 or less
// never counts as safe. "" otherwise (never submitted, a harness that is not a Retainer,
// or still inside the retention).
func (a *attempt) pastRetention(ctx context.Context) (string, string) {
	if a.bind.NativeRunID == nil || *a.bind.NativeRunID == "" || a.bind.NativeSessionID == nil || a.run.StartedAt == nil {
		return "", ""
	}
	r, ok := a.h.(harness.Retainer)
	if !ok {
		return "", ""
	}
	started, err := time.Parse(time.RFC3339Nano, *a.run.StartedAt)
	if err != nil {
		return "", ""
	}
	ret, err := r.Retention(ctx)
	if err != nil {
		if age := time.Since(started); age > 24*time.Hour-retentionMargin {
			// Unknown now, and older than Hermes's default retention: do not risk it.
			return *a.bind.NativeRunID, fmt.Sprintf("the run was submitted %s ago and the harness's idempotency retention is unknown; it was not submitted again", age.Round(time.Second))
		}
		return "", ""
	}
	if ret <= 0 {
		// A harness that keeps no idempotency record (or reports none) may forget the key at
		// once: a resubmission is never safe.
		return *a.bind.NativeRunID, fmt.Sprintf("the harness reports no idempotency retention (%s), so a resubmission could start the run twice; it was not submitted again", ret)
	}
	if age := time.Since(started); age > ret-retentionMargin {
		return *a.bind.NativeRunID, fmt.Sprintf("the run was submitted %s ago, past the harness's idempotency retention (%s); it was not submitted again",
			age.Round(time.Second), ret)
	}
	return "", ""
}

// compatibleSession returns the native session to continue, or "" for a fresh one with
// the portable context. Only the session of the conversation's previous turn qualifies,
// and only when that turn ran on the same harness revision and route and its run has
// settled: a session whose run is still in flight is never reused (Hermes would queue
// this turn behind it and then show it a transcript this run's context does not hold),
// and after turns handled by another harness (or never submitted) the older session
// lacks them, so the run starts fresh from the portable context instead of a partial
// transcript.
// A harness without native memory (keeps false) has none to continue: nothing is read,
// and the model call is not kept waiting for reads whose answer is not used.
func (a *attempt) compatibleSession(ctx context.Context, keeps bool) string {
	if !keeps {
		return ""
	}
	// The previous turn is the run of the conversation's previous user message, by the
	// message sequence: an explicit attribute, never $sequence (a UUIDv7 on MongoDB,
	// ordered only to the millisecond).
	msgs := schema.For[schema.Message](a.e.Store, schema.CollMessages)
	own, err := msgs.Get(ctx, a.bind.MessageID)
	if err != nil {
		return ""
	}
	before, err := msgs.List(ctx, schema.ListQuery{Owner: a.run.OwnerID,
		Filters: []string{query.Equal("conversationId", a.bind.ConversationID), query.Equal("role", "user"), query.LessThan("sequence", own.Sequence)},
		Order:   []string{query.OrderDesc("sequence")}, Limit: 1})
	if err != nil || len(before.Items) == 0 {
		return ""
	}
	// On a branch (issue 34) the session continues only from the turn just before this one
	// by sequence, and only when this message follows it: that session holds exactly this
	// branch (each session is continued by at most the one user message right after its
	// own). An edit, regeneration or retry of an earlier turn starts fresh from the
	// portable context of its branch.
	if own.ParentID != nil && *own.ParentID != before.Items[0].ID {
		return ""
	}
	page, err := a.binds().List(ctx, schema.ListQuery{Filters: []string{query.Equal("conversationId", a.bind.ConversationID),
		query.Equal("messageId", before.Items[0].ID)}, Limit: 1})
	if err != nil || len(page.Items) == 0 {
		return ""
	}
	prev := &page.Items[0]
	if prev == nil || prev.NativeSessionID == nil || *prev.NativeSessionID == "" ||
		prev.HarnessProfileID != a.bind.HarnessProfileID || prev.HarnessRevision != a.bind.HarnessRevision || prev.RouteID != a.bind.RouteID {
		return ""
	}
	r, err := a.runs().Get(ctx, prev.RunID)
	if err != nil || !r.Status.Terminal() {
		return ""
	}
	return *prev.NativeSessionID
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
	// Only the branch this message is on (schema.Branch): other versions of earlier turns
	// and their answers are not its context.
	all = schema.Branch(all, orig)
	input := ""
	if orig.Text != nil {
		input = *orig.Text
	}
	// Attached files go into the run's working folder first; the input names their paths.
	in := a.newInputs()
	if input, err = in.attach(ctx, orig, input); err != nil {
		return "", nil, err
	}
	// Earlier turns name their files again (newest first for the bound and the budget),
	// so a later turn can still read them.
	texts := make([]string, len(all))
	for i := len(all) - 1; i >= 0; i-- {
		m := all[i]
		if m.Text != nil {
			texts[i] = *m.Text
		}
		if texts[i], err = in.earlier(ctx, &m, texts[i]); err != nil {
			return "", nil, err
		}
	}
	var history []harness.Message
	for i, m := range all {
		if texts[i] != "" {
			history = append(history, harness.Message{Role: m.Role, Content: texts[i]})
		}
	}
	if err := a.snapshot(ctx, orig.Sequence, append(history, harness.Message{Role: "user", Content: input})); err != nil {
		return "", nil, err
	}
	return input, history, nil
}

func (a *attempt) snapshot(ctx context.Context, through int64, msgs []harness.Message) error {
	b, _ := json.Marshal(msgs)
	sum := sumHex(b)
	// Whole, whatever its size: a context beyond the field goes to the file contextFileId
	// names (schema/overflow.go).
	rec := &schema.ContextSnapshot{OwnerID: a.run.OwnerID, ConversationID: a.run.ConversationID, ThroughSequence: through, Checksum: sum,
		Context: schema.Ptr(string(b))}
	_, err := schema.For[schema.ContextSnapshot](a.e.Store, schema.CollContextSnapshots).Create(ctx, a.bind.ContextSnapshotID, "", rec)
	if errors.Is(err, schema.ErrConflict) {
		return nil
	}
	return err
}
