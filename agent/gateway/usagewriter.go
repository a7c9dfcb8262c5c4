package gateway

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/internal/startstop"
)

// UsageWriter is the agent's usage sink: RedisSink's records, off the answer's path.
//
// Record returns once the record's bytes are in the kernel's send buffer of the
// connection to Redis, not when Redis has acknowledged them: from then on they reach
// Redis even if this process dies next (the kernel sends what a dead process wrote, then
// closes; Redis runs a complete MULTI/EXEC it received before the close), which is what
// "usage is durable before the answer's end" asks of the gateway. The acknowledgement,
// the one Redis round trip a request through the gateway used to wait for (0.2–0.37 ms in
// BenchmarkGatewayLlamaServer), overlaps the answer's delivery instead. The one reader
// that must not miss a record it raced with, the executor reading a run's usage as the
// run ends, calls Settle first: it returns when every record of the run sent so far is
// acknowledged (the gateway serves only runs its own agent executes: their grants are
// this agent's).
//
// One goroutine owns the client (a client of its own, to which NewUsageWriter adds the
// hook that sees the bytes leave: nothing else may write through it); records that arrive
// while a batch is in flight go together as the next one (one MULTI/EXEC, at most
// usageBatchMax records). A Redis failure is logged and the answer goes on, as with RedisSink. Before
// Start and after Stop, Record writes and waits itself. A startstop.Service: Stop writes
// what is queued (bounded by the client's timeouts), then returns.
type UsageWriter struct {
	rdb *redis.Client
	log *slog.Logger

	in     chan *pendingUsage
	onSent atomic.Pointer[func()] // the batch in flight's "bytes sent", called from its Write

	mu      sync.RWMutex // running, and the sends into in (Stop waits for them)
	running bool
	done    chan struct{} // closed when the writer goroutine has exited (closed while not started)

	pmu     sync.Mutex
	pending map[string]*runPending // run → its records not yet acknowledged

	run startstop.Runner
}

var (
	_ Sink              = (*UsageWriter)(nil)
	_ startstop.Service = (*UsageWriter)(nil)
)

// usageBatchMax bounds one MULTI/EXEC (~100 bytes a record).
const usageBatchMax = 128

type pendingUsage struct {
	u      Usage
	sent   chan struct{} // closed once the record's bytes are sent (or its write failed)
	marked bool          // sent is closed (the writer goroutine's only)
}

type runPending struct {
	n    int
	zero chan struct{} // closed when n is back to 0
}

// NewUsageWriter returns a writer owning rdb, which must be a client of its own: the hook
// added here takes any transaction written through it for the batch in flight. PoolSize 1
// marks it as such (the writer's one goroutine needs no more; go-redis carries its
// transactions on its pipeline pool, whose connections the hook watches too). The caller
// closes rdb after Stop.
func NewUsageWriter(rdb *redis.Client, log *slog.Logger) (*UsageWriter, error) {
	if n := rdb.Options().PoolSize; n != 1 {
		return nil, fmt.Errorf("gateway: the usage writer needs a Redis client of its own with PoolSize 1 (this one has %d)", n)
	}
	if log == nil {
		log = slog.Default()
	}
	done := make(chan struct{})
	close(done)
	w := &UsageWriter{rdb: rdb, log: log, in: make(chan *pendingUsage, 256), done: done, pending: map[string]*runPending{}}
	rdb.AddHook(sentHook{&w.onSent})
	return w, nil
}

// Start runs the writer goroutine. It runs until Stop, not until ctx ends: a gateway
// request still in flight when the agent's context is cancelled (the listener drains
// them after that) must find its record taken, and only Stop stops taking records.
func (w *UsageWriter) Start(ctx context.Context) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	done := make(chan struct{})
	if err := w.run.Start(context.WithoutCancel(ctx), func(ctx context.Context) { w.loop(ctx, done) }); err != nil {
		return err
	}
	w.running, w.done = true, done
	return nil
}

// Stop takes no more records into the queue, writes what is queued and waits for the
// writer goroutine. Idempotent.
func (w *UsageWriter) Stop() {
	w.mu.Lock()
	w.running = false // no send is in flight once the lock is ours
	w.mu.Unlock()
	w.run.Stop()
}

// Record implements Sink: it returns once u is on its way to Redis (see the type).
func (w *UsageWriter) Record(ctx context.Context, u Usage) {
	if u.Run == "" {
		return
	}
	p := &pendingUsage{u: u, sent: make(chan struct{})}
	w.mu.RLock()
	if !w.running {
		done := w.done
		w.mu.RUnlock()
		<-done // the writer goroutine (if any) has written its last batch: the connection is free
		w.write(context.WithoutCancel(ctx), []*pendingUsage{p})
		return
	}
	w.track(u.Run, 1)
	w.in <- p // the writer goroutine takes it: Stop waits for this send (mu)
	w.mu.RUnlock()
	<-p.sent
}

// Settle returns once every record of run handed to Record so far is acknowledged by
// Redis (or its write failed), or ctx ends.
func (w *UsageWriter) Settle(ctx context.Context, run string) error {
	w.pmu.Lock()
	rp := w.pending[run]
	w.pmu.Unlock()
	if rp == nil {
		return nil
	}
	select {
	case <-rp.zero:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("gateway usage of run %s not yet acknowledged: %w", run, ctx.Err())
	}
}

func (w *UsageWriter) track(run string, d int) {
	w.pmu.Lock()
	defer w.pmu.Unlock()
	rp := w.pending[run]
	if rp == nil {
		rp = &runPending{zero: make(chan struct{})}
		w.pending[run] = rp
	}
	rp.n += d
	if rp.n == 0 {
		close(rp.zero)
		delete(w.pending, run)
	}
}

func (w *UsageWriter) loop(ctx context.Context, done chan struct{}) {
	defer close(done)
	// A batch is written whole even when Stop comes in the middle of it.
	wctx := context.WithoutCancel(ctx)
	for {
		select {
		case p := <-w.in:
			w.settle(w.write(wctx, w.batch(p)))
		case <-ctx.Done():
			// Stop: running is false, so nothing more is sent into in; write what is there.
			for {
				select {
				case p := <-w.in:
					w.settle(w.write(wctx, w.batch(p)))
				default:
					return
				}
			}
		}
	}
}

// batch is first and whatever else is queued, up to usageBatchMax.
func (w *UsageWriter) batch(first *pendingUsage) []*pendingUsage {
	b := []*pendingUsage{first}
	for len(b) < usageBatchMax {
		select {
		case p := <-w.in:
			b = append(b, p)
		default:
			return b
		}
	}
	return b
}

// write sends b as one MULTI/EXEC, releasing each record's Record call as soon as the
// bytes are sent, and returns b once Redis has answered (or the write failed).
func (w *UsageWriter) write(ctx context.Context, b []*pendingUsage) []*pendingUsage {
	mark := func() {
		for _, p := range b {
			if !p.marked {
				p.marked = true
				close(p.sent)
			}
		}
	}
	w.onSent.Store(&mark)
	_, err := w.rdb.TxPipelined(ctx, func(pl redis.Pipeliner) error {
		for _, p := range b {
			queueUsage(ctx, pl, p.u)
		}
		return nil
	})
	w.onSent.Store(nil)
	mark() // a write that failed before its bytes left: the answers go on
	if err != nil {
		for _, p := range b {
			w.log.Warn("gateway usage not recorded", "run", p.u.Run, "err", err)
		}
	}
	return b
}

// settle counts b's records as acknowledged.
func (w *UsageWriter) settle(b []*pendingUsage) {
	for _, p := range b {
		w.track(p.u.Run, -1)
	}
}

// execTail is how a MULTI/EXEC's bytes end: go-redis writes a transaction in one buffer
// flush (a large one in several writes, the last ending here), and no other command the
// writer's connection carries (the handshake's HELLO, AUTH, SELECT, CLIENT SETINFO) ends
// so.
var execTail = []byte("*1\r\n$4\r\nexec\r\n")

// sentHook wraps each connection of the writer's client so that the batch in flight is
// told when its transaction's last bytes have been written.
type sentHook struct{ onSent *atomic.Pointer[func()] }

func (h sentHook) DialHook(next redis.DialHook) redis.DialHook {
	return func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := next(ctx, network, addr)
		if err != nil {
			return c, err
		}
		sc := &sentConn{Conn: c, onSent: h.onSent}
		if _, ok := c.(syscall.Conn); ok {
			// go-redis checks an idle plain connection's health through its file
			// descriptor; keep that possible.
			return sysSentConn{sc}, nil
		}
		return sc, nil
	}
}

func (sentHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (sentHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return next
}

// sentConn remembers the last bytes written (a pool connection is used by one command
// at a time) and calls onSent when they end a transaction.
type sentConn struct {
	net.Conn
	onSent *atomic.Pointer[func()]
	tail   [14]byte // len(execTail)
}

func (c *sentConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	if n > 0 {
		if n >= len(c.tail) {
			copy(c.tail[:], p[n-len(c.tail):n])
		} else {
			copy(c.tail[:], c.tail[n:])
			copy(c.tail[len(c.tail)-n:], p[:n])
		}
		if bytes.EqualFold(c.tail[:], execTail) {
			if f := c.onSent.Load(); f != nil {
				(*f)()
			}
		}
	}
	return n, err
}

type sysSentConn struct{ *sentConn }

func (c sysSentConn) SyscallConn() (syscall.RawConn, error) {
	return c.Conn.(syscall.Conn).SyscallConn()
}

// queueUsage queues u's record (RedisSink's and UsageWriter's one format).
func queueUsage(ctx context.Context, p redis.Pipeliner, u Usage) {
	k := UsageKey(u.Run)
	p.HIncrBy(ctx, k, "promptTokens", u.PromptTokens)
	p.HIncrBy(ctx, k, "completionTokens", u.CompletionTokens)
	p.HIncrBy(ctx, k, "requests", 1)
	if u.RefusedTool != "" {
		p.HIncrBy(ctx, k, "refusedToolCalls", 1)
		p.HSet(ctx, k, "lastRefusedTool", u.RefusedTool)
	}
	// A refused or failed request names no model: it must not erase the model that
	// answered the run's earlier requests (the run record shows the model served).
	fields := []any{"alias", u.Alias, "device", u.Device, "generation", u.Generation}
	if u.EffectiveModel != "" {
		fields = append(fields, "effectiveModel", u.EffectiveModel)
	}
	p.HSet(ctx, k, fields...)
	p.Expire(ctx, k, usageTTL)
}

// usageTTL is how long a run's gateway usage is kept.
const usageTTL = 30 * 24 * time.Hour
