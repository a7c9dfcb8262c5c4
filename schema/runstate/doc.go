// Package runstate is the run state machine: which status may follow which, and the one
// function every status change goes through.
//
// # Statuses
//
// A run is created queued (Initial, by admission). Live statuses: queued,
// waiting_for_resource, running, waiting_for_approval, cancelling. Terminal statuses:
// completed, failed, cancelled, interrupted.
//
// # The transition table
//
//	(no record)           → queued
//	queued                → waiting_for_resource, running, any terminal
//	waiting_for_resource  → waiting_for_resource, running, any terminal
//	running               → running, waiting_for_resource, waiting_for_approval, cancelling, any terminal
//	waiting_for_approval  → waiting_for_approval, running, waiting_for_resource, cancelling, any terminal
//	cancelling            → cancelling, any terminal
//	any terminal          → nothing
//
// A self edge is a phase or queue-position update. running → waiting_for_resource is a
// later attempt waiting for its device again. Every live status may settle in any
// terminal one: a record write Appwrite refused is retried merged with later ones, so a
// run can go from queued to its end in one write. cancelling never goes back to running:
// an approval answered while a cancel is under way does not undo the cancel.
//
// # Who writes a run's status
//
// Only Record.Change writes a status: the executor (agent/executor: setStatus, finish, and
// every other run patch, through attempt.patch), control (settleCancelled) and a
// backup restore (backup: restorer.interrupt settles the runs the restore ends, without a
// fence: the agents are stopped while restoring, backup/doc.go). Admission creates the record with Initial. Readers (the resumer, the outbox, the API)
// read it. Other writers of other fields (control's cancelRequested) write plainly; a
// Record then sees a newer version and re-reads.
//
// What a change writes beside the status is a typed Patch (patch.go): each field unset,
// set or cleared (null), times as time.Time until the wire, so a value of the wrong type
// is a compile error rather than a field the store drops (TestPatchFieldsAreRunAttributes
// checks each field against the runs collection; TestPatchSetsClearsAndMerges).
//
// # Invariants, and the test that proves each
//
//  1. The table is exactly the one above, and a terminal status has no edge:
//     TestTransitionTable walks every (from, to) pair, "no record" included.
//  2. Terminal never leaves terminal: no write of any field lands on a terminal record
//     through a Record (ErrTerminal); settling again in the same status is a no-op:
//     TestTerminalNeverLeavesTerminal, and end to end TestSettledElsewhereStaysSettled in
//     agent/executor.
//  3. A Record writes only the version after the one it last saw, and owns it first: the
//     record carries an integer version, and a write of version N+1 first creates the
//     document schema.VersionDocID(runs, run, N+1) in versions (with the patch in it).
//     $id uniqueness is enforced on every engine, so exactly one writer owns each version.
//     (Appwrite's X-Appwrite-Timestamp check alone is not enough: $updatedAt has
//     millisecond precision and a stored $updatedAt equal to the header passes, so two
//     writes in one millisecond both land on MongoDB and MariaDB.) A writer whose claim is
//     refused checks its fence first, then re-reads and re-checks the transition; a writer
//     that lost its fence therefore lands nothing after the newer owner's first write:
//     TestStaleWriterIsFenced and TestTerminalNeverLeavesTerminal, on every engine with
//     every write in one millisecond, and end to end
//     TestFencedAttemptWritesNothingAfterTheClaim in agent/executor.
//  4. A claim without its write (the writer died in between) does not block the run: a
//     writer that finds version N+1 claimed and the record still at N for
//     schema.RollForwardAfter (the wait restarting with every write it sees) writes the claimed
//     patch itself, conditional on the $updatedAt that stood that long. The dead
//     writer's late write is conditional on a $updatedAt at least RollForwardAfter
//     older, so X-Appwrite-Timestamp refuses it: TestAClaimWithoutItsWriteIsRolledForward.
//  5. A patch the record would refuse (a value longer than its field) claims no version:
//     it is checked against the declaration first and returns the field's error, so no
//     claim nobody can write holds back the run's later writes: TestARefusedPatchClaimsNoVersion.
//     The executor drops a refused field loudly and writes the rest, and cuts a waiting
//     reason to its field: TestALongWaitingReasonIsCutNotRefused in agent/executor.
//
// Cost: one more Appwrite create per record write; versions holds one small document
// per version and is kept as long as the run (a deleted claim would let a stale writer
// own that version again).
//
// The fence itself and the claim protocol are described in queue/eventlog.
package runstate
