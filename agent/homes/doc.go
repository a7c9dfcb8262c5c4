// Package homes gives every member a Hermes of their own (issue 30): a home per member
// (<Root>/<owner id>/: HERMES_HOME with config, .env, sessions, memory, skills and the run
// idempotency store; HOME; the working folder with the runs' inputs and files; TMPDIR),
// and one `hermes gateway run` per home on its own loopback port, started by the
// Supervisor on the member's first run, stopped after IdleAfter unused, on Forget (which
// deletes the home) and when the agent stops.
//
// Each member's Hermes runs in a bubblewrap sandbox (sandbox.go): its own mount namespace
// (the system's programs, a few /etc files, the venv read-only, the member's home at
// /member), its own PID namespace and /proc, no capabilities. So a member's terminal and
// file tools see their own home only: no other member's folders or processes, no
// operator .env, no agent key. The config is made from the operator's profile template on
// every start (config.go): the API server on 127.0.0.1 with a key generated at each start
// (environment only), terminal.cwd /member/work, the run-folder plugin (runfolder.go: each
// run's session works in /member/work/runs/<run id>), and the member's own gateway key
// (agent/memberkey) in place of the agent's.
//
// The member is always the run record's owner, never a name from a request or a model
// (agent/executor MemberHome). Proven on the real Hermes by
// TestMemberHomeLifecycleOnRealHermes, TestAFailedCheckStopsTheMembersHermes,
// TestProbeStartsAHermesOfNoMember (Probe: what harness validation starts), and
// TestMembersAreConfinedOnRealHermes (agent/executor) and TestMemberHomesThroughTheAgent
// (agent/daemon).
package homes
