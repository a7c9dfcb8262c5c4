package queue

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Liveness records in Redis, for readiness where a process cannot be asked directly (the
// functions cannot reach the agent's or the stream service's ops listener):
//   - StreamAliveKey: a sorted set, member = a stream service instance, score = the Unix
//     ms of its last heartbeat (written every AliveEvery; the instance removes itself when
//     it stops).
//   - AgentsReadyKey: a sorted set of agents by the Unix ms of their last readiness
//     report; AgentReadyKey(agent) holds that report (JSON, ops.ReadyBody), expiring after
//     AliveStale.

// AliveEvery is how often a stream service beats and an agent reports its readiness;
// AliveStale is the age after which a beat or a report no longer counts.
const (
	AliveEvery = 5 * time.Second
	AliveStale = 15 * time.Second
)

// aliveForget: entries older than this are removed by the writers (instances that died
// without removing themselves).
const aliveForget = time.Hour

// Beat records the member's heartbeat in the sorted set key (and forgets long-dead ones).
func Beat(ctx context.Context, rdb redis.Cmdable, key, member string, now time.Time) error {
	if err := rdb.ZAdd(ctx, key, redis.Z{Score: float64(now.UnixMilli()), Member: member}).Err(); err != nil {
		return err
	}
	return rdb.ZRemRangeByScore(ctx, key, "-inf", "("+strconv.FormatInt(now.Add(-aliveForget).UnixMilli(), 10)).Err()
}

// ErrNeverBeat: no instance has ever beaten (or none in the last hour).
var ErrNeverBeat = errors.New("no heartbeat recorded")

// LastBeat is the age of the freshest heartbeat in the sorted set key.
func LastBeat(ctx context.Context, rdb redis.Cmdable, key string, now time.Time) (time.Duration, error) {
	zs, err := rdb.ZRevRangeWithScores(ctx, key, 0, 0).Result()
	if err != nil {
		return 0, err
	}
	if len(zs) == 0 {
		return 0, ErrNeverBeat
	}
	return now.Sub(time.UnixMilli(int64(zs[0].Score))), nil
}

// StreamAlive checks the stream service's heartbeat: an error says why it is not alive.
func StreamAlive(ctx context.Context, rdb redis.Cmdable, now time.Time) (time.Duration, error) {
	age, err := LastBeat(ctx, rdb, StreamAliveKey(), now)
	switch {
	case errors.Is(err, ErrNeverBeat):
		return 0, errors.New("no stream service has sent a heartbeat (is privateassistant-stream running?)")
	case err != nil:
		return 0, fmt.Errorf("read the stream service's heartbeat: %w", err)
	case age > AliveStale:
		return age, fmt.Errorf("no heartbeat from any stream service for %s", age.Round(time.Second))
	}
	return age, nil
}
