package executor

import (
	"context"

	"privateassistant/agent/artifacts"
	"privateassistant/agent/harness"
	"privateassistant/queue"
	"privateassistant/schema/runstate"
)

// Progress in real units only (issue 32 item 6): the run's record (progressCompleted,
// progressTotal) and a run.status event carry counts the harness or the agent really
// has — Hermes's own task list after each todo tool call — and nothing otherwise (never
// tokens as a percentage).

// taskProgress publishes the native session's task list (done of total) as the todo call
// this attempt saw complete left it (a.todoCalls counts them; a re-attached attempt may
// have missed some, so it reads the latest). A harness without one, or a session without
// a list, publishes nothing; an unreadable list is skipped (the next todo call tries again).
func (a *attempt) taskProgress(ctx context.Context) error {
	tl, ok := a.h.(harness.TaskLister)
	if !ok || a.sessionID == "" {
		return nil
	}
	nth := a.todoCalls
	if a.reattached {
		nth = 0
	}
	done, total, ok, err := tl.Tasks(ctx, a.sessionID, nth)
	if err != nil {
		a.e.log().Warn("task list unreadable; progress not updated", "run", a.runID, "err", err)
		return nil
	}
	if !ok || total == 0 {
		return nil
	}
	return a.progress(ctx, int64(done), int64(total), "tasks", "")
}

// progress writes done of total units to the record and the run's events, with the phase
// the run entered ("" keeps it).
func (a *attempt) progress(ctx context.Context, done, total int64, unit, phase string) error {
	if err := a.flushDeltas(ctx); err != nil {
		return err
	}
	p := runstate.Patch{ProgressCompleted: runstate.Set(done), ProgressTotal: runstate.Set(total)}
	if phase != "" {
		p.Phase = runstate.Set(phase)
	}
	if err := a.patch(ctx, "", p); err != nil {
		return err
	}
	return a.emit(ctx, queue.RunStatusData{Status: string(a.status), Phase: phase, Progress: &queue.Progress{Completed: done, Total: total, Unit: unit}}, true)
}

// PhaseUploading is the phase of a run whose files are being uploaded as artifacts.
const PhaseUploading = "uploading artifacts"

// uploadProgress is ctx reporting the artifacts uploaded, n of m, as the uploader goes
// (called on this attempt's goroutine: the uploader runs inline). A failed write is
// logged: the upload goes on.
func (a *attempt) uploadProgress(ctx context.Context) context.Context {
	return artifacts.WithProgress(ctx, func(done, total int) {
		if total == 0 {
			return
		}
		phase := ""
		if done == 0 {
			phase = PhaseUploading // the first report comes before the first file
		}
		if err := a.progress(ctx, int64(done), int64(total), "artifacts uploaded", phase); err != nil {
			a.e.log().Warn("upload progress not written", "run", a.runID, "err", err)
		}
	})
}
