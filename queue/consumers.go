package queue

import (
	"context"
	"fmt"
	"time"

	"github.com/hibiken/asynq"
	"github.com/redis/go-redis/v9"
)

// asynq's servers beat every 5 s and are dropped from its server list once their beat is
// 10 s old (asynq's heartbeater: state written with a TTL of twice its interval); the
// score of a server in asynqServers is when its last beat expires (Unix seconds).
const (
	asynqServers   = "asynq:servers"
	asynqServerTTL = 10 * time.Second
)

// Consumers reports the asynq servers consuming q now (active, listing q) and the age of
// the freshest one's heartbeat. No consumer is an error saying so.
func Consumers(ctx context.Context, insp *asynq.Inspector, rdb redis.Cmdable, q string, now time.Time) (int, time.Duration, error) {
	servers, err := insp.Servers()
	if err != nil {
		return 0, 0, fmt.Errorf("list the queue's consumers: %w", err)
	}
	n := 0
	age := time.Duration(-1)
	for _, s := range servers {
		if s.Status != "active" || s.Queues[q] <= 0 {
			continue
		}
		n++
		exp, err := rdb.ZScore(ctx, asynqServers, fmt.Sprintf("asynq:servers:{%s:%d:%s}", s.Host, s.PID, s.ID)).Result()
		if err != nil {
			continue
		}
		a := now.Sub(time.Unix(int64(exp), 0).Add(-asynqServerTTL))
		if a < 0 {
			a = 0
		}
		if age < 0 || a < age {
			age = a
		}
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("no consumer of %s has sent a heartbeat in the last %s", q, asynqServerTTL)
	}
	return n, age, nil
}
