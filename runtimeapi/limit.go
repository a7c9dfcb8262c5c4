package runtimeapi

import (
	"context"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/schema"
)

// limitScript is a fixed window per key: KEYS window counter; ARGV window ms, limit.
// Returns 0 when admitted, else the milliseconds until the window ends.
var limitScript = redis.NewScript(`
local n = redis.call('INCR', KEYS[1])
if n == 1 then redis.call('PEXPIRE', KEYS[1], ARGV[1]) end
if n > tonumber(ARGV[2]) then return math.max(redis.call('PTTL', KEYS[1]), 1) end
return 0
`)

// Limit counts one call of key against its rate limit (a fixed window of RateWindowMs):
// 0 when admitted, else how long until the window ends.
func Limit(ctx context.Context, rdb redis.UniversalClient, key *schema.RuntimeKey, now time.Time) (time.Duration, error) {
	window := key.RateWindowMs
	if window <= 0 {
		window = 60_000
	}
	win := now.UnixMilli() / window
	k := queue.RTRateKey(key.ID, win)
	wait, err := limitScript.Run(ctx, rdb, []string{k}, window, max(key.RateLimit, 1)).Int64()
	if err != nil {
		return 0, fmt.Errorf("runtime rate limit: %w", err)
	}
	return time.Duration(wait) * time.Millisecond, nil
}
