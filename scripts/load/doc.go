// Package load is `make load`: a thousand concurrent long-polls against one function host
// while admissions arrive from other users, all on loopback (its own redis-server child,
// Appwrite emulator and function host, as the tests run them). It prints admission
// p50/p99 beside the same figures with no followers, the Redis connections in use, the
// errors, and the followers' wake-up latency. It fails on any error, a lost event, a
// follower over the per-user cap not refused, or more Redis connections than the bound;
// the admission-latency goal fails it only with PA_LOAD_STRICT=1 (on a shared machine
// a neighbour's load can swing p99 by more than the goal's margin).
//
// The test lives behind the "load" build tag so that `go test ./...` does not run it.
//
// The idle and the loaded slots alternate in pairs (I L L I I L L I …), so a neighbour's
// load that comes and goes weighs on both alike and neither kind always comes second; the
// idle slots are also split in two halves whose p99 ratio is printed as the measure's own
// noise on the machine it ran on. It prints the CPU this process (load generator, function
// host and Appwrite emulator together) and Redis used while admitting, with and without
// followers.
//
// Knobs (environment): PA_LOAD_FOLLOWERS (1000), PA_LOAD_ADMIT_RATE (50 per second),
// PA_LOAD_PHASE (15s, each of the idle and the loaded phase, split over PA_LOAD_ROUNDS
// (4) slots of each kind), PA_LOAD_EVENT_RATE (100 appends per second to followed runs),
// PA_LOAD_STRICT, PA_LOAD_PROFILE (a folder: a CPU profile of every slot, idle-N.prof and
// loaded-N.prof, and a heap profile with the followers waiting, heap-loaded-0.prof).
package load
