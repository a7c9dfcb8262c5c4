// Package executor runs admitted runs: the asynq handler of the resident agent, and the
// resume scan that puts a run whose executor vanished back on its queue.
//
// asynq delivers at least once, and a handler whose context was cancelled may still be
// running when the retry starts (contracts/asynq.md §0). A run is therefore executed under
// three guards:
//
//   - a per-run lease in Redis (pa:run:{id}:lease, renewed by heartbeat), so two live
//     executors never work on one run, and an in-process set so a ghost goroutine of this
//     process cannot overlap its own retry;
//   - an attempt token written before anything else (run_bindings.attemptToken, the
//     Redis fence the event log checks atomically on every append, then one conditional
//     write of the run record), so an older attempt that is still running lands no event
//     and no record write after the claim (queue/eventlog's doc says how, and what is
//     left);
//   - a per-device slot, so exclusive devices run one job at a time.
//
// One writer per attempt: the goroutine running the attempt (its loop) does every write:
// events, run-record patches, waiting notices, bindings. The heartbeat goroutine only
// renews the lease and signals a beat (or that the lease is lost); the native stream's
// pump and the device acquisition post to channels the loop selects on. Status changes go
// through schema/runstate's transition table.
//
// Then: mark running → materialize the portable context → submit to the harness with
// Idempotency-Key = run id (a retry re-attaches, it never runs twice) → consume the one
// native stream, normalizing events into the run's event log (text deltas coalesced) →
// handle approvals and cancellation from the run's control stream → when the stream ends
// without a terminal event, reconcile through the native status (EOF is not completion)
// → finish: artifacts, the assistant message (exactly once: deterministic id), usage and
// the terminal status. "interrupted" (a Hermes restart) is surfaced, never resubmitted.
//
// If the context is cancelled by asynq (shutdown, lease loss, Redis outage) and the user
// did not ask to cancel, the native run is left running: the next attempt re-attaches.
//
// Re-attaching follows what real Hermes (0.22) does:
//
//   - Hermes gives every subscriber the run's whole retained backlog, so each attempt
//     records (fenced) the native seq up to which the event log holds everything, and the
//     next one resumes after it with Last-Event-ID (seq.go): each native event is
//     published once (TestRestartMidRunDeltasEqualTheAnswer in agent/daemon).
//   - An approval Hermes let expire is not announced and stays in the run's status: it is
//     recognised by the run going on, or by the 409 approval_not_pending a late answer
//     gets, recorded once (approval.responded deny with ExpiredReason) and never shown
//     again (approvals.go; TestApprovalExpiryIsRecordedOnce,
//     TestLateAnswerToAnExpiredApproval).
//   - Past the harness's idempotency retention a run is never resubmitted: it is
//     reconciled, or ends interrupted with the reason; a retention of 0 or less never
//     counts as safe (submit.go pastRetention; TestPastRetentionNeverResubmits,
//     TestZeroRetentionNeverResubmits).
//   - Before each submission a harness.Checker is checked again (cached CheckTTL): the
//     check (build and capabilities) goes onto the binding, and a harness that lost durable,
//     retained idempotency fails the run before anything is submitted (submit.go
//     checkHarness; TestSubmissionRechecksCapabilities, TestSubmissionRecordsTheHarnessCheck,
//     TestSubmissionRechecksCapabilitiesOnRealHermes).
//   - A native session is continued only from the conversation's previous turn, on the
//     same harness revision and route, once that turn's run has settled; otherwise a fresh
//     session gets the portable history (submit.go compatibleSession;
//     TestNativeSessionReuse).
//
// # Dispatch: asynq is the only dispatcher
//
// Every execution of a run starts as an asynq task on the run's queue (the device queue its
// bindings name), handed out by that queue's server with its concurrency, its priorities
// and its two-stage shutdown: the run's own task (TaskID = run id, enqueued by admission
// or the outbox) or a resume task. Nothing else calls Execute in the agent.
//
// A run's lease (lease.go, pa:run:{id}:lease) is indexed in its queue's lease set
// (pa:leases:{queue}, run id → the lease's expiry in Unix ms by Redis's clock), in the
// same script that takes, renews or releases it; taking it also counts it
// (pa:run:{id}:leasegen). Releasing it after the run settled removes the run from the set;
// any other release (a transient failure, an abort, a lost fence) marks it expired at
// once, even if the lease itself is gone. A killed agent releases nothing: its entries
// expire with its leases.
//
// The Resumer (resume.go) scans every PA_AGENT_RESUME_EVERY (5 s). One script per queue
// returns the entries whose lease expired (at most 100) and whether the queue's backstop is
// due. For each: if this process executes it, or its lease or back-off key exists, it is
// looked at again a scan later (behind the other expired entries); a run settled (or
// gone) leaves the set; otherwise a run task with TaskID queue.ResumeTaskID(run, lease
// count) is enqueued on that queue and the entry is looked at again after Recheck (1 min)
// if nobody leased the run meanwhile. The backstop, at a
// process's first scan and then every PA_AGENT_RESUME_BACKSTOP (5 min) per queue among the
// agents serving it (pa:resume:{queue}:backstop; due at once when Redis lost it with its
// data), lists every unfinished run as the scan used to: a run in a live status with no
// lease, no back-off and no entry (leased by an older agent; Redis lost its data), and a
// queued run whose task (its own or a resume task) is asynq-active with no lease (taken off
// the queue by an agent that died before leasing it; asynq's recoverer also hands that task
// out again, in one to two minutes). A scan's cost is one Redis command per queue plus the
// expired entries; the backlog costs only the backstop's listing (docs/performance-log.md).
//
// # Invariants, and the tests that prove them
//
//  1. A killed agent's runs are back on their queue within a lease TTL and a scan, once
//     however many agents scan: TestKilledExecutorIsResumedThroughItsQueueOnce; in a real
//     process, agent/daemon TestSIGKILLAtTwentyRandomPoints and
//     TestShutdownWithARunInFlightResumesOnTheNextStart (one native run per run, one
//     terminal event).
//  2. The resumer executes nothing itself: the resume task runs on the queue's worker
//     (TestKilledExecutorIsResumedThroughItsQueueOnce), and Stop leaves no goroutine
//     (goleak in TestMain, agent/daemon TestShutdownLeavesNoGoroutines).
//  3. The original task and the resume task never execute the run twice: the run lease
//     lets one execute, the other is busy (retried, not a failure) and then finds the run
//     settled: one claim, one native run, one terminal event.
//     TestOriginalAndResumeTaskExecuteTheRunOnce.
//  4. A resume task whose run settled completes with no claim, no event and no record
//     write, and a settled run's stale entry leaves the set without a task:
//     TestResumeTaskOfASettledRunDoesNothing.
//  5. A run that never had an indexed lease is found by the backstop; a queued run whose
//     task waits is asynq's: TestBackstopFindsRunsWithoutAnIndexedLease.
//  6. A run whose attempt ended unsettled is in the lease set, expired, even when its
//     lease was lost with Redis's data (the release indexes it again; the renewal
//     re-creates a live one): TestRunIsIndexedAgainAfterRedisLostItsData, agent/daemon
//     TestOutageRedisWiped.
//  7. Entries the scan must leave alone never starve the others past its limit of 100:
//     TestEntriesBackingOffDoNotStarveTheRest.
//  8. The scan's cost does not grow with the backlog: with 1,000 queued runs a scan
//     between backstops is one Redis command and no Appwrite request
//     (TestResumeScanCost, which prints the figures with -v).
//
// The attempt's control (following, parked, cancelling, pausing, and the facts they
// need: stop taken, pause asked, tool running, the stop bound) is a state machine:
// machine.go's pure step, tested whole in machine_test.go
// (TestTheAttemptsTransitionTableWhole: every input in every phase), and drive.go, the
// only place it does I/O; loop.go turns the loop's channels into its inputs.
//
// Files: executor.go (the handler, Execute and its guards), attempt.go (lifecycle and
// claim), machine.go and drive.go (the control), loop.go (the consume loop),
// heartbeat.go, acquire.go (the device), park.go (the device given back while an
// approval waits), preempt.go (pause and resume for another job), checkpoint.go and
// runfolder.go (the run's work folder), record.go (patches, status, events), submit.go
// (context and submission), inputs.go (attachments), events.go (native events),
// approvals.go, cancel.go (cancel, stop, interruption, reconciliation), progress.go,
// usage.go, finish.go, answer.go and message.go (the answer), published.go (the text
// users saw), late.go (a deleted conversation), probe.go (release probe runs), lease.go
// (the run lease and its lease set), slots.go, resume.go (the resume scan), seq.go (the
// native stream position).
package executor
