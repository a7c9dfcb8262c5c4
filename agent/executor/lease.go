package executor

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/internal/backoff"
	"privateassistant/queue"
)

// LeaseKey holds the live executor of a run: "<agent>/<token>", with a TTL renewed by
// its heartbeat. No key means nobody is executing the run (the resume scan's signal).
func LeaseKey(runID string) string { return queue.LeaseKey(runID) }

// A run's lease, when the run's queue is known, is also indexed in the queue's lease set
// (queue.LeasesKey: run id → the lease's expiry in Unix ms by Redis's clock), written in
// the same script as the lease: taking and renewing a lease moves its expiry, releasing
// it after the run settled removes the run, releasing it otherwise marks it expired now.
// The resume scan reads only the expired entries (Resumer), so its cost follows the runs
// whose executor vanished, not the backlog. Taking a lease also counts it
// (queue.LeaseGenKey): the count names the resume task of the lease that vanished.
//
// The scripts touch the run's keys and the queue's set: one Redis node, as asynq's own
// scripts need for a queue's keys.
type runLease struct {
	rdb    redis.UniversalClient
	runID  string
	key    string
	leases string // the queue's lease set ("": not indexed, a probe's or a queue unknown)
	value  string
	ttl    time.Duration
}

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// nowMS is Redis's clock in Unix ms, inside a script.
const nowMS = `local t = redis.call('TIME')
local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
`

// acquireScript: KEYS lease, then (an indexed lease) lease set and lease count; ARGV
// value, ttl ms, run id.
var acquireScript = redis.NewScript(nowMS + `
if not redis.call('SET', KEYS[1], ARGV[1], 'NX', 'PX', ARGV[2]) then return 0 end
if KEYS[2] then
  redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[3])
  redis.call('INCR', KEYS[3])
end
return 1`)

// acquireLease takes the run's lease; leases is the run's queue's lease set ("" to take
// it without indexing it).
func acquireLease(ctx context.Context, rdb redis.UniversalClient, runID, leases, agent string, ttl time.Duration) (*runLease, error) {
	l := &runLease{rdb: rdb, runID: runID, key: LeaseKey(runID), leases: leases, value: agent + "/" + token(), ttl: ttl}
	keys := l.keys()
	if leases != "" {
		keys = append(keys, queue.LeaseGenKey(runID))
	}
	ok, err := acquireScript.Run(ctx, rdb, keys, l.value, ttl.Milliseconds(), runID).Int()
	if err != nil {
		return nil, fmt.Errorf("executor: lease: %w", err)
	}
	if ok != 1 {
		return nil, ErrBusy
	}
	return l, nil
}

// keys is the lease key, then the lease set when the lease is indexed.
func (l *runLease) keys() []string {
	if l.leases == "" {
		return []string{l.key}
	}
	return []string{l.key, l.leases}
}

// renewScript extends our lease; if it lapsed (a slow heartbeat) and nobody took it, it is
// taken back. Only another holder's value means the lease is lost. KEYS lease, lease set
// (optional); ARGV value, ttl ms, run id.
var renewScript = redis.NewScript(nowMS + `
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then redis.call('PEXPIRE', KEYS[1], ARGV[2])
elseif not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
else return 0 end
if KEYS[2] then redis.call('ZADD', KEYS[2], now + tonumber(ARGV[2]), ARGV[3]) end
return 1`)

// renew extends the lease; false when another executor took it over.
func (l *runLease) renew(ctx context.Context) (bool, error) {
	n, err := renewScript.Run(ctx, l.rdb, l.keys(), l.value, l.ttl.Milliseconds(), l.runID).Int()
	return n == 1, err
}

// BackoffKey marks a run whose last attempt failed transiently: the resume scan leaves it
// alone until the key expires.
func BackoffKey(runID string) string { return queue.BackoffKey(runID) }

// RetryBackoff spaces the attempts of a run that failed transiently: the n-th failure
// (counted in BackoffKey+":n") keeps the resume scan away for its n-th delay, 2 s doubling
// up to a minute, less up to 10 % jitter so agents do not retry in step.
var RetryBackoff = backoff.Backoff{Min: 2 * time.Second, Max: time.Minute, Factor: 2, Jitter: 0.1}

// releaseScript gives our lease back. A settled run leaves the lease set; any other is
// (again) in it, expired now, so the next resume scan sees a run nobody executes: also
// when our lease is gone without another holder (it lapsed, or Redis lost its data). A
// lease another executor holds is theirs: nothing changes. KEYS lease, lease set
// (optional); ARGV value, run id, "1" when settled.
var releaseScript = redis.NewScript(nowMS + `
local v = redis.call('GET', KEYS[1])
if v and v ~= ARGV[1] then return 0 end
if v then redis.call('DEL', KEYS[1]) end
if KEYS[2] then
  if ARGV[3] == '1' then redis.call('ZREM', KEYS[2], ARGV[2])
  else redis.call('ZADD', KEYS[2], now, ARGV[2]) end
end
return 1`)

// release gives the lease back; settled says the run needs no executor any more.
func (l *runLease) release(ctx context.Context, settled bool) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	s := "0"
	if settled {
		s = "1"
	}
	_ = releaseScript.Run(ctx, l.rdb, l.keys(), l.value, l.runID, s).Err()
}
