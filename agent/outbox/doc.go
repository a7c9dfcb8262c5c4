// Package outbox heals the gap between "the run is durable in Appwrite" and "its task is
// in Redis". Together with the resume scanner (agent/executor.Resumer) it is how an
// admitted run gets executed exactly once whatever crashes in between.
//
// # The protocol
//
// Admission (admit) writes the message, the run bindings and the run record
// (status queued), in that order, and then enqueues one asynq task for the run with
// TaskID(runId) on the queue named in the bindings. Any of those steps can be the last
// one that happens: the function can crash, Redis can be down, or Redis can lose its
// data. Appwrite is the record of truth; Redis is rebuilt from it.
//
// The Reconciler (this package) scans queued runs every Interval (PA_AGENT_OUTBOX_EVERY)
// and enqueues a task for every queued run that has none. The Resumer scans the expired
// run leases of the queues this agent serves every PA_AGENT_RESUME_EVERY (and all
// unfinished runs at start and every PA_AGENT_RESUME_BACKSTOP) and puts each run whose
// executor vanished (no executor lease in Redis, no back-off key; for a queued run, a task
// stuck active with nobody working on it) back on its queue as a resume task; the queue's
// workers execute it (agent/executor/doc.go).
//
// # Invariants, and the tests that prove them
//
//  1. At most one task per run. Every enqueue, by admission or by the outbox, uses
//     TaskID(runId); asynq refuses a second task with that id (ErrTaskIDConflict, which
//     EnqueueRun reports as success), and the id stays reserved for the task's
//     retention (7 days) whatever state the task is in.
//     queue.TestEnqueueIsIdempotentWithExplicitOptions,
//     TestQueuedRunWithoutTaskIsEnqueuedExactlyOnce (four reconcilers race: one task).
//  2. A queued run without a task is re-enqueued, once. That covers Redis losing its
//     data: asynq then no longer lists the queue, so the outbox registers it again
//     (queue.RegisterQueue) and the next scan sees the task.
//     TestQueuedRunWithoutTaskIsEnqueuedExactlyOnce, TestRedisDownIsAnErrorAndTheNextScanHeals.
//  3. A run with a task asynq will still run (pending, scheduled, retry, active) is left
//     alone: the outbox never replaces or rewrites such a task. TestRunWithTaskIsLeftAlone.
//  4. A queued run whose task asynq archived (its retries ran out during an outage) is
//     not left queued forever: once the backoff for its re-enqueue count
//     (Reconciler.Requeue, 30 s doubling to 10 min; the count in pa:run:{id}:requeues,
//     shared by every agent) has passed since the archive, the outbox re-reads the run
//     (still queued, no cancel requested), removes the archived task (it holds the
//     TaskID) and enqueues a fresh one. TestArchivedTaskIsRequeuedWithBackoff. A run in
//     another live status with an archived task is the resume scanner's (it resumes a
//     run without a lease whatever its task's state).
//  5. A queued run whose cancel was requested is skipped (the cancel path settles it),
//     and runs in any other status are not the outbox's. TestCancelledAndNonQueuedRunsAreSkipped.
//  6. Redis unreachable is an error, never "no task": the scan stops and the next one
//     heals. TestRedisDownIsAnErrorAndTheNextScanHeals.
//  7. A run whose executor vanished (a killed agent, an aborted shutdown) is resumed
//     with its native idempotency key (the run id): the new attempt re-attaches to the
//     native run, never submits a second one. agent/daemon:
//     TestSIGKILLAtTwentyRandomPoints, TestShutdownWithARunInFlightResumesOnTheNextStart
//     (both check one native run per run and one terminal event).
//  8. A task written by another producer version still runs: payloads decode
//     tolerantly, and a major version newer than this agent is retried (not archived),
//     so a reserved TaskID never blocks the outbox because an older agent archived it.
//     queue.TestRunTaskGoldenFixtures, agent/daemon.TestRollingUpgradePayloads.
//  9. Stop returns only when the scan loop has returned (the Resumer starts no run: what
//     it enqueues runs on the asynq servers). TestStartScansUntilStop, goleak in TestMain here and in agent/daemon
//     (TestShutdownLeavesNoGoroutines).
//
// # Who writes what
//
//   - Admission writes the run record (created queued), its bindings and message, and
//     enqueues. The control function sets cancelRequested.
//   - The outbox writes no record: it only reads runs and bindings and enqueues.
//   - The resume scanner writes no record either: it enqueues a resume task
//     (queue.ResumeTaskID); the worker that runs it calls Executor.Execute, which claims
//     the run with a new attempt token before any side effect; from then on only that
//     attempt's executor changes the run's status and events.
//   - asynq owns the task's state; nobody else moves or deletes a run's task except the
//     cancel path (DeleteTask while still pending) and the outbox (an archived task of a
//     queued run, 4).
package outbox
