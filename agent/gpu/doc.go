// Package gpu owns the GPUs of one host: what is loaded where, who may use a device,
// and the swap protocol. Nothing else in the project loads, unloads or calls a model.
//
// Devices are host-local configuration (name, backend, memory budget, telemetry source,
// exclusive or shared). Routes (admin records) name a device and a backend model.
//
// Leases. A run that needs a model holds a lease on the device: owner, fencing
// generation, expiry, renewed by heartbeat, with a Done channel that closes when the lease
// is lost. Leases are compare-and-swap records in Redis, so two agents configured on one
// device can never both hold it; each grant bumps the device's generation, and every load,
// unload and inference carries the generation it was granted under — a stale one is
// refused. A shared device (chat) grants up to Slots concurrent leases for one model; an
// exclusive device grants one.
//
// The manager. One owner goroutine per device holds its state (idle, loading, ready,
// draining, unloading, unknown, failed) and the queue of waiters. Callers ask it to act —
// Acquire(route) — and never read state and then act on it. What to do next is decided by
// pure functions (decide.go) over a snapshot, tested without goroutines or GPUs; the slow
// effects (process start, unload, memory polling, readiness) run off the owner goroutine
// and report back.
//
// The swap protocol, when a waiter needs a model that is not loaded:
//
//  1. stop admitting new leases for the loaded model;
//  2. drain: wait for its leases to end, up to DrainTimeout; then cancel them (their Done
//     channels close and the gateway refuses their generation);
//  3. unload it;
//  4. verify the memory came back: poll telemetry until at least 75 % of the model's
//     footprint is free again, or MemoryWait passes — then the device is "unknown" and
//     nothing loads until an operator or a later reading says otherwise;
//  5. load the new model; readiness: health, then a one-token completion, and the route's
//     context budget checked against what the backend reports;
//  6. grant the lease to the waiter at the head of the queue.
//
// A stale heartbeat or telemetry reading means unknown, never "safe to unload".
package gpu
