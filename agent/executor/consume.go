package executor

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"path/filepath"
	"time"

	"privateassistant/agent/eventlog"
	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema"
)

func sumHex(b []byte) string {
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

type item struct {
	ev  harness.Event
	err error
}

// pump reads the native stream into a channel until it ends.
func pump(ctx context.Context, st harness.Stream, out chan<- item) {
	defer close(out)
	for {
		ev, err := st.Next()
		select {
		case out <- item{ev, err}:
		case <-ctx.Done():
			return
		}
		if err != nil && !errors.Is(err, harness.ErrMalformed) {
			return
		}
		if err == nil && harness.Terminal(ev.Kind) {
			return
		}
	}
}

// controls reads the run's control stream (from the start: commands sent before this
// attempt began still count; repeats are harmless).
func (a *attempt) controls(ctx context.Context, out chan<- queue.Control) {
	last := "0"
	for ctx.Err() == nil {
		cs, next, err := queue.ReadControl(ctx, a.e.RDB, a.runID, last, time.Second)
		if err != nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(time.Second):
			}
			continue
		}
		last = next
		for _, c := range cs {
			select {
			case out <- c:
			case <-ctx.Done():
				return
			}
		}
	}
}

// consume follows the native run to its end.
func (a *attempt) consume(ctx context.Context, lost <-chan struct{}) error {
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	ctrl := make(chan queue.Control, 16)
	go a.controls(cctx, ctrl)

	var items chan item
	st, err := a.h.Stream(cctx, a.nativeID)
	switch {
	case err == nil:
		items = make(chan item, 64)
		go pump(cctx, st, items)
		defer st.Close()
	case errors.Is(err, harness.ErrNotAttachable):
		// Consumed by an earlier attempt, dropped or expired: reconcile by status.
	default:
		a.e.log().Warn("stream unavailable; reconciling by status", "run", a.runID, "err", err)
	}
	deltaTick := time.NewTicker(a.e.DeltaWindow)
	defer deltaTick.Stop()
	pollTick := time.NewTicker(a.e.ReconcileEvery)
	defer pollTick.Stop()
	cancelTick := time.NewTicker(2 * time.Second)
	defer cancelTick.Stop()

	for {
		var poll <-chan time.Time
		if items == nil {
			poll = pollTick.C
		}
		select {
		case <-ctx.Done():
			return a.interrupted(ctx)
		case <-lost:
			return eventlog.ErrFenced
		case <-a.revoked:
			// The device was taken from this run: stop the native run and say why.
			a.sendStop(ctx)
			return a.finish(ctx, harness.Event{Kind: harness.KindFailed, Error: fmt.Sprintf("the %s GPU stopped serving this run "+
				"(another model needed it after the drain bound, its model server crashed, or another agent took the device)", a.route.Device)}, "")
		case it, ok := <-items:
			if !ok {
				items = nil
				continue
			}
			if it.err != nil {
				if errors.Is(it.err, harness.ErrMalformed) {
					a.e.log().Warn("malformed native event skipped", "run", a.runID, "err", it.err)
					continue
				}
				// EOF is not completion: from here on, the status decides.
				items = nil
				if err := a.reconcileOnce(ctx); err != nil {
					return err
				}
				if a.status != "" && schema.IsTerminal(a.status) {
					return nil
				}
				continue
			}
			done, err := a.handle(ctx, it.ev)
			if err != nil || done {
				return err
			}
		case <-poll:
			if err := a.reconcileOnce(ctx); err != nil {
				return err
			}
			if schema.IsTerminal(a.status) {
				return nil
			}
		case c := <-ctrl:
			if err := a.control(ctx, c); err != nil {
				return err
			}
		case <-deltaTick.C:
			if err := a.flushDeltas(ctx); err != nil {
				return err
			}
			if a.cancelling {
				a.sendStop(ctx)
			}
			if a.cancelling && time.Now().After(a.stopDeadline) {
				return a.finish(ctx, harness.Event{Kind: harness.KindFailed,
					Error: "the run did not stop in time; it may still be running on the harness"}, "")
			}
		case <-cancelTick.C:
			r, err := a.runs().Get(ctx, a.runID)
			if err == nil && r.CancelRequested && !a.cancelling {
				if err := a.cancel(ctx); err != nil {
					return err
				}
			}
		}
	}
}

// handle applies one native event; done is true once the run is settled.
func (a *attempt) handle(ctx context.Context, ev harness.Event) (bool, error) {
	switch ev.Kind {
	case harness.KindDelta:
		first := a.text.Len() == 0 && a.deltas.Len() == 0
		a.deltas.WriteString(ev.Text)
		a.text.WriteString(ev.Text)
		if first {
			return false, a.flushDeltas(ctx) // the first token goes out at once
		}
		return false, nil
	case harness.KindToolStarted:
		if err := a.flushDeltas(ctx); err != nil {
			return false, err
		}
		a.patch(ctx, map[string]any{"phase": "running tool: " + ev.Tool})
		return false, a.emit(ctx, queue.EventToolStarted, map[string]any{"tool": ev.Tool, "preview": truncate(ev.Preview, 500)}, true)
	case harness.KindToolCompleted:
		if err := a.flushDeltas(ctx); err != nil {
			return false, err
		}
		a.patch(ctx, map[string]any{"phase": "thinking"})
		return false, a.emit(ctx, queue.EventToolCompleted, map[string]any{"tool": ev.Tool, "durationSec": ev.Duration, "error": ev.ToolError}, true)
	case harness.KindApprovalRequest:
		return false, a.approvalRequested(ctx, ev)
	case harness.KindApprovalResponded:
		if err := a.flushDeltas(ctx); err != nil {
			return false, err
		}
		a.pending = nil
		_, _ = a.binds().Update(ctx, a.runID, map[string]any{"pendingApprovalId": nil})
		if err := a.setStatus(ctx, schema.RunRunning, "thinking", nil); err != nil {
			return false, err
		}
		return false, a.emit(ctx, queue.EventApprovalResponse, map[string]any{"requestId": ev.RequestID, "choice": ev.Choice}, true)
	case harness.KindUnknown:
		return false, nil // forwarded nowhere: only normalized events reach users
	}
	if harness.Terminal(ev.Kind) {
		return true, a.finish(ctx, ev, "")
	}
	return false, nil
}

func truncate(s string, n int) string {
	r := []rune(s)
	if len(r) > n {
		return string(r[:n]) + "…"
	}
	return s
}

func (a *attempt) flushDeltas(ctx context.Context) error {
	if a.deltas.Len() == 0 {
		return nil
	}
	text := a.deltas.String()
	a.deltas.Reset()
	return a.emit(ctx, queue.EventMessageDelta, map[string]any{"text": text}, false)
}

func (a *attempt) approvalRequested(ctx context.Context, ev harness.Event) error {
	if err := a.flushDeltas(ctx); err != nil {
		return err
	}
	a.pending = &ev
	if !a.announced[ev.RequestID] {
		a.announced[ev.RequestID] = true
		// Bindings first, then the status: the API accepts a decision only when both say so.
		if _, err := a.binds().Update(ctx, a.runID, map[string]any{"pendingApprovalId": ev.RequestID}); err != nil {
			return err
		}
		if err := a.setStatus(ctx, schema.RunWaitingForApproval, "waiting for approval", nil); err != nil {
			return err
		}
		if err := a.emit(ctx, queue.EventApprovalRequest, map[string]any{"requestId": ev.RequestID, "command": truncate(ev.Command, 2000),
			"description": truncate(ev.Description, 500), "choices": []string{"once", "deny"}}, true); err != nil {
			return err
		}
	}
	// A decision recorded before this attempt (or before this event) is forwarded now.
	if choice, err := a.e.RDB.Get(ctx, queue.ApprovalKey(a.runID, ev.RequestID)).Result(); err == nil && choice != "" {
		return a.forward(ctx, ev.RequestID, choice)
	}
	return nil
}

func (a *attempt) forward(ctx context.Context, requestID, choice string) error {
	if a.pending == nil || a.pending.RequestID != requestID || a.forwarded[requestID] {
		return nil
	}
	if err := a.h.Approve(ctx, a.nativeID, requestID, choice); err != nil {
		a.e.log().Warn("approval not forwarded", "run", a.runID, "request", requestID, "err", err)
		return nil // a 409 means it was already resolved; the stream says what happened
	}
	a.forwarded[requestID] = true
	return nil
}

func (a *attempt) control(ctx context.Context, c queue.Control) error {
	switch c.Type {
	case queue.ControlCancel:
		return a.cancel(ctx)
	case queue.ControlApproval:
		if c.Choice != "once" && c.Choice != "deny" {
			return nil
		}
		return a.forward(ctx, c.RequestID, c.Choice)
	}
	return nil
}

func (a *attempt) cancel(ctx context.Context) error {
	if a.cancelling {
		return nil
	}
	a.cancelling = true
	a.stopDeadline = time.Now().Add(a.e.StopWait)
	if err := a.flushDeltas(ctx); err != nil {
		return err
	}
	if err := a.setStatus(context.WithoutCancel(ctx), schema.RunCancelling, "cancelling", nil); err != nil {
		return err
	}
	a.sendStop(ctx)
	return nil
}

// sendStop asks the harness to stop, on a context of its own: the handler's may already
// be cancelled (asynq's CancelProcessing is how a cancel often arrives). A failed stop is
// retried on the next tick.
func (a *attempt) sendStop(ctx context.Context) {
	if a.stopSent || a.nativeID == "" {
		return
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	if err := a.h.Stop(sctx, a.nativeID); err != nil {
		a.e.log().Warn("stop failed; retrying", "run", a.runID, "err", err)
		return
	}
	a.stopSent = true
}

// reconcileOnce reads the native status; a terminal one settles the run.
func (a *attempt) reconcileOnce(ctx context.Context) error {
	st, err := a.h.Status(ctx, a.nativeID)
	if errors.Is(err, harness.ErrNotFound) {
		return a.finish(ctx, harness.Event{Kind: harness.KindInterrupted, Error: "the harness no longer knows this run"}, "")
	}
	if err != nil {
		return nil // transient: try again on the next tick
	}
	if st.State == "waiting_for_approval" && st.Pending != nil {
		return a.approvalRequested(ctx, *st.Pending)
	}
	if !harness.Terminal(kindOf(st.State)) {
		if a.status == schema.RunWaitingForApproval && st.State == "running" {
			a.pending = nil
			return a.setStatus(ctx, schema.RunRunning, "thinking", nil)
		}
		return nil
	}
	ev := harness.Event{Kind: kindOf(st.State), Error: st.Error, Usage: st.Usage}
	if st.Output != nil {
		ev.Text = *st.Output
	}
	if ev.Kind == harness.KindCompleted && ev.Text == "" && a.sessionID != "" {
		if last, err := a.h.LastAssistant(ctx, a.sessionID); err == nil {
			ev.Text = last
		}
	}
	return a.finish(ctx, ev, "")
}

func kindOf(state string) string {
	switch state {
	case "completed":
		return harness.KindCompleted
	case "failed":
		return harness.KindFailed
	case "cancelled":
		return harness.KindCancelled
	case "interrupted":
		return harness.KindInterrupted
	}
	return state
}

// interrupted handles a cancelled context: a user's cancel still stops the native run;
// anything else (shutdown, lease loss, a Redis outage) leaves it running for the next
// attempt to re-attach.
func (a *attempt) interrupted(ctx context.Context) error {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), a.e.StopWait+10*time.Second)
	defer cancel()
	_ = a.flushDeltas(bg)
	if r, err := a.runs().Get(bg, a.runID); err == nil && r.CancelRequested && a.nativeID != "" {
		_ = a.cancel(bg)
		for time.Now().Before(a.stopDeadline) {
			a.sendStop(bg)
			if err := a.reconcileOnce(bg); err != nil {
				return err
			}
			if schema.IsTerminal(a.status) {
				return nil
			}
			time.Sleep(a.e.ReconcileEvery)
		}
	}
	fctx, fcancel := context.WithTimeout(context.WithoutCancel(ctx), 3*time.Second)
	defer fcancel()
	_ = a.log.Flush(fctx)
	a.flushPatch(fctx)
	return ctx.Err()
}

// statusOf maps a terminal harness kind onto a run status.
func statusOf(kind string) string {
	switch kind {
	case harness.KindCompleted:
		return schema.RunCompleted
	case harness.KindCancelled:
		return schema.RunCancelled
	case harness.KindInterrupted:
		return schema.RunInterrupted
	}
	return schema.RunFailed
}

// finish settles the run: artifacts, the assistant message, usage and the terminal
// status, then the terminal event. Every write is idempotent, so a crash in the middle
// is finished by the next attempt.
func (a *attempt) finish(ctx context.Context, ev harness.Event, reason string) error {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	_ = a.flushDeltas(bg)
	status := statusOf(ev.Kind)
	text := ev.Text
	if status != schema.RunCompleted || text == "" {
		if partial := a.text.String(); text == "" {
			text = partial
		}
	}
	data := map[string]any{"status": status}
	patch := map[string]any{"status": status, "phase": status, "finishedAt": now(), "queueReason": nil, "queuePosition": nil}
	if ev.Usage != nil {
		u, _ := jsonString(ev.Usage)
		patch["usage"] = u
		data["usage"] = ev.Usage
	}
	errMsg := ev.Error
	if errMsg == "" && reason != "" {
		errMsg = reason
	}
	if status == schema.RunInterrupted && errMsg == "" {
		errMsg = "Hermes restarted before this run settled; it was not run again"
	}
	if status != schema.RunCompleted && errMsg != "" {
		patch["errorSummary"] = truncate(errMsg, schema.SizeError-1)
		data["error"] = patch["errorSummary"]
	}
	// Files the run left behind are kept whatever the outcome (partial results survive).
	if a.e.Uploader != nil && a.e.ArtifactRoot != "" && a.nativeID != "" {
		arts, skipped, err := a.e.Uploader.UploadDir(bg, filepath.Join(a.e.ArtifactRoot, a.nativeID), a.run)
		for _, x := range arts {
			_ = a.emit(bg, queue.EventArtifact, map[string]any{"artifactId": x.ID, "filename": x.Filename, "mimeType": x.MimeType, "size": x.Size, "checksum": x.Checksum}, true)
		}
		if len(skipped) > 0 {
			data["skippedArtifacts"] = skipped
		}
		if err != nil {
			a.e.log().Warn("some artifacts were not uploaded", "run", a.runID, "err", err)
		}
	}
	if text != "" {
		id, err := a.assistantMessage(bg, text, status != schema.RunCompleted)
		if err != nil {
			return err
		}
		patch["assistantMessageId"] = id
		data["messageId"] = id
	}
	// The terminal event goes out before the record turns terminal: a crash between the two
	// is finished by the next attempt, which sees the event and does not repeat it.
	a.log.SetStatus(status, true)
	if !a.terminalSeen {
		typ := map[string]string{schema.RunCompleted: queue.EventRunCompleted, schema.RunFailed: queue.EventRunFailed,
			schema.RunCancelled: queue.EventRunCancelled, schema.RunInterrupted: queue.EventRunInterrupted}[status]
		if err := a.emit(bg, typ, data, true); err != nil {
			return err
		}
	}
	for {
		if err := a.log.Flush(bg); err == nil || errors.Is(err, eventlog.ErrFenced) {
			break
		}
		if bg.Err() != nil {
			return bg.Err()
		}
		time.Sleep(time.Second)
	}
	patch["lastSequence"] = a.log.Last()
	a.status = status
	for {
		a.patch(bg, patch)
		if len(a.patchQ) == 0 {
			break
		}
		if bg.Err() != nil {
			return bg.Err()
		}
		time.Sleep(time.Second)
	}
	_, _ = schema.For[schema.Conversation](a.e.Store, schema.CollConversations).Update(bg, a.run.ConversationID, map[string]any{"lastActivityAt": now()})
	if a.e.Metrics != nil {
		a.e.Metrics.RunFinished(a.run.Role, status)
	}
	return nil
}
