package runstate

import (
	"context"
	"errors"
	"fmt"
	"maps"

	"privateassistant/schema"
)

// Initial is the status a run is created with (admission): the table's only edge out of
// "no record yet".
const Initial = schema.RunQueued

// ErrTerminal: the run is already settled; nothing moves it or patches it any more.
var ErrTerminal = errors.New("runstate: the run is terminal")

// TransitionError: the table has no edge from From to To.
type TransitionError struct{ From, To schema.RunStatus }

func (e *TransitionError) Error() string {
	return fmt.Sprintf("runstate: %s → %s is not a run transition", e.From, e.To)
}

var terminals = []schema.RunStatus{schema.RunCompleted, schema.RunFailed, schema.RunCancelled, schema.RunInterrupted}

// transitions is the run state machine: from → the statuses that may follow. Every
// non-terminal status may settle in any terminal one (a deferred patch can carry a run
// from queued straight to its end); a self edge is a phase or position update; a terminal
// status has no edge at all.
var transitions = map[schema.RunStatus][]schema.RunStatus{
	"":                           {schema.RunQueued},
	schema.RunQueued:             append([]schema.RunStatus{schema.RunWaitingForResource, schema.RunRunning}, terminals...),
	schema.RunWaitingForResource: append([]schema.RunStatus{schema.RunWaitingForResource, schema.RunRunning}, terminals...),
	schema.RunRunning: append([]schema.RunStatus{schema.RunRunning, schema.RunWaitingForResource, schema.RunWaitingForApproval,
		schema.RunCancelling}, terminals...),
	schema.RunWaitingForApproval: append([]schema.RunStatus{schema.RunWaitingForApproval, schema.RunRunning, schema.RunWaitingForResource,
		schema.RunCancelling}, terminals...),
	schema.RunCancelling: append([]schema.RunStatus{schema.RunCancelling}, terminals...),
}

// Allowed reports whether a run may move from one status to another ("" is "no record").
func Allowed(from, to schema.RunStatus) bool {
	for _, s := range transitions[from] {
		if s == to {
			return true
		}
	}
	return false
}

// Check returns nil for an allowed move, ErrTerminal when from is terminal, and a
// *TransitionError otherwise.
func Check(from, to schema.RunStatus) error {
	if from.Terminal() {
		return fmt.Errorf("%w: it is %s", ErrTerminal, from)
	}
	if !Allowed(from, to) {
		return &TransitionError{From: from, To: to}
	}
	return nil
}

// Record is one writer's view of a run record. Every write is of the version after the one
// the writer last saw, claimed first by creating that version's document (Change): when
// somebody else claimed it, the writer re-checks its fence, re-reads, re-checks the
// transition and tries again. So a writer that lost its fence never lands a write after
// the newer owner's first write, and nothing lands on a terminal record.
type Record struct {
	runs  schema.Table[schema.Run]
	fence func(context.Context) error
	cur   *schema.Run
}

// Track starts from cur (as read, with its $updatedAt). fence (nil: none) is asked before
// every retry that follows somebody else's write.
func Track(runs schema.Table[schema.Run], cur *schema.Run, fence func(context.Context) error) *Record {
	return &Record{runs: runs, fence: fence, cur: cur}
}

// Run returns the last version this writer saw.
func (r *Record) Run() *schema.Run { return r.cur }

// Status returns the status of the last version this writer saw.
func (r *Record) Status() schema.RunStatus { return r.cur.Status }

// Change is the one function a run's status changes through: it writes fields and, when
// to is not "", moves the status to it. A run already settled in to is a no-op (a retry
// of a settlement that landed); any other write to a terminal run is ErrTerminal; a move
// the table lacks is a *TransitionError; a lost fence is the fence's error.
//
// Each write makes the record's version N into N+1, and first claims N+1 by creating the
// document schema.VersionDocID(runs, run, N+1) (with the patch in it): $id uniqueness is
// enforced on every engine, so exactly one writer owns each version. A writer whose claim
// is refused re-checks its fence, re-reads and tries again on the newer version. (Appwrite's
// X-Appwrite-Timestamp alone does not do this: $updatedAt has millisecond precision and
// two writes in one millisecond both pass.)
func (r *Record) Change(ctx context.Context, to schema.RunStatus, p Patch) error {
	fields := p.Fields()
	for try := 0; ; try++ {
		from := r.cur.Status
		if from.Terminal() && to == from {
			return nil
		}
		if from.Terminal() {
			return fmt.Errorf("%w: it is %s", ErrTerminal, from)
		}
		if to != "" {
			if err := Check(from, to); err != nil {
				return err
			}
		}
		patch := maps.Clone(fields)
		if to != "" {
			patch["status"] = string(to)
		}
		next := version(r.cur) + 1
		patch["version"] = next
		err := r.runs.ClaimVersion(ctx, r.cur.ID, next, patch)
		if err == nil {
			got, err := r.runs.WriteClaimed(ctx, r.cur.ID, "version", next, r.cur.UpdatedAt, patch)
			if err != nil {
				return err
			}
			r.cur = got
			return nil
		}
		if !errors.Is(err, schema.ErrConflict) {
			return err
		}
		if try >= 8 {
			return fmt.Errorf("runstate: run %s: version %d: %w", r.cur.ID, next, schema.ErrStale)
		}
		// Somebody else owns version next.
		if r.fence != nil {
			if err := r.fence(ctx); err != nil {
				return err
			}
		}
		cur, err := r.runs.AwaitVersion(ctx, r.cur.ID, "version", next)
		if err != nil {
			return err
		}
		r.cur = cur
	}
}

func version(run *schema.Run) int64 {
	if run.Version == nil {
		return 0 // written before issue 12: no version yet
	}
	return *run.Version
}
