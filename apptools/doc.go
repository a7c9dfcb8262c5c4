// Package apptools lets a host app give the runs it starts tools of its own (issue 19 item
// 3): "turn on the lights" for a home-automation app's users.
//
// # Declaring
//
// The app declares its tools with its runtime key (runtimeapi: the key names the
// app; nothing in the request does): for each tool a name, a description the model reads,
// a JSON Schema of its arguments (an object; resolved without fetching anything) and a
// callback URL that must lie under a prefix of the admin's allow-list
// (PA_APP_CALLBACK_ALLOW: scheme, host and port equal, path under the prefix at a segment
// boundary; no user info, no fragment, no dot segments). Registry keeps them in Redis,
// one hash per app, with the app's signing secret, created at its first declaration and
// shown once (RotateSecret, behind POST /api/v1/tools/signing-secret, replaces it).
//
// # Calling
//
// Hermes keeps one MCP tool list per profile, read when it connects and shared by every
// run (tools/mcp_tool*.py), so a tool cannot be offered to one run and not another. The
// agent's MCP server (agent/mcpjobs) therefore offers one generic tool,
// app_tool(name, arguments); a run started by an app is told its app's tools in its
// instructions (Instructions). The caller is found exactly as for enqueue_job: the
// gateway registered the model's call for the run it served, so the run (never an
// argument) names the app: a run the runtime API admitted carries the request id prefix
// "rt:<app>:" (runtimeapi.RequestIDPrefix). Only that app's tools are found; a run of
// another app, or of no app, gets "no such tool". The arguments are checked against the
// schema, the allow-list is checked again (it may have shrunk), and Client.Call POSTs the
// Callback, signed, following no redirect; the app's JSON answer is the tool's result, a
// non-2xx answer a tool error the model reads. The role's tool policy must allow
// mcp__pa__app_tool (the toolset "pa"), since the gateway enforces it like any tool.
//
// # Signing
//
// Each callback carries X-PA-Timestamp (Unix seconds), X-PA-Delivery (a random id, the
// nonce) and X-PA-Signature: "v1=" + hex HMAC-SHA256(secret, "v1." + timestamp + "." +
// delivery + "." + body). Verifier (what a host app runs; examples/homeauto uses it)
// compares in constant time, refuses a timestamp more than Window (5 min) from its clock,
// and remembers each delivery id it accepted until its timestamp leaves the window, so a
// replay is refused within the window (ErrReplayed) and after it (ErrStale). A callback
// that fails a check marks nothing as seen.
package apptools
