// Package backoff is the agent's one retry shape: capped exponential backoff with jitter,
// reset on success, and sleeps that end when the context does.
package backoff

import (
	"context"
	"math/rand/v2"
	"time"
)

// Backoff yields growing delays. The zero value uses the defaults below; it is not safe
// for concurrent use (one retry loop owns one Backoff).
type Backoff struct {
	Min    time.Duration // first delay (default 100 ms)
	Max    time.Duration // cap (default 30 s)
	Factor float64       // growth per attempt (default 2)
	Jitter float64       // fraction of the delay drawn at random, 0..1 (default 0.2)

	attempt int
}

// Next returns the next delay: Min·Factor^n capped at Max, minus up to Jitter of it.
func (b *Backoff) Next() time.Duration {
	lo, hi, f, j := b.Min, b.Max, b.Factor, b.Jitter
	if lo <= 0 {
		lo = 100 * time.Millisecond
	}
	if hi <= 0 {
		hi = 30 * time.Second
	}
	if hi < lo {
		hi = lo
	}
	if f < 1 {
		f = 2
	}
	if j <= 0 || j > 1 {
		j = 0.2
	}
	d := float64(lo)
	for i := 0; i < b.attempt && d < float64(hi); i++ {
		d *= f
	}
	d = min(d, float64(hi))
	b.attempt++
	return time.Duration(d - d*j*rand.Float64())
}

// Delay is the n-th delay (n ≥ 1) of a retry whose attempt count lives elsewhere (in
// Redis, shared by every agent): what Next returns after n-1 earlier calls. b is not
// changed.
func (b Backoff) Delay(n int64) time.Duration {
	b.attempt = int(max(n-1, 0))
	return b.Next()
}

// Reset starts over from Min (call it after a success).
func (b *Backoff) Reset() { b.attempt = 0 }

// Attempts is how many delays were handed out since the last Reset.
func (b *Backoff) Attempts() int { return b.attempt }

// Wait sleeps for Next() or until ctx ends, whichever is first; it returns ctx.Err() when
// the context ended.
func (b *Backoff) Wait(ctx context.Context) error { return Sleep(ctx, b.Next()) }

// Sleep sleeps for d or until ctx ends; it returns ctx.Err() when the context ended.
func Sleep(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
