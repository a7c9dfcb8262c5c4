package executor

import (
	"context"
	"encoding/json"

	"github.com/appwrite/sdk-for-go/query"

	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
)

// The text a resumed attempt starts from, and a gap in the native stream.
//
// An attempt that re-attaches to a native run after a recorded position (seq.go) sees only
// the events after it, so its own deltas are the tail of the answer. The text the user has
// seen so far is in the run's event log; the attempt starts from it (publishedText), so a
// run that ends without a native final text (cancelled, failed, interrupted) keeps the
// whole partial answer the user saw, not only the part streamed after the resume.
//
// Hermes retains a run's last 1000 events. An attempt that re-attaches after more than
// that gets replay.truncated (oldest_retained_seq) and never sees the events in between:
// the text it adds has a hole. It carries on (the live view is briefly incomplete) and,
// when the run ends, republishes the answer as a whole — message.reset, then the final
// text as one delta — so what the user sees ends equal to the answer. When the run ends
// without a native final text, the answer is the text the user saw (with the hole).

// nativeReplayTruncated is Hermes's announcement that a resumed stream skips events
// (api_server_runs.py, _handle_run_events).
const nativeReplayTruncated = "replay.truncated"

// publishedText returns the assistant text the run's log shows (message.reset honoured):
// from the Redis stream when it holds the run's whole log, else from Appwrite's copy.
func (a *attempt) publishedText(ctx context.Context) string {
	last := a.log.Last()
	if last <= 0 {
		return ""
	}
	if evs, first, err := queue.ReadEvents(ctx, a.e.RDB, a.runID, 0, 0); err == nil && first == 1 && int64(len(evs)) >= last {
		return visible(evs)
	}
	stored, err := schema.For[schema.Event](a.e.Store, schema.CollEvents).All(ctx, schema.ListQuery{Owner: a.run.OwnerID,
		Filters: []string{query.Equal("runId", a.runID), query.Equal("type", []interface{}{queue.EventMessageDelta, queue.EventMessageReset})},
		Order:   []string{query.OrderAsc("sequence")}})
	if err != nil {
		a.e.log().Warn("published text unavailable; a partial answer holds only this attempt's text", "run", a.runID, "err", err)
		return ""
	}
	evs := make([]queue.Event, 0, len(stored))
	for _, s := range stored {
		ev := queue.Event{Sequence: s.Sequence, Type: s.Type}
		if s.Data != nil {
			ev.Data = json.RawMessage(*s.Data)
		}
		evs = append(evs, ev)
	}
	return visible(evs)
}

// visible is the text a client shows for evs.
func visible(evs []queue.Event) string {
	var text []byte
	for _, e := range evs {
		switch e.Type {
		case queue.EventMessageDelta:
			var d queue.MessageDeltaData
			if json.Unmarshal(e.Data, &d) == nil {
				text = append(text, d.Text...)
			}
		case queue.EventMessageReset:
			text = text[:0]
		}
	}
	return string(text)
}

// isReplayGap reports whether ev is Hermes saying the resumed stream skips events.
func isReplayGap(ev harness.Event) bool {
	return ev.Kind == harness.KindUnknown && ev.NativeType == nativeReplayTruncated
}

// republish makes the visible text equal text after a gap: message.reset, then text as
// one delta. Called by finish, before the terminal event.
func (a *attempt) republish(ctx context.Context, text string) error {
	if err := a.flushDeltas(ctx); err != nil {
		return err
	}
	if err := a.emit(ctx, queue.MessageResetData{Reason: "part of the answer's stream was no longer available; here is the whole answer"}, false); err != nil {
		return err
	}
	if text == "" {
		return nil
	}
	return a.emit(ctx, queue.MessageDeltaData{Text: text}, false)
}
