package runstate_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"privateassistant/schema"
	"privateassistant/schema/appwritetest"
	"privateassistant/schema/runstate"
	"privateassistant/schema/schematest"
)

// TestTransitionTable walks every (from, to) pair, "no record" included, against the
// expected machine written out independently of the table.
func TestTransitionTable(t *testing.T) {
	const (
		Q  = schema.RunQueued
		WR = schema.RunWaitingForResource
		R  = schema.RunRunning
		WA = schema.RunWaitingForApproval
		C  = schema.RunCancelling
	)
	ends := map[schema.RunStatus]bool{schema.RunCompleted: true, schema.RunFailed: true, schema.RunCancelled: true, schema.RunInterrupted: true}
	live := map[schema.RunStatus][]schema.RunStatus{
		"": {Q},
		Q:  {WR, R},
		WR: {WR, R},
		R:  {R, WR, WA, C},
		WA: {WA, R, WR, C},
		C:  {C},
	}
	from := append([]schema.RunStatus{""}, schema.RunStatuses...)
	n := 0
	for _, f := range from {
		for _, to := range append([]schema.RunStatus{""}, schema.RunStatuses...) {
			want := false
			switch {
			case f.Terminal():
				want = false // terminal never leaves terminal
			case f != "" && ends[to]:
				want = true // every live status may settle
			default:
				for _, s := range live[f] {
					want = want || s == to
				}
			}
			require.Equal(t, want, runstate.Allowed(f, to), "%q → %q", f, to)
			err := runstate.Check(f, to)
			switch {
			case want:
				require.NoError(t, err)
			case f.Terminal():
				require.ErrorIs(t, err, runstate.ErrTerminal, "%q → %q", f, to)
			default:
				var te *runstate.TransitionError
				require.ErrorAs(t, err, &te, "%q → %q", f, to)
			}
			n++
		}
	}
	require.Equal(t, 10*10, n)
	require.True(t, runstate.Allowed("", runstate.Initial))
	for _, s := range schema.RunStatuses {
		require.Equal(t, ends[s], s.Terminal(), string(s))
		require.Equal(t, ends[s], schema.IsTerminal(string(s)), string(s))
	}
}

func newRun(t *testing.T, st *schema.Store, id string, status schema.RunStatus) *schema.Run {
	t.Helper()
	run, err := schema.For[schema.Run](st, schema.CollRuns).Create(context.Background(), id, "u1", &schema.Run{
		OwnerID: "u1", ConversationID: "c1", MessageID: "m" + id, RequestID: "q" + id, Role: "chat",
		Status: status, QueuedAt: "2026-01-01T00:00:00Z"})
	require.NoError(t, err)
	return run
}

// A terminal record is never patched again, and a settlement repeated is a no-op — on
// every engine, every write in the same millisecond.
func TestTerminalNeverLeavesTerminal(t *testing.T) {
	for _, e := range appwritetest.Engines {
		t.Run(string(e), func(t *testing.T) {
			env := schematest.OneMillisecond(t, e)
			ctx := context.Background()
			runs := schema.For[schema.Run](env.Store, schema.CollRuns)
			run := newRun(t, env.Store, "r1", schema.RunRunning)
			settler := runstate.Track(runs, run, nil)
			stale := runstate.Track(runs, run, nil) // saw the same version, writes later
			require.NoError(t, settler.Change(ctx, schema.RunCancelled, runstate.Patch{Phase: runstate.Set("cancelled")}))
			require.NoError(t, settler.Change(ctx, schema.RunCancelled, runstate.Patch{}), "a repeated settlement is a no-op")

			require.ErrorIs(t, stale.Change(ctx, schema.RunRunning, runstate.Patch{Phase: runstate.Set("thinking")}), runstate.ErrTerminal)
			require.ErrorIs(t, stale.Change(ctx, "", runstate.Patch{Phase: runstate.Set("thinking")}), runstate.ErrTerminal)
			require.ErrorIs(t, stale.Change(ctx, schema.RunCompleted, runstate.Patch{}), runstate.ErrTerminal)
			got, err := runs.Get(ctx, run.ID)
			require.NoError(t, err)
			require.Equal(t, schema.RunCancelled, got.Status)
			require.Equal(t, "cancelled", *got.Phase)
		})
	}
}

// A writer that lost its fence cannot land a write after the newer owner's first write:
// the newer owner claimed the next version, so the stale writer's claim is refused and the
// fence check before the retry stops it — on every engine, every write in the same
// millisecond (where the X-Appwrite-Timestamp check alone lets the stale write through).
func TestStaleWriterIsFenced(t *testing.T) {
	for _, e := range appwritetest.Engines {
		t.Run(string(e), func(t *testing.T) {
			env := schematest.OneMillisecond(t, e)
			ctx := context.Background()
			runs := schema.For[schema.Run](env.Store, schema.CollRuns)
			run := newRun(t, env.Store, "r2", schema.RunRunning)
			errLost := errors.New("fence lost")
			fenced := false
			old := runstate.Track(runs, run, func(context.Context) error {
				if fenced {
					return errLost
				}
				return nil
			})
			require.NoError(t, old.Change(ctx, "", runstate.Patch{Phase: runstate.Set("one")}))

			cur, err := runs.Get(ctx, run.ID)
			require.NoError(t, err)
			fenced = true // the newer owner claimed the fence, then wrote the record
			newer := runstate.Track(runs, cur, nil)
			require.NoError(t, newer.Change(ctx, schema.RunWaitingForApproval, runstate.Patch{Phase: runstate.Set("approval")}))

			require.ErrorIs(t, old.Change(ctx, schema.RunRunning, runstate.Patch{Phase: runstate.Set("stale")}), errLost)
			got, err := runs.Get(ctx, run.ID)
			require.NoError(t, err)
			require.Equal(t, schema.RunWaitingForApproval, got.Status)
			require.Equal(t, "approval", *got.Phase)
			require.Equal(t, int64(2), *got.Version)

			// A writer that keeps its fence re-reads and applies its change on the newest version.
			fenced = false
			require.NoError(t, old.Change(ctx, schema.RunRunning, runstate.Patch{Phase: runstate.Set("thinking")}))
			require.Equal(t, schema.RunRunning, old.Status())
			require.Equal(t, int64(3), *old.Run().Version)
		})
	}
}

// A writer that claimed a version and died before writing it does not block the run: the
// next writer waits RollForwardAfter, then writes the claimed patch itself and goes on. The
// dead writer's late write, if it comes after all, is refused: it is conditional on the
// $updatedAt it read before its claim, and the roll-forward landed later.
func TestAClaimWithoutItsWriteIsRolledForward(t *testing.T) {
	defer func(d time.Duration) { schema.RollForwardAfter = d }(schema.RollForwardAfter)
	schema.RollForwardAfter = 50 * time.Millisecond
	for _, e := range appwritetest.Engines {
		t.Run(string(e), func(t *testing.T) {
			env := schematest.NewOn(t, e)
			ctx := context.Background()
			runs := schema.For[schema.Run](env.Store, schema.CollRuns)
			run := newRun(t, env.Store, "r3", schema.RunRunning)
			// The dead writer's claim of version 1, without its write.
			_, err := schema.For[schema.VersionClaim](env.Store, schema.CollVersions).Create(ctx, schema.VersionDocID(schema.CollRuns, run.ID, 1), "",
				&schema.VersionClaim{Target: "runs/" + run.ID, Version: 1, Patch: `{"phase":"dead","version":1}`})
			require.NoError(t, err)

			start := time.Now()
			live := runstate.Track(runs, run, nil)
			require.NoError(t, live.Change(ctx, schema.RunCompleted, runstate.Patch{Phase: runstate.Set("done")}))
			require.GreaterOrEqual(t, time.Since(start), schema.RollForwardAfter, "the owner of a claim gets its time to write")
			got, err := runs.Get(ctx, run.ID)
			require.NoError(t, err)
			require.Equal(t, schema.RunCompleted, got.Status)
			require.Equal(t, "done", *got.Phase)
			require.Equal(t, int64(2), *got.Version)

			_, err = runs.UpdateIfUnchanged(ctx, run.ID, run.UpdatedAt, map[string]any{"phase": "dead", "version": 1})
			require.ErrorIs(t, err, schema.ErrStale, "the dead writer's late write")
		})
	}
}

// Only runstate changes a run's status: schema.Table refuses a status patch without the
// version runstate claims (issue 10's "only runstate writes status", checked on every
// write instead of by grep). Other fields of a run are written as before.
func TestAStatusPatchOutsideRunstateIsRefused(t *testing.T) {
	ctx := context.Background()
	st := schematest.New(t).Store
	runs := schema.For[schema.Run](st, schema.CollRuns)
	run := newRun(t, st, "r-guard", schema.RunQueued)
	for _, write := range []func() error{
		func() error { _, err := runs.Update(ctx, run.ID, map[string]any{"status": "running"}); return err },
		func() error {
			_, err := runs.UpdateOwned(ctx, "u1", run.ID, map[string]any{"status": "cancelled", "phase": "x"})
			return err
		},
		func() error {
			_, err := runs.UpdateIfUnchanged(ctx, run.ID, run.UpdatedAt, map[string]any{"status": "failed"})
			return err
		},
	} {
		require.ErrorIs(t, write(), schema.ErrStatusOutsideRunstate)
	}
	got, err := runs.Update(ctx, run.ID, map[string]any{"cancelRequested": true})
	require.NoError(t, err, "other fields are written as before")
	require.Equal(t, schema.RunQueued, got.Status)
	rec := runstate.Track(runs, got, nil)
	require.NoError(t, rec.Change(ctx, schema.RunCancelled, runstate.Patch{}))
	got, err = runs.Get(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, schema.RunCancelled, got.Status)
}

// A patch the record refuses (a value longer than its field) is refused before it claims a
// version: it returns the field's error, and the run's next write goes through at once
// (a claim holding a patch nobody can write would hold back every later write of the run:
// its owner and every roll-forward refused, the status stuck — as a 270-character
// queueReason once left a job "queued" while it ran).
func TestARefusedPatchClaimsNoVersion(t *testing.T) {
	defer func(d time.Duration) { schema.RollForwardAfter = d }(schema.RollForwardAfter)
	schema.RollForwardAfter = 50 * time.Millisecond
	ctx := context.Background()
	st := schematest.New(t).Store
	runs := schema.For[schema.Run](st, schema.CollRuns)
	run := newRun(t, st, "r-refused", schema.RunQueued)
	rec := runstate.Track(runs, run, nil)
	err := rec.Change(ctx, schema.RunWaitingForResource, runstate.Patch{QueueReason: runstate.Set(strings.Repeat("x", schema.SizeQueueReason+1))})
	var fe *schema.FieldError
	require.ErrorAs(t, err, &fe)
	require.Equal(t, "queueReason", fe.Field)
	_, err = schema.For[schema.VersionClaim](st, schema.CollVersions).Get(ctx, schema.VersionDocID(schema.CollRuns, run.ID, 1))
	require.ErrorIs(t, err, schema.ErrNotFound, "no version was claimed for the refused patch")

	other := runstate.Track(runs, run, nil) // another writer, as the next attempt would be
	start := time.Now()
	require.NoError(t, other.Change(ctx, schema.RunRunning, runstate.Patch{Phase: runstate.Set("starting")}))
	require.Less(t, time.Since(start), schema.RollForwardAfter, "no claim to wait for")
	got, err := runs.Get(ctx, run.ID)
	require.NoError(t, err)
	require.Equal(t, schema.RunRunning, got.Status)
	require.Equal(t, int64(1), *got.Version)
}
