package executor

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
)

// LeaseAndDie takes a run's lease, indexed in queue q's lease set, as an executor of q
// does, and never renews nor releases it: an agent killed right after.
func LeaseAndDie(ctx context.Context, rdb redis.UniversalClient, runID, q string, ttl time.Duration) error {
	_, err := acquireLease(ctx, rdb, runID, queue.LeasesKey(q), "killed", ttl)
	return err
}
