package executor

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"time"

	"privateassistant/agent/artifacts"
	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/queue/eventlog"
	"privateassistant/schema"
	"privateassistant/schema/runstate"
)

// statusOf maps a terminal harness kind onto a run status.
func statusOf(kind harness.EventKind) schema.RunStatus {
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

// retryEvery spaces the retries of a settlement Appwrite or Redis refused.
const retryEvery = time.Second

// finish settles the run: artifacts, the assistant message, usage, the terminal event and
// then the terminal status. Every write is idempotent, so a crash in the middle is
// finished by the next attempt; every write is fenced (see queue/eventlog's doc).
func (a *attempt) finish(ctx context.Context, ev harness.Event, reason string) error {
	bg, cancel := context.WithTimeout(context.WithoutCancel(ctx), 2*time.Minute)
	defer cancel()
	if err := a.flushDeltas(bg); err != nil {
		return err
	}
	status := statusOf(ev.Kind)
	text := ev.Text
	if status != schema.RunCompleted || text == "" {
		if partial := a.text.String(); text == "" {
			text = partial
		}
	}
	if !a.gap {
		// Every turn of the answer, apart (answer.go): the harness's final text may be the
		// last turn only.
		text = a.wholeAnswer(text, status == schema.RunCompleted)
	}
	if a.gap && !a.terminalSeen && text != a.text.String() {
		// The stream had a hole: what the user sees becomes the answer (published.go).
		if err := a.republish(bg, text); err != nil {
			return err
		}
	}
	end := queue.RunEndData{Type: queue.RunEndType(string(status)), Status: string(status), Reason: reason}
	patch := runstate.ClearQueue().Merge(runstate.Patch{Phase: runstate.Set(string(status)), FinishedAt: runstate.Set(now())})
	errMsg := ev.Error
	if errMsg == "" && reason != "" {
		errMsg = reason
	}
	if status == schema.RunInterrupted && errMsg == "" {
		errMsg = "Hermes restarted before this run settled; it was not run again"
	}
	if status == schema.RunFailed && strings.TrimSpace(errMsg) == "" {
		errMsg = "the run failed and its harness gave no reason" // never failed without a text
	}
	if status != schema.RunCompleted && errMsg != "" {
		end.Error = truncate(errMsg, schema.SizeError-1)
		patch.ErrorSummary = runstate.Set(end.Error)
	}
	if reason != "" && end.Error == reason {
		end.Reason = "" // said once, as the error
	}
	// Files the run left behind are kept whatever the outcome (partial results survive).
	// Their ids derive from (run, path): a repeat by a later attempt is a no-op.
	if a.e.Uploader != nil && a.e.ArtifactRoot != "" && a.nativeID != "" {
		arts, skipped, err := a.e.Uploader.UploadDir(a.uploadProgress(bg), filepath.Join(a.e.ArtifactRoot, a.nativeID), a.run)
		if err := a.artifacts(bg, &end, arts, skipped, err); err != nil {
			return err
		}
	}
	// A harness whose runs work in folders of its own (real Hermes): exactly the files this
	// run's file tools wrote inside the run's own folder (runfolder.go; artifacts.UploadFiles
	// refuses names outside it), and every write of theirs that failed, said in the
	// terminal event (a completed run whose write was refused does not read as all well).
	host, shown := a.runFolder()
	if fc, ok := a.h.(harness.FileCollector); ok && a.e.Uploader != nil && host != "" && a.sessionID != "" {
		files, err := fc.RunFiles(bg, a.sessionID, a.input)
		if err != nil {
			a.e.log().Warn("the run's files could not be listed", "run", a.runID, "err", err)
		}
		inRun, rest := a.splitRunFiles(files.Written)
		for _, part := range []struct {
			dir, cwd string
			names    []string
		}{{host, shown, inRun}, {a.workDir, a.harnessCwd(), rest}} {
			if len(part.names) == 0 {
				continue
			}
			// Opened from the member's home: never through a link the run made (openDir).
			root, err := a.openDir(part.dir)
			if err != nil {
				a.e.log().Warn("the run's folder could not be opened", "run", a.runID, "err", err)
				for _, n := range part.names {
					end.SkippedArtifacts = append(end.SkippedArtifacts, queue.SkippedArtifact{Name: n, Reason: "the run's folder is not a folder of its home"})
				}
				continue
			}
			arts, skipped, err := a.e.Uploader.UploadFilesIn(a.uploadProgress(bg), root, part.dir, part.cwd, part.names, a.run)
			root.Close()
			if err := a.artifacts(bg, &end, arts, skipped, err); err != nil {
				return err
			}
		}
		for _, f := range files.Failed {
			name := f.Path
			if name == "" {
				name = "(no path)"
			}
			end.SkippedArtifacts = append(end.SkippedArtifacts, queue.SkippedArtifact{Name: name,
				Reason: truncate(f.Tool+" failed: "+f.Error, 300)})
		}
	}
	if text != "" {
		// The answer has a deterministic id (one per run, ever); it is written only while
		// this attempt holds the fence.
		if err := a.log.Check(bg); err != nil {
			return err
		}
		id, err := a.assistantMessage(bg, text)
		if err != nil && !errors.Is(err, ErrConversationDeleted) {
			return err
		}
		if id != "" {
			patch.AssistantMessageID = runstate.Set(id)
			end.MessageID = id
		}
	}
	// A conversation deleted while the run wrote into it keeps nothing of it (late.go).
	if dropped, err := DropLateWrites(bg, a.e.Store, a.e.RDB, a.run); err != nil {
		return err
	} else if dropped {
		patch.AssistantMessageID = runstate.Field[string]{}
		end.MessageID = ""
		a.removeRunFolder() // its attachments and the files it wrote, on this host
		a.e.log().Info("the run's conversation was deleted; its answer and files were dropped", "run", a.runID)
	}
	// Usage as late as possible: the gateway records a request once its answer is sent
	// (usage.go). The gateway's count (with the model served) wins over the harness's.
	if u := a.usage(bg, ev.Usage); u != nil {
		patch.Usage = runstate.Set(u.json())
		end.Usage = &queue.Usage{InputTokens: u.InputTokens, OutputTokens: u.OutputTokens, TotalTokens: u.TotalTokens}
	}
	// The terminal event goes out before the record turns terminal: a crash between the two
	// is finished by the next attempt, which sees the event and does not repeat it.
	a.log.SetStatus(status)
	if !a.terminalSeen {
		if err := a.emit(bg, end, true); err != nil {
			return err
		}
	}
	if err := a.retry(bg, a.log.Flush); err != nil {
		return err
	}
	patch.LastSequence = runstate.Set(a.log.Last())
	a.status = status
	if err := a.retry(bg, func(ctx context.Context) error {
		if err := a.patch(ctx, status, patch); err != nil {
			return err
		}
		if a.pendingPatch() {
			return errRetry
		}
		return nil
	}); err != nil && !errors.Is(err, errSettled) {
		return err
	}
	_, _ = schema.For[schema.Conversation](a.e.Store, schema.CollConversations).Update(bg, a.run.ConversationID, map[string]any{"lastActivityAt": now()})
	if a.e.Metrics != nil {
		a.e.Metrics.RunFinished(a.run.Role, string(status))
	}
	return nil
}

var errRetry = errors.New("executor: retry")

// artifacts announces the uploaded files and adds the skipped ones to the terminal event.
func (a *attempt) artifacts(ctx context.Context, end *queue.RunEndData, arts []schema.Artifact, skipped []artifacts.Skipped, err error) error {
	for _, x := range arts {
		if err := a.emit(ctx, queue.ArtifactData{ArtifactID: x.ID, Filename: x.Filename, MimeType: x.MimeType, Size: x.Size, Checksum: x.Checksum}, true); err != nil {
			return err
		}
	}
	for _, s := range skipped {
		end.SkippedArtifacts = append(end.SkippedArtifacts, queue.SkippedArtifact{Name: s.Name, Reason: s.Reason})
	}
	if err != nil {
		a.e.log().Warn("some artifacts were not uploaded", "run", a.runID, "err", err)
	}
	return nil
}

// retry calls f until it succeeds, the fence is lost, the run is settled elsewhere, or ctx
// ends; it waits retryEvery between tries.
func (a *attempt) retry(ctx context.Context, f func(context.Context) error) error {
	t := time.NewTicker(retryEvery)
	defer t.Stop()
	for {
		err := f(ctx)
		if err == nil || errors.Is(err, eventlog.ErrFenced) || errors.Is(err, errSettled) {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
