// Package eventlog is the one writer of a run's events: it numbers them (1, 2, 3 … no
// gaps), appends each to the run's Redis stream at once (what long-polls read) and copies
// each to Appwrite's events collection. The executor's attempt uses it while it runs a
// run; control uses it to settle a run whose task it deleted from the queue.
// Nothing else writes a run's stream, its hot state or its events (queue.AppendEvent and
// queue.SetRunState exist for test fixtures only).
//
// # The fence
//
// A run's fence is the Redis key pa:run:{id}:attempt. Open claims it for a token with a
// plain SET: the newest claimant always wins, an older holder never gets it back. Every
// append and every hot heartbeat (Beat) runs a script that first compares the fence with
// the writer's token, so a writer that lost the fence is refused atomically (ErrFenced).
// Check asks the same question for writes outside Redis.
//
// # Who writes what
//
//	pa:run:{id}:attempt  Open (claim, SET) and Release (expiry) of the holder
//	pa:run:{id}:events   appendScript, only for the fence holder
//	pa:run:{id}:state    appendScript and beatScript, only for the fence holder
//	an event's Mark      appendScript, in the same step as that event's append (the
//	                     executor's native stream position, pa:run:{id}:nativeseq)
//	events collection    flushStore, only events the stream accepted
//	runs record          schema/runstate.Record.Change, fenced by the claim protocol below
//	the answer message   the executor's finish, after a fence Check (see the residual window)
//
// agent/outbox's Expirer only sets expiries on these keys once the run is terminal and
// Appwrite holds its whole record; it writes no content.
//
// # Invariants, and the test that proves each
//
//  1. A writer that lost the fence appends nothing, beats nothing, and Check says so:
//     TestOpenFencesOlderWriter.
//  2. The stream is gap-free and duplicate-free. Entry ids are "<sequence>-0", so Redis
//     refuses an id that is not above the last one (a retry of an append that landed
//     answers -2 and counts as done); Open numbers from one past the highest sequence the
//     stream, the hot state, the record or Appwrite knows: TestOpenFencesOlderWriter,
//     TestUnacceptedEventNeverReachesAppwrite, and in the executor
//     TestStressHeartbeatStreamCancel (1,000 runs, 0 lost, 0 duplicated).
//  3. Appwrite holds only events the stream accepted, with the stream's type, at most once
//     each: flushStore writes an event only at or below the highest sequence Redis
//     accepted from this log, under a deterministic document id (run, sequence), so a
//     repeat is a conflict that counts as written. An event numbered by a writer whose
//     Redis append failed never reaches Appwrite: TestUnacceptedEventNeverReachesAppwrite.
//  4. Writers are serialized and a drop removes only the entry it sent (it compares the
//     sequence): two concurrent Flush calls over 200 pending events deliver each once and
//     never panic: TestConcurrentFlushOverPendingEvents. (The log used to read the head,
//     do the I/O unlocked and then drop the head, so two flushes dropped two heads and
//     the last drop panicked with "slice bounds out of range [1:0]".)
//  5. One writer per attempt. The executor's heartbeat goroutine only renews the run lease
//     and signals the attempt's loop, which does every write a beat calls for:
//     TestHeartbeatDuringWrites and TestStressHeartbeatStreamCancel in agent/executor
//     (the first fails on the old executor with a race on attempt.patchQ and the
//     double-drop panic).
//  6. An older attempt lands no run-record write after a newer owner's claim. A claim is:
//     SET the fence, then one conditional write of the run record. Every record write is
//     conditional on the $updatedAt its writer last saw (schema/runstate), so Appwrite
//     refuses the older writer's next write; before it retries on a fresh read it checks
//     the fence, which the newer owner set before its write, and stops:
//     TestFencedAttemptWritesNothingAfterTheClaim (agent/executor), TestStaleWriterIsFenced
//     (schema/runstate).
//  7. Nothing lands on a terminal record, and a second settlement changes nothing:
//     TestTerminalNeverLeavesTerminal (schema/runstate), TestSettledElsewhereStaysSettled
//     and TestCancelledBeforeItStarted (agent/executor).
//
// # Residual window
//
// The answer message and the run bindings are not written through the state machine.
// The answer has a deterministic id (one per run, ever) and finish checks the fence just
// before creating it; the check and the create are two requests, so an older attempt that
// passed the check just before a newer claim can still create the answer after it. That
// window is one Appwrite request, bounded by the Store's HTTP client timeout
// (PA_AGENT_HTTP_TIMEOUT, 30 s by default). What it can do is bounded too: the run still
// has exactly one answer, holding the older attempt's text of the same native run (the
// newer attempt finds it and links it), and the older attempt's next record write is
// refused (6). Binding fields an older attempt may still write (nativeSessionId,
// nativeRunId, pendingApprovalId) name the same native run: the harness submission is
// idempotent by the run id. TestOlderAttemptsAnswerInTheResidualWindow (agent/executor)
// holds an older attempt's answer create between its Check and Appwrite while a newer
// attempt claims the run, then lets either create land first: one answer, linked, and the
// older attempt fenced on its next write.
package eventlog
