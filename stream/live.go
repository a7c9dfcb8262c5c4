package stream

import (
	"context"
	"encoding/json"
	"sync"
	"time"

	"privateassistant/longpoll"
)

// live is a direct run stream: taken over from net/http (sse.go takeOver with direct) on
// a socket it can write without waiting, its first batch written by its handler. From
// then on it has no goroutine while it waits:
//
//   - the hub's reader calls arrived (the follower's Notify) when it handed something
//     over, and writes the frames to the socket itself, at once (work inline): no
//     hand-over to another goroutine on the delivery path;
//   - a read of Redis — a snapshot (a hole, an entry out of order), a heartbeat's read of
//     the run — goes to one of the service's few heartbeat workers (pool), however many
//     streams fall due at once;
//   - a write the socket's buffer cannot take now (a slow client) goes on one goroutine
//     of the stream's (spawn): the rest goes out under WriteTimeout, as any write (else
//     the stream is cut), and the goroutine ends when the stream is idle again; the
//     reader meanwhile keeps handing entries to the follower, which gives them in order:
//     nothing is lost, a follower behind catches up;
//   - one ticker per service (Service.tick) marks heartbeats due (a silence of Heartbeat:
//     the run read once, else ": hb") and notices a client that left (its socket read
//     without waiting: EOF), within tickEvery.
//
// One worker at a time owns f and out (busy): the reader's callback, the handler, a
// heartbeat worker or the stream's goroutine; the others only set flags. The worker that sees the stream over
// finishes it (finish): the connection, the follower, the user's count, Stop's wait.
type live struct {
	s       *Service
	ctx     context.Context // the service's: Stop ends the stream's reads
	f       *longpoll.Follower
	out     *sse
	what    string
	release func() // the user's stream count
	end     func() // Stop waits for it

	mu     sync.Mutex
	busy   bool          // a worker owns f and out
	news   bool          // the reader handed something over since a worker last took it
	beat   bool          // a heartbeat (a read of the run) is due
	over   bool          // the stream ends: Stop, a client that left, or its worker's end
	last   time.Time     // the last write
	ready  chan struct{} // not direct after all (fallback): arrived signals it instead
	ending bool          // the worker's: finish once what was gathered is written
}

// arrived is the follower's Notify, on the reader's goroutine: with no worker, this one
// delivers.
func (l *live) arrived() {
	l.mu.Lock()
	l.news = true
	if l.ready != nil {
		signal(l.ready)
		l.mu.Unlock()
		return
	}
	if l.busy || l.over {
		l.mu.Unlock()
		return
	}
	l.busy = true
	l.mu.Unlock()
	l.work(onReader)
}

// fallback makes l a plain follower's waker: the stream waits on the returned channel
// (sse.go's other paths). Call it while holding busy, before the stream's loop.
func (l *live) fallback() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.ready = make(chan struct{}, 1)
	if l.news {
		signal(l.ready)
	}
	return l.ready
}

// due is the ticker's: a heartbeat after Heartbeat of silence, by an idle stream.
func (l *live) due(now time.Time) {
	l.mu.Lock()
	if l.busy || l.over || now.Sub(l.last) < l.s.cfg.Heartbeat {
		l.mu.Unlock()
		return
	}
	l.beat, l.busy = true, true
	l.mu.Unlock()
	l.pool()
}

// stop ends the stream (Stop, a client that left): at once when idle, else its worker
// finishes it (closing the connection ends a write in flight).
func (l *live) stop() {
	l.mu.Lock()
	if l.over {
		l.mu.Unlock()
		return
	}
	l.over = true
	if l.busy {
		l.mu.Unlock()
		l.out.close()
		return
	}
	l.busy = true
	l.mu.Unlock()
	l.finish()
}

// Where a stream's work runs, and so what it may wait for.
const (
	onReader = iota // the hub's reader's goroutine (or the handler's): nothing
	onPool          // a heartbeat worker: Redis reads, never the client
	onOwn           // a goroutine of the stream's: Redis reads and the client's writes
)

// spawn hands the work to a goroutine of the stream's (the caller holds busy and passes
// it on). Stop waits for it (Service.workers).
func (l *live) spawn() {
	l.s.workers.Add(1)
	go func() {
		defer l.s.workers.Done()
		l.work(onOwn)
	}()
}

// pool hands the work to the service's heartbeat workers (the caller holds busy and
// passes it on): at most beatWorkers goroutines read Redis for streams at once, however
// many fall due at the same tick; a write they cannot finish at once goes to spawn. Stop
// waits for them (Service.workers).
func (l *live) pool() {
	b := &l.s.beats
	b.mu.Lock()
	b.queue = append(b.queue, l)
	if b.running >= beatWorkers {
		b.mu.Unlock()
		return
	}
	b.running++
	b.mu.Unlock()
	l.s.workers.Add(1)
	go func() {
		defer l.s.workers.Done()
		for {
			b.mu.Lock()
			if len(b.queue) == 0 {
				b.queue = nil
				b.running--
				b.mu.Unlock()
				return
			}
			next := b.queue[0]
			b.queue[0] = nil
			b.queue = b.queue[1:]
			b.mu.Unlock()
			next.work(onPool)
		}
	}()
}

// beats is the queue of the heartbeat workers (pool).
type beats struct {
	mu      sync.Mutex
	queue   []*live
	running int
}

// beatWorkers bounds the heartbeat workers (their reads share the hub's 16 connections).
const beatWorkers = 8

// wrote notes a write (the heartbeat counts from there).
func (l *live) wrote() {
	l.mu.Lock()
	l.last = time.Now()
	l.mu.Unlock()
}

// work delivers until the stream is idle (then it lets busy go) or over (then it
// finishes it). What would wait longer than where it runs (mode) may goes on: a read to
// the pool, a write to spawn.
func (l *live) work(mode int) {
	ctx := l.ctx
	for {
		if l.out.buf.Len() > 0 { // what the socket could not take at once
			if mode != onOwn {
				l.spawn()
				return
			}
			if l.out.flushConn() != nil {
				l.finish()
				return
			}
			l.wrote()
		}
		if l.ending {
			l.finish()
			return
		}
		l.mu.Lock()
		if l.over {
			l.mu.Unlock()
			l.finish()
			return
		}
		news, beat := l.news, l.beat
		if !news && !beat {
			l.busy = false
			l.mu.Unlock()
			return
		}
		if mode == onReader && beat {
			l.mu.Unlock()
			l.pool()
			return
		}
		l.news, l.beat = false, false
		l.mu.Unlock()
		if mode == onReader {
			b, ok, err := l.f.TryNext()
			switch {
			case err != nil:
				l.out.failEvent(pollErr(err, l.what))
				l.ending = true
			case !ok: // a snapshot is due: it reads Redis
				l.mu.Lock()
				l.news = true
				l.mu.Unlock()
				l.pool()
				return
			default:
				l.ending = l.gather(b)
			}
			if l.out.tryFlush() != nil {
				l.finish()
				return
			}
			if l.out.buf.Len() == 0 {
				l.wrote()
			}
			continue
		}
		var b longpoll.Batch
		var err error
		if news {
			b, err = l.f.Next(ctx)
		}
		if err == nil && beat && b.Len() == 0 && !b.Terminal {
			// A silence: read the run once (a settled run whose end was missed), else a
			// heartbeat.
			if b, err = l.f.Reread(ctx); err == nil && b.Len() == 0 && !b.Terminal {
				l.out.heartbeat()
			}
		}
		if ctx.Err() != nil {
			l.finish()
			return
		}
		if mode == onPool {
			if err != nil {
				l.out.failEvent(pollErr(err, l.what))
				l.ending = true
			} else {
				l.ending = l.gather(b)
			}
			if l.out.tryFlush() != nil {
				l.finish()
				return
			}
			if l.out.buf.Len() == 0 {
				l.wrote()
			}
			continue
		}
		if err != nil {
			l.out.fail(pollErr(err, l.what))
			l.finish()
			return
		}
		if l.s.send(l.out, b) {
			l.finish()
			return
		}
		l.wrote()
	}
}

// gather adds b's messages (and "end" after a terminal batch) without writing; true when
// the stream is over. A batch is what one read handed over (at most the hub's Count).
func (l *live) gather(b longpoll.Batch) (over bool) {
	if err := b.Each(func(seq int64, ev json.RawMessage) error {
		l.out.event(seq, "", ev)
		return nil
	}); err != nil {
		l.out.failEvent(err)
		return true
	}
	if b.Terminal {
		l.out.event(-1, "end", endData(b.Status))
		return true
	}
	return false
}

// finish ends the stream: its connection, its follower, the user's count, Stop's wait.
// By the worker holding busy, once.
func (l *live) finish() {
	l.mu.Lock()
	l.over = true
	l.mu.Unlock()
	l.out.close()
	l.f.Close()
	l.release()
	l.s.forget(l)
	l.end()
}

// lives is the service's set of direct streams, for its ticker.
type lives struct {
	mu     sync.Mutex
	all    map[*live]struct{}
	closed bool // Stop: no more
}

// keep adds l to the ticker's set; false when the service is stopping.
func (s *Service) keep(l *live) bool {
	s.lives.mu.Lock()
	defer s.lives.mu.Unlock()
	if s.lives.closed {
		return false
	}
	s.lives.all[l] = struct{}{}
	return true
}

func (s *Service) forget(l *live) {
	s.lives.mu.Lock()
	delete(s.lives.all, l)
	s.lives.mu.Unlock()
}

// tickEvery is the ticker's interval: a heartbeat goes out between Heartbeat and
// Heartbeat+tickEvery after the last write; a client that left is noticed within it.
func (s *Service) tickEvery() time.Duration {
	return min(s.cfg.Heartbeat/4, time.Second)
}

// tick is the service's one ticker for every direct stream: heartbeats, clients that
// left; at Stop it ends them all.
func (s *Service) tick(ctx context.Context) {
	t := time.NewTicker(s.tickEvery())
	defer t.Stop()
	var ls []*live
	buf := make([]byte, 512)
	for {
		var now time.Time
		select {
		case <-ctx.Done():
			s.lives.mu.Lock()
			s.lives.closed = true
			ls = ls[:0]
			for l := range s.lives.all {
				ls = append(ls, l)
			}
			s.lives.mu.Unlock()
			for _, l := range ls {
				l.stop()
			}
			return
		case now = <-t.C:
		}
		ls = ls[:0]
		s.lives.mu.Lock()
		for l := range s.lives.all {
			ls = append(ls, l)
		}
		s.lives.mu.Unlock()
		for i, l := range ls {
			if clientLeft(l.out.raw, buf) {
				l.stop()
			} else {
				l.due(now)
			}
			ls[i] = nil
		}
	}
}

// endData is the "end" message's data.
func endData(status string) []byte {
	b, _ := json.Marshal(map[string]string{"status": status})
	return b
}

func signal(c chan struct{}) {
	select {
	case c <- struct{}{}:
	default:
	}
}
