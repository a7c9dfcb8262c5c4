// Package longpoll serves a run's events after a cursor, waiting for the next ones.
//
// # Reading
//
// Events live in the run's Redis stream (entry id = sequence), appended by the executor
// the moment they happen, and durably in Appwrite's events collection. A poll reads the
// stream after the cursor together with the run's hot state (one pipelined round trip);
// if the stream no longer holds that range (trimmed, expired, or Redis lost it) it reads
// Appwrite instead. The client always receives a contiguous run of sequences starting
// right after its cursor.
//
// # Waiting: one reader per process
//
// With nothing new and the run still going, the poll waits — and holds no Redis
// connection while it does. A Hub (one per process, a startstop component) owns a small
// fixed set of readers (Readers, default 64); each has one dedicated connection and runs
// one XREAD BLOCK over every stream its followers watch, each stream read from a
// position. The hub shards runs over its readers by a hash of the run id: Redis pays for
// a read by the number of streams in it, and a read is re-issued whenever one of its
// streams grows. When a stream grows the reader hands each waiting follower the new
// entries after its own cursor, as stored (not decoded); the follower answers them byte
// for byte without another round trip (its status is the last run.status or terminal
// event among them, else the one its snapshot read; only entries that can be run.*
// events are decoded for that). A follower whose events would not be contiguous from its
// cursor (the stream was trimmed under it, an entry is not JSON) is woken to read again
// the ordinary way, which reads Appwrite when it must.
//
// The writers change nothing: the executor's XADD is the notification.
//
// # No lost wake-up
//
// A follower registers its cursor with the hub before it stops being able to see new
// events: it registers, then takes its snapshot. Registration sets the stream's read
// position to at most the follower's cursor, and Redis answers an XREAD from a position
// with every entry after it, whenever it was appended. So an event appended before the
// snapshot is in the snapshot, and one appended at any moment after registration is
// returned by the reader's next XREAD, including one appended while the reader was
// between reads or before it re-issued its read with the new stream. Positions only move
// forward after every current waiter of the stream was given the entries up to there;
// a registration with a lower cursor lowers the position again.
//
// # Changing the watched set
//
// A blocked XREAD cannot take a new stream. When a registration adds a stream (or lowers
// a position) while a read is in flight, the reader's waker appends to the reader's own
// wake stream (pa:longpoll:wake:<random>, one entry, expiring), which is in every read:
// the read returns and is re-issued with the new set. Wake-ups coalesce: at most one is
// pending per read. A stream whose last follower left stays in the set for Linger, so a
// follower that answers and polls again (the usual case) does not interrupt the read.
//
// # Bounds
//
// Redis connections: the reader connections (Readers) plus the followers' pool for
// snapshots (FollowPool, separate from the pool admission, cancel and approval use),
// whatever the number of followers. Each user has at most MaxPerUser follows in flight
// in this process; beyond that a poll is refused at once with a rate_limited fault (429
// with Retry-After). Stop closes the reader connections (which ends a blocked read at
// once), waits for every goroutine, and wakes the followers still waiting, who answer
// ErrRedis (503, retry).
package longpoll
