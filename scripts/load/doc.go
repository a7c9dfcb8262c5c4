// Package load is `make load`, on the shape that runs in production, all on loopback
// (its own redis-server child, Appwrite emulator, function host and stream service).
//
// TestLoad: 1,000 Server-Sent Events followers on one stream process while admissions
// arrive from other users through a function host with Appwrite 1.9.6's 5 function
// workers (functions/functionhost). The stream service is the real binary
// (stream/cmd/pa-stream, built by the test and started with its environment, its Redis
// user pa-stream under the shipped ACL), so its memory and CPU are measured alone, from
// /proc and its /metrics; the followers' HTTP clients and the appends to their runs run
// in a child process (the test binary again, TestLoadFollowers), as browsers and the
// agent's executor would be elsewhere. It prints admission p50/p99 beside the same
// figures with no followers, the function executions (from the host's Stats: admissions
// only, one each; a follower causes none), the Redis connections of the stream process
// (user pa-stream) and of the function host, the errors, the delivery latency (append →
// SSE frame read by the follower) and the stream process's memory per follower (Go heap,
// stacks and RSS; goal ≤ 32 KiB, printed met or MISSED). It fails on any error, a lost
// event, a function execution caused by a follower, a stream over the per-user cap
// (PA_STREAM_PER_USER, 16) not refused, more Redis connections than either process's
// bound, or an admission p99 with followers above 1.2× the p99 without them
// (PA_LOAD_STRICT=0 reports the goal without enforcing it).
//
// TestLoadStreamCapacity, its second phase: 10,000 followers
// (PA_LOAD_CAPACITY_FOLLOWERS) of 1,000 users on one stream process for
// PA_LOAD_CAPACITY_PHASE (60 s) while PA_LOAD_EVENT_RATE deltas a second are appended
// (the open-file limit raised with setrlimit, inherited by both children). It prints the
// stream process's memory per follower, its CPU and Redis's, its Redis connections and
// the delivery p50/p99, and fails on any error, a lost event, a stream opened twice or
// more connections than the bound.
//
// The tests live behind the "load" build tag so that `go test ./...` does not run them.
//
// In TestLoad the idle and the loaded slots alternate in pairs (I L L I I L L I …), so a
// neighbour's load that comes and goes weighs on both alike and neither kind always comes
// second. The goal's figure is the p99 of a typical slot of each kind (the median of the
// slots' p99s, each slot 300 admissions), so one slot that a neighbour's burst hit does
// not decide it; the pooled p99 of every admission of each kind is printed beside it. The
// measure's own noise is printed too: the idle slots split in two alternating halves,
// which differ by chance alone. A ratio above 1.2 on a measure whose noise is also above
// 1.2 cannot tell a miss from chance, so another measure is taken and the figures are
// judged on every slot measured so far (PA_LOAD_ATTEMPTS measures at most, 3); the
// verdict printed last says MET, MISSED (a ratio above 1.2 on slots whose noise is within
// the margin) or INCONCLUSIVE (still too noisy after the last measure; the run fails). It
// prints the CPU this process (load generator, function host and Appwrite emulator), the
// stream process and Redis used while admitting, with and without followers.
//
// Knobs (environment): PA_LOAD_FOLLOWERS (1000), PA_LOAD_ADMIT_RATE (50 per second),
// PA_LOAD_PHASE (36s, each of the idle and the loaded phase, split over PA_LOAD_ROUNDS
// (6) slots of each kind), PA_LOAD_EVENT_RATE (100 appends per second to followed runs),
// PA_LOAD_ATTEMPTS (3), PA_LOAD_STRICT (1), PA_LOAD_PROFILE (a folder: a CPU profile of
// this process in every slot, idle<measure>-N.prof and loaded<measure>-N.prof),
// PA_LOAD_CAPACITY_FOLLOWERS (10000), PA_LOAD_CAPACITY_PHASE (60s).
package load
