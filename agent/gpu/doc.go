// Package gpu owns the GPUs of one host: what is loaded where, who may use a device,
// and the swap protocol. Nothing else in the project loads or unloads a model, and
// inference on a managed device goes through the gateway (agent/gateway), which asks
// this package before every request.
//
// Devices are host-local configuration (name, backend, memory budget, telemetry source,
// exclusive or shared). Routes (admin records) name a device and a backend model.
//
// # Two generations
//
// The control lease (lease.go) is an agent's right to load and unload on a device. It
// is a compare-and-swap record in Redis (pa:gpu:{device}:control, "owner|generation",
// with a TTL renewed every TTL/3); every acquisition bumps a per-device counter, so two
// agents configured on one device never both hold it, and Check refuses any generation
// but the live holder's.
//
// A grant (grants.go) is a run's right to use the loaded model. Grants live in the
// manager, not in Redis. Each carries the device generation it was granted under; the
// device generation is bumped by every load, every unload decision, a crash and every
// revocation of all grants, so a live grant always carries the current generation.
//
// # The manager
//
// One owner goroutine per device (Manager.loop) holds the device's state: its Phase
// (idle, loading, ready, draining, unloading, unknown, failed, fenced), the loaded
// model, the generations, the grants and the queue of waiters. Callers ask it to act
// (Acquire, Release, Renew, Serve, Snapshot, Confirm) and never read state and then act
// on it. What to do next is decided by Decide (decide.go), a pure function of a State
// snapshot returning a typed Decision; the slow work runs elsewhere and reports back as
// a typed effect (effects.go) that only the owner applies:
//
//   - effect goroutines (swap.go): a load (Immich pause, Backend.Load, readiness), an
//     unload (Backend.Unload, memory verification), the cleanup of a model that failed
//     readiness, stopping this agent's own model processes after control was lost, an
//     Immich resume, and each waiting notice to a caller;
//   - watch loops (watch.go): the backend's health, the device's telemetry, whether the
//     runs holding grants still hold their run leases, and an operator's confirmation
//     recorded through the admin API (ConfirmRequested);
//   - the control-lease loop (control.go): acquires the lease, reports it, re-acquires
//     after a loss.
//
// All of them are started through the manager's startstop.Runner: Stop cancels them and
// returns only when every one has exited. Unloads run under their own bound
// (UnloadTimeout) rather than the manager's context, so one in flight at Stop finishes
// or times out; a load in flight at Stop is cancelled. Loaded models stay loaded.
//
// # Scheduling policy
//
// Decide orders one device's queue. The oldest waiter for another model than the loaded
// one bounds the reordering: while it has waited less than MaxExtraWait (GPU config
// maxExtraWait, default 10 min; 0 is strict FIFO), later requests for the loaded model
// are granted ahead of it as slots free up, so a burst for one model costs one swap;
// once it has waited MaxExtraWait nothing queued after it goes ahead of it. The swap to
// the head's model becomes due when the bound passed or nobody wants the loaded model.
// Running work is never cut for a swap: the device drains (no new grants for the loaded
// model) until the last grant ends normally. Waiters are told who holds the device (the
// run's short id, the model, for how long, and whether it waits for its owner's
// approval; never its content) and their position: their place in Order, the order
// Decide really starts them in (a later job for the loaded model ahead of an older one
// counts), with BoundNote saying how many later jobs go first and how long that may go on,
// or that the job is ahead of older ones only for now. An optional DrainTimeout (config
// drainTimeout, unset by default) restores revocation after a bound for operators who
// want it. A loaded model nothing used for its idle time (config idleUnload, per device
// with a per-model override) is unloaded, and Immich resumes.
//
// # The swap protocol
//
// When the swap to another model is due:
//
//  1. stop granting the loaded model (drain);
//  2. wait for its grants to end (released by their runs, or expired when a run stops
//     renewing them); with a DrainTimeout configured, revoke what remains after it
//     (their Done channels close, the generation is bumped, the gateway refuses them);
//  3. unload it — after checking the control-lease generation with Redis;
//  4. verify the memory came back: poll telemetry until at least 75 % of the model's
//     footprint is free again (only a reading younger than 5 s counts), or MemoryWait
//     passes — then the device is unknown and nothing loads until it recovers: the
//     telemetry loop keeps reading, and RecoverReadings fresh readings in a row with at
//     least that much free make it idle again; or an operator confirms it (Confirm, or
//     the admin API's record at ConfirmKey, polled through ConfirmRequested, applied
//     once and only if made after the device became unknown). The reason published to
//     /api/system says why it is unknown and how it recovers;
//  5. load the new model — after checking the control-lease generation with Redis
//     (before pausing Immich, and again right before Backend.Load); readiness is a
//     one-token completion and the route's context budget checked against what the
//     backend reports;
//  6. grant the waiters at the head of the queue, up to the device's slots.
//
// # Invariants, who may write what, and the test that proves each
//
//   - Only the owner goroutine writes the device's state (phase, models, generations,
//     grants and their expiry, waiters, the Immich-paused flag, the latest reading).
//     Effects carry results (a load reports that it paused Immich) instead of writing.
//     Proven by the package's tests under -race, and TestTenantPausedAroundLoads.
//   - The owner does no I/O: Acquire, Release, Serve and Snapshot are answered while a
//     backend's health call hangs (TestOwnerAnswersWhileHealthHangs; BenchmarkAcquireRelease
//     reports the p99 beside the idle figure) and while a telemetry read hangs
//     (TestOwnerAnswersWhileTelemetryHangs). Only a definite "not alive" from the backend
//     is a crash; an error or timeout decides nothing.
//   - Stop waits for every goroutine the manager started (TestStopWaitsForEffects; goleak
//     in TestMain).
//   - A load is decided only with nothing loaded, and an unload only with no live grant
//     (TestNeverTwoModelsAtOnce, TestDecideTable); two models that do not fit together
//     never run at once and every request is served by the model it asked for
//     (TestSwapUnderLoad).
//   - A swap never cuts running work: the waiter for another model waits, told which run
//     holds the device, for how long, and its position, until the holder completes; then
//     the swap runs (TestSwapWaitsForRunningWork; the "draining waits for running work,
//     however long" row of TestDecideTable; no drain bound unless configured,
//     TestConfigSchedulingDefaults). A holder waiting for approval is named as such
//     (TestSwapWaitsForRunningWork, TestBuildWiresConfirmAndHolderStatus).
//   - Requests for the loaded model go first only within the aging bound; no request
//     is started ahead of an older one that has waited MaxExtraWait (TestDecideTable,
//     TestSameModelGoesFirstWithinTheBound, and the simulation: TestSwapPolicyBeatsFIFO
//     over 1,000 random jobs per seed has fewer loads than FIFO, zero overtakes past
//     the bound, and no job later than under FIFO by more than MaxExtraWait plus one
//     run; BenchmarkSwapPolicy prints both side by side, also with approval waits that
//     hold or release the device).
//   - The position a card shows is the start order: Decide always starts the job Order
//     shows first, and no job starts ahead of one shown ahead of it except as that one's
//     bound allows (TestPositionIsTheStartOrder; TestSwapPolicyBeatsFIFO checks both over
//     every simulated decision, with and without approval waits).
//   - A model idle for its idle time is unloaded and Immich resumes; one in use never is
//     (TestIdleUnloadResumesImmich, TestDecideTable).
//   - An unknown device recovers only on fresh readings showing the memory back, several
//     in a row (TestUnknownRecoversByItself), or on an operator's confirmation made after
//     it became unknown (TestOperatorConfirmsUnknown).
//   - With a drain bound configured, grants outliving it are revoked and their
//     generation is refused (TestDrainBoundCancelsGrants); a crashed model server revokes its grants and the
//     model reloads on next need under a higher generation (TestCrashCancelsGrants).
//   - Nothing loads until the memory of the unloaded model is verified back; otherwise
//     the device is unknown until Confirm (TestMemoryNotBackHoldsLoads); a stale reading
//     never proves it back (TestStaleReadingNeverProvesMemoryBack); when no reading can be
//     taken right before the unload (three tries), the device is unknown too, recovering
//     only on fresh readings against the last reading taken while the model was loaded,
//     or on a confirmation (TestFailedReadingBeforeUnloadMakesTheDeviceUnknown).
//   - A model that cannot be made ready fails its waiters with the reason and is
//     unloaded (TestLoadFailureReachesWaiters, TestContextBudgetChecked).
//   - Immich is paused before a load and resumed only when the device is free and
//     nobody waits (TestTenantPausedAroundLoads); Immich unreachable refuses the load
//     (TestImmichUnreachableRefusesSharedDevice).
//   - Only the control-lease holder loads or unloads: without the lease the device is
//     fenced and loads nothing; losing it revokes every grant (TestControlLeaseFencing,
//     TestTwoAgentsOneDevice). Every load and unload checks the control-lease generation
//     with Redis right before acting and is refused, the device fenced, when it went
//     stale (TestStaleLoadRefused, TestStaleUnloadRefused). After control is lost, only
//     models running as this agent's own child processes (ProcessBackend) are stopped; a
//     model on a shared server (router, Ollama) is left to the new holder, since
//     unloading it would be an unload under a stale generation.
//   - Every inference on a managed device passes Manager.Serve in the gateway. A request
//     that names its run (/runs/{id}/v1/… or X-PA-Run) is served only under that run's
//     own live grant at the current generation, whether or not it sends
//     X-PA-Lease-Generation; a revoked or expired run gets stale_generation, a run holding
//     no grant route_not_leased (TestGatewayRefusesStaleGeneration). A request in flight
//     when its run's grant is revoked is cut (TestGatewayCutsRevokedRequest). A named generation that is not the one the
//     request would be served under is refused (TestGatewayServesLeasedRoute).
//   - A manager serves only from a device it knows empty: taking control (Start without a
//     control lease, or each acquisition of the lease) it first unloads the device's
//     models a Resident backend (Ollama, a llama-server router: servers that outlive the
//     agent) still holds; one that will not unload makes the device unknown
//     (TestModelsLeftLoadedGoWhenTheManagerTakesControl,
//     TestTheNextControlHolderUnloadsWhatTheLastOneLeft, TestLlamaServerRouter).
//   - Grants expire GrantTTL after their last renewal. A grant held by a run is renewed
//     while the run's lease lives when the device has HolderAlive (the daemon wires it to
//     the executor's run lease, renewed by the executor's heartbeat); any holder may
//     renew with Grant.Renew (TestGrantExpiresWithoutHeartbeat,
//     TestGatewayRefusesStaleGeneration).
//
// # Context truth and qualification
//
// Readiness reads the context the backend serves one request (qualify_context.go):
// llama-server's per-slot n_ctx capped by the model's training context (n_ctx_train; the
// server only warns when -c exceeds it), Ollama's num_ctx (sent on the load from the
// model's configured context) read back from /api/ps and capped by /api/show's training
// context. A backend that reports no context fails a load with a budget: readiness never
// passes vacuously (TestLlamaServerContextCappedByTraining, TestOllamaContextSentAndVerified,
// TestReadinessNeverVacuous).
//
// Manager.Qualify (qualify.go) measures a route's model on the device: it queues like a
// job for the whole device (an exclusive waiter: granted only when no grant is live,
// nothing behind it goes first, nothing else is granted while it runs; waiting users are
// told a GPU qualification holds the device), reads the served context back, fills the
// KV cache to the budget (the tokenizer measured first from the server's usage counts),
// runs one generation at the route's maximum output and every slot at once, samples
// telemetry throughout (VRAM idle, at full context and after; peak temperature and
// power) and reads it when the fill's first token comes and when every slot streams, cuts the stress as soon as the device passes its temperature limit, and
// requires the memory back at its idle figure afterwards. It is judged against the GPU
// file's qualify limits (qualify_config.go). Qualifier (qualify_task.go) is the asynq
// handler of queue.TypeQualify: the admin API (runconfig.QualifyAsker) puts one task per
// route revision (task id queue.QualifyTaskID) on the device's queue, the agent serving
// the device takes it like any device job, and records the verdict on a new revision of
// the route (runconfig.RecordQualification); the selection gate (settings, RouteGate) then
// needs a passing one for the revision's device, model and budget. Its invariants:
//
//   - An agent killed after asynq handed it the task, before its first status write or
//     at any later step, leaves a task asynq's recoverer hands out again once the dead
//     agent's lease on it has run out; the route then ends qualified or with a verdict
//     or an error in words, never "queued" or "running" for good, and the admin API can
//     ask again (TestAQualificationCutOffByAKillRunsToItsVerdict, a real SIGKILL). A
//     handler aborted by the agent's shutdown says so on the status and returns its
//     context's error: asynq offers it again at the next start, its retry budget
//     untouched (TestAQualificationAbortedByShutdownStartsAgain).
//   - Each transition is one status write in one step (a script passed its key, no
//     read-then-write), only by the request that owns the route's status hash: its own
//     or an older request's; the API's "queued" never takes back what its agent wrote
//     (TestQualificationStatusIsOnlyItsRequests, TestQueuedNeverTakesBackItsAgentsStatus).
//     A waiting or running status that stopped beating reads as waiting for its agent,
//     in words (TestQualifyStatusViewSaysAbandoned); each step shows as it goes
//     (TestQualificationStepsAreLive).
//   - One request per route revision is queued or running at once; a finished one may
//     be asked again (TestQualificationGate, end to end through the admin API).
//
// Tests of the measurement: TestDecideExclusive,
// TestQualifyQueuesLikeAJob, TestQualifyMeasuresAndPasses, TestQualifyFailsEachLimit (a
// device that overheats, one whose memory does not come back, too little headroom, too
// slow, a budget above the served context, no telemetry), TestQualifyRealLlamaServer,
// TestQualificationGate (end to end through the admin API), BenchmarkQualifyStress (make
// bench).
//
// # Limits (what the code does not do)
//
//   - Preemption is only asked for, never forced: a model marked preemptible in the GPU
//     host file (models.<name>.preemptible) makes a due swap close its holders'
//     Grant.Yield (the decision ActPreempt: drain, and ask; the grant stays valid, nothing
//     is cut; TestDecidePreemptsOnlyPreemptibleModels, TestPreemptibleHolderIsAskedToYield,
//     TestConfigMarksModelsPreemptible). The executor pauses such a run of the Hermes
//     harness at its next turn boundary (no tool running, no approval pending), gives the
//     device back and resumes it later in the same native session (agent/executor
//     preempt.go; TestYieldPausesAndResumesInTheSameSession). A run of the direct
//     harness, a holder that never reaches a turn boundary (a long tool call), or a model
//     not marked preemptible still keeps the device until it finishes, bounded only by
//     its own limits and its run lease. The aging bound orders the queue; it does not cut.
//   - The aging bound is per waiter from when it queued in this manager; a run re-queued
//     after an agent restart starts counting again.
//   - The gateway refuses a request that names no run before it reaches Serve (403
//     run_binding_required, agent/gateway binding.go; TestRequestWithoutAValidRunBindingIsRefused):
//     Hermes names its run in the model ("<alias>@<run>"), auxiliary calls on auto included
//     (TestCompressionOnRealHermesNamesTheRun). Serve's run-less branch (some live grant
//     covers the model) has no caller in the live path. Two attempts of one run share its
//     grant: the executor's run lease, not the generation, keeps a stale attempt from
//     writing (queue/eventlog's fence).
//   - The model servers do not check generations themselves; the gateway is the check,
//     and callers never receive the backends' credentials.
//   - A grant with nothing to renew it (acquired without a run, or on a device without
//     HolderAlive, and never Renewed) lasts until it is released or revoked.
package gpu
