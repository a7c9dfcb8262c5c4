package gpu

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"privateassistant/queue"

	"github.com/redis/go-redis/v9"
)

// ErrLeaseNotHeld: the lease expired or another holder took the device.
var ErrLeaseNotHeld = errors.New("gpu: lease not held")

// ErrDeviceTaken: another agent holds the device's control lease.
var ErrDeviceTaken = errors.New("gpu: device is controlled by another agent")

// ControlLease is an agent's exclusive right to load and unload on a device, shared by
// every agent configured on that device through Redis. Acquisition is compare-and-swap;
// each acquisition bumps the generation, and Check refuses any generation but the
// holder's. Done closes when the lease is lost (expired, taken, or Redis said so).
type ControlLease struct {
	RDB    redis.UniversalClient
	Device string
	Owner  string
	TTL    time.Duration

	mu     sync.Mutex
	gen    int64
	done   chan struct{}
	closed bool
	stop   chan struct{}
	wg     sync.WaitGroup
}

func controlKey(dev string) string { return queue.GPUControlKey(dev) }
func genKey(dev string) string     { return queue.GPUGenKey(dev) }

// acquire: KEYS control, gen; ARGV owner, ttl ms. The holder value is "owner|gen".
var acquireScript = redis.NewScript(`
local cur = redis.call('GET', KEYS[1])
if cur then
  local owner = string.match(cur, '^(.*)|')
  if owner ~= ARGV[1] then return {0, cur} end
end
local gen = redis.call('INCR', KEYS[2])
redis.call('SET', KEYS[1], ARGV[1] .. '|' .. gen, 'PX', ARGV[2])
return {1, gen}
`)

var renewLeaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
return 0
`)

var releaseLeaseScript = redis.NewScript(`
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
`)

// Acquire takes the control lease (or re-takes our own after a restart) and starts
// renewing it every TTL/3.
func (l *ControlLease) Acquire(ctx context.Context) error {
	res, err := acquireScript.Run(ctx, l.RDB, []string{controlKey(l.Device), genKey(l.Device)}, l.Owner, l.TTL.Milliseconds()).Slice()
	if err != nil {
		return fmt.Errorf("gpu: acquire %s: %w", l.Device, err)
	}
	if res[0].(int64) != 1 {
		return fmt.Errorf("%w: %s is held as %v", ErrDeviceTaken, l.Device, res[1])
	}
	l.mu.Lock()
	l.gen = res[1].(int64)
	l.done = make(chan struct{})
	l.closed = false
	stop := make(chan struct{})
	l.stop = stop
	l.mu.Unlock()
	l.wg.Add(1)
	go l.renewLoop(stop)
	return nil
}

func (l *ControlLease) value() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.Owner + "|" + strconv.FormatInt(l.gen, 10)
}

func (l *ControlLease) lose() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.closed {
		l.closed = true
		close(l.done)
	}
}

func (l *ControlLease) renewLoop(stop chan struct{}) {
	defer l.wg.Done()
	t := time.NewTicker(l.TTL / 3)
	defer t.Stop()
	deadline := time.Now().Add(l.TTL)
	for {
		select {
		case <-stop:
			return
		case <-t.C:
		}
		ctx, cancel := context.WithTimeout(context.Background(), l.TTL/3)
		n, err := renewLeaseScript.Run(ctx, l.RDB, []string{controlKey(l.Device)}, l.value(), l.TTL.Milliseconds()).Int()
		cancel()
		switch {
		case err == nil && n == 1:
			deadline = time.Now().Add(l.TTL)
		case err == nil && n == 0:
			l.lose() // someone else holds it: we are fenced out
			return
		case time.Now().After(deadline):
			// Redis unreachable past the TTL: we can no longer prove we hold it.
			l.lose()
			return
		}
	}
}

// Generation returns the generation this holder was granted.
func (l *ControlLease) Generation() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.gen
}

// Done closes when the lease is lost.
func (l *ControlLease) Done() <-chan struct{} {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.done
}

// Check verifies with Redis that gen is the live holder's generation (fencing).
func (l *ControlLease) Check(ctx context.Context, gen int64) error {
	v, err := l.RDB.Get(ctx, controlKey(l.Device)).Result()
	if err != nil {
		return fmt.Errorf("%w: %v", ErrLeaseNotHeld, err)
	}
	owner, g, _ := strings.Cut(v, "|")
	if owner != l.Owner || g != strconv.FormatInt(gen, 10) {
		return fmt.Errorf("%w: generation %d is stale (holder %s)", ErrLeaseNotHeld, gen, v)
	}
	return nil
}

// Release gives the lease up (if still ours) and stops renewing. Idempotent.
func (l *ControlLease) Release(ctx context.Context) {
	l.mu.Lock()
	stop := l.stop
	l.stop = nil
	l.mu.Unlock()
	if stop != nil {
		close(stop)
		l.wg.Wait()
	}
	_ = releaseLeaseScript.Run(ctx, l.RDB, []string{controlKey(l.Device)}, l.value()).Err()
	l.lose()
}
