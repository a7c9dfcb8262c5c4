// Package stream is the stream service: one always-on process, on the same origin as the
// web chat behind the same reverse proxy (which routes /stream/ to it), that serves
// everything that waits or streams, so that no synchronous Appwrite Function execution
// ever waits (contracts/appwrite.md §9: each one holds one of a handful of API workers).
//
// # Paths
//
//	GET /stream/runs/{id}/events?after=N            a run's events (JWT)
//	GET /stream/runs/{id}                           a run's record, as GET /api/runs/{id} (JWT)
//	GET /stream/feed?after=N[&system=1]             the caller's change feed (JWT)
//	GET /stream/v1/responses/{id}/events?after=N    a response's events (runtime key + X-App-User or X-App-User-Token)
//	GET /stream/artifacts/{id}/download             an artifact, ranged (JWT)
//
// No function serves downloads of uploads (attachments are read by the agent only), so
// there is no /stream/uploads/.
//
// # Server-Sent Events
//
// Events go out as text/event-stream over an authenticated fetch. Each message is
//
//	id: <sequence>
//	data: <one element of the events array GET /api/runs/{id}/events answers, byte for byte>
//
// Last-Event-ID, when sent, replaces ?after=. The stream replays from the cursor, then
// goes live; a comment line ": hb" is written every Heartbeat while nothing happens. When
// the run is terminal and every event up to the terminal one was sent, one
// "event: end" message with data {"status":"<terminal status>"} is written and the
// response ends. The feed's messages carry the feed sequence and one feed event; when the
// feed no longer holds what follows the cursor (or no cursor was given) one
// "event: reset" message with "id: <current position>" and data {"next":<position>} says
// to read the lists again and continue from there. With system=1 the feed also carries
// the system panel: "event: system" messages without an id (the cursor stays the feed's)
// whose data is GET /api/system's body for the caller (service.SystemReader: an admin's
// with the routes' figures, for at most adminRecheck before the client reconnects), at
// once and whenever what it shows changed (read every SystemEvery while anyone watches,
// by one reader per process: sysWatch). A failure after the stream started is
// one "event: error" message whose data is the error envelope, then the end of the
// response: the client reconnects with Last-Event-ID. Before the stream starts every
// refusal is the functions' JSON envelope with their status.
//
// # Reading and waiting
//
// The events come from longpoll: its Poller reads the run's Redis stream (and
// Appwrite when the stream was trimmed) and its Hub is the process's one set of Redis
// readers, whatever the number of followers. A follower holds no Redis connection while
// it waits. Each user has at most MaxPerUser streams open in this process (429 with
// Retry-After beyond); replicas behind the proxy share nothing.
//
// # Bounds and lifecycle
//
// Every write of a stream has a write deadline (WriteTimeout), so a stalled client cannot
// pin its follower or its buffers. A client that disconnects releases its follower at
// once (a direct stream: within the ticker's interval, below); before the stream started
// it ends its request context: 499 client_closed_request, logged at info, never as a
// server error. Start backgrounds the hub, the system panel's reader, the service's
// heartbeat and the streams' ticker; Stop refuses new requests (503), cancels every
// stream and download in flight, waits for their handlers (and taken-over streams and
// their goroutines) to return, then stops the hub.
//
// A run's or a response's stream over HTTP/1.1 takes its connection over from net/http
// once its first read succeeded (sse.go takeOver: Hijack; the answer is HTTP/1.1 200 with
// "Connection: close" and no length, its body ending when the connection closes), writes
// its first batch from the handler, and the handler returns. On a socket it can write
// without waiting (TCP or Unix, on unix systems) and with no Coalesce window, the stream
// then has no goroutine while it waits (live.go): the hub's reader calls it back when it
// handed something over and writes the frames to the socket itself, with no hand-over to
// another goroutine; a snapshot read (a hole) or a heartbeat's read of the run goes to
// one of the service's few heartbeat workers, a write the socket cannot take at once (a
// slow client) to one goroutine of the stream's, which writes under WriteTimeout as any
// write and ends once the stream is idle again (nothing is lost meanwhile: the reader
// keeps handing entries to the follower). One ticker per service marks the heartbeats
// due (after Heartbeat of silence, within min(Heartbeat/4, 1 s)) and reads every such
// socket without waiting to notice a client that left (EOF) within that interval. Stop ends them all and waits for their
// goroutines. Elsewhere (a TLS connection, a Coalesce window) the stream keeps one
// goroutine of its own plus one blocked reading the connection, which ends the stream as
// soon as the client leaves (detach). Either way a follower costs no net/http handler
// goroutine (whose stack the request's verification grew to 16 KiB for good), no
// background reader and no 4 KiB read, 4 KiB write and 2 KiB chunking buffers; it keeps
// no buffer while it waits. Over HTTP/2 (no Hijack) it stays a plain handler. The feed
// stays a handler.
package stream
