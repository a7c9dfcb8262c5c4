// Package admit admits a user's message exactly once: it turns POST
// /api/conversations/{id}/messages into a stored message, a run pinned to its
// configuration, and one task on the run queue.
//
// # Who writes what
//
// Admission (this package, running in the conversations function) writes:
//
//   - Redis, as a cache that Appwrite can always rebuild: the conversation's owner
//     (pa:conv:{c}:owner, an immutable fact), the conversation's next message sequence
//     (pa:conv:{c}:seq), the sequence reserved for a run id (pa:admit:<run>, kept 7 days so
//     a repeat gets the same number) and the caller's rate-limit window counter.
//   - Appwrite, the record: the user's message, the run's bindings (server-only: harness
//     and route revisions, tool policy, context snapshot reference, queue) and the run
//     itself, created with status queued. Admission creates these and never updates them.
//   - The run queue: one asynq task whose task id is the run id (queue.Enqueuer.EnqueueRun).
//
// The agent's outbox (agent/outbox.Reconciler) writes only tasks: for a queued run whose
// cancel was not requested and that has no task, it enqueues one with the same task id.
// Everything after a task is claimed (the run's status, events, the answer) belongs to the
// executor; a cancel of a run still in the queue belongs to control.
//
// # Invariants
//
// 1. One request id names one message and one run. The run and message ids are derived
// from (owner, requestId) by a hash (IDs), and every Appwrite create uses them as the
// document id, so a repeat (concurrent, after a client timeout, after a crash) can only
// find the records already there, never add a second. Five concurrent copies each of 200
// requests leave exactly 200 messages, 200 runs, 200 bindings and 200 tasks, and every copy
// answers the same ids and sequence: TestThousandConcurrentSubmissionsOfTwoHundredRequests
// (functions/service).
//
// 2. Sequences are contiguous and unique per conversation. One Redis script checks the
// owner, answers a repeat with its remembered reservation, applies the rate limit and
// increments the counter, in one step. Appwrite's unique index on the message's string key
// sequenceKey = "<conversationId>.<sequence>" (schema.SequenceKey, unique on every engine;
// a unique index with the integer sequence in it is not enforced on MongoDB) is the
// backstop: a create that collides with another message makes admission
// raise the counter to the stored maximum and reserve again (resync, up to three times).
// When Redis lost the counter, the script asks for it to be rebuilt from the highest
// stored sequence first. Proven by TestThousandConcurrentSubmissionsOfTwoHundredRequests
// (sequences 1..200), TestCounterBehindTheRecordTakesTheNextFreeSequence (a counter behind
// the record) and TestRedisDownAtAdmission (a restarted, empty Redis continues at the next
// sequence).
//
// 3. Only the owner may post, and a conversation of another user reads exactly like a
// missing one: the script compares the cached owner, and an unknown owner is read from
// Appwrite and cached (in-process and in Redis). Both the foreign and the missing case
// answer fault.Missing("conversation"), the same 404 body:
// TestForeignIDsAnswerLikeMissingOnes (functions/service). A request id reused for
// another conversation is refused with request_id_reused (ErrRequestIDReused) and uses
// nothing up there (no message, no run, no sequence): TestRequestIDIsBoundToItsConversation.
// Reused with another text or another role it is refused the same way, with nothing stored
// (the repeat finds the stored message or run and compares): TestFoundDefects.
//
// 3a. A role is used only by the labels its binding names (runconfig.Allowed; none named: every
// member). The check runs on the resolved plan before the reservation, so a refused role
// (role_not_allowed, ErrRoleNotAllowed) stores nothing and uses no sequence:
// TestRolesByPermission (functions/service). A warm container checks the caller against
// the plan it saw last and the reservation script confirms, in the same step and before
// it reserves anything, that the live pointer (the environment's, or production's it
// follows) still names that plan's release (plans are immutable under its fingerprint;
// every key the script touches is passed to it); if not, nothing is reserved and the admission reads the
// plan again and checks the caller against it. A refusal is always decided on a plan just
// read: TestWarmAdmissionSeesAMovedPlan. The caller's labels, as verified for this
// admission, are kept on the run (runs.ownerLabels, OwnerLabels: sorted, bounded) so the
// agent's admission of that run's enqueue_job calls decides label-restricted roles without
// reading users; labels carried that way (Request.LabelsCarried) decide the job but are not
// kept on it: TestOwnerLabelsAreBounded, TestARestrictedRoleFollowsTheCoordinatorsLabels
// (agent/mcpjobs).
//
// 4. The rate limit counts new requests only: the script answers a repeat before it
// counts. TestRateLimitPerUser.
//
// 5. Everything is durable before the enqueue. The message and the run bindings are
// written at the same time (the bindings name the reserved sequence), then the run, so a
// run is never visible without its message and bindings, and the task is enqueued only
// after all three exist. Bindings that already existed, or that name a sequence or
// conversation the message did not keep (a collision, Redis that forgot a reservation,
// an attempt that stopped between the writes), are read and corrected before the run is
// written: TestCounterBehindTheRecordTakesTheNextFreeSequence,
// TestRequestIDIsBoundToItsConversation. A failure before the writes (Redis down at the reservation)
// leaves nothing and answers 503 queue_unavailable; a failure after them answers 503
// queue_unavailable with the runId and messageId (ErrNotEnqueued): the run is saved and
// queued. TestRedisDownAtAdmission.
//
// 6. A crash between the writes and the enqueue is healed, and never twice. A repeat of
// the request finds the same ids and sequence and enqueues; otherwise the outbox finds the
// queued run without a task and enqueues it. The task id is the run id, so an enqueue that
// finds a task (in any state) is a no-op, whoever does it and however often:
// TestCrashBetweenWriteAndEnqueueIsHealed (functions/service),
// TestQueuedRunWithoutTaskIsEnqueuedExactlyOnce and TestRunWithTaskIsLeftAlone
// (agent/outbox).
//
// 7. A repeat of a finished run reports it as it is now and is not enqueued again:
// TestRepeatOfAFinishedRunIsNotEnqueuedAgain.
//
// # Errors
//
// Admission returns *fault.Error values (fault) with stable codes that the HTTP
// layer maps to the envelope: invalid_role (Invalid), not_configured, role_unavailable,
// awaiting_checks (the live release has not passed its checks for the role:
// runconfig.Hold) and queue_unavailable and appwrite_unavailable (Unavailable, with Retry-After),
// role_not_allowed (Forbidden),
// rate_limited (RateLimited, Retry-After = the window's remaining time), not_found
// (NotFound) and request_id_reused (Conflict). Causes stay wrapped for errors.Is.
//
// # Cost
//
// Warm (plan and owner cached): no Appwrite reads, 3 Appwrite writes and 2 Redis round
// trips (the reservation with the plan check, the enqueue). Admission's own work is mostly
// encoding its three records (schema.Table.Encode, a JSON round trip each), and it overlaps
// the round trips admission waits for anyway: the run, and the message for the sequence
// the container expects (the one after the last it reserved there), while the reservation
// is in flight; the binding while the message is written, and the binding's write
// overlaps the message's. The created documents are not decoded back
// (schema.Table.InsertEncoded). BenchmarkWarmAdmission reports all this beside
// the floor (the same three documents written with raw SDK calls and one raw enqueue) and
// times the reservation alone: it is the one part of admission the floor has no
// counterpart for, about an eighth of the floor on loopback, and it cannot go: the owner,
// plan and rate checks, the idempotency key and the sequence must be settled before the
// first write, and the enqueue cannot join it: it must follow the writes.
package admit
