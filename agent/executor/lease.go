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

type runLease struct {
	rdb   redis.UniversalClient
	key   string
	value string
	ttl   time.Duration
}

func token() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func acquireLease(ctx context.Context, rdb redis.UniversalClient, runID, agent string, ttl time.Duration) (*runLease, error) {
	l := &runLease{rdb: rdb, key: LeaseKey(runID), value: agent + "/" + token(), ttl: ttl}
	ok, err := rdb.SetNX(ctx, l.key, l.value, ttl).Result()
	if err != nil {
		return nil, fmt.Errorf("executor: lease: %w", err)
	}
	if !ok {
		return nil, ErrBusy
	}
	return l, nil
}

// renewScript extends our lease; if it lapsed (a slow heartbeat) and nobody took it, it is
// taken back. Only another holder's value means the lease is lost.
var renewScript = redis.NewScript(`
local v = redis.call('GET', KEYS[1])
if v == ARGV[1] then return redis.call('PEXPIRE', KEYS[1], ARGV[2]) end
if not v then redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2]) return 1 end
return 0`)

// renew extends the lease; false when another executor took it over.
func (l *runLease) renew(ctx context.Context) (bool, error) {
	n, err := renewScript.Run(ctx, l.rdb, []string{l.key}, l.value, l.ttl.Milliseconds()).Int()
	return n == 1, err
}

// BackoffKey marks a run whose last attempt failed transiently: the resume scan leaves it
// alone until the key expires.
func BackoffKey(runID string) string { return queue.BackoffKey(runID) }

// RetryBackoff spaces the attempts of a run that failed transiently: the n-th failure
// (counted in BackoffKey+":n") keeps the resume scan away for its n-th delay, 2 s doubling
// up to a minute, less up to 10 % jitter so agents do not retry in step.
var RetryBackoff = backoff.Backoff{Min: 2 * time.Second, Max: time.Minute, Factor: 2, Jitter: 0.1}

func (l *runLease) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	_ = l.rdb.Eval(ctx, `if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end return 0`, []string{l.key}, l.value).Err()
}
