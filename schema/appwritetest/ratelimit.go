package appwritetest

import (
	"fmt"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"
)

// Limit is one abuse limit: at most Max requests per fixed Window. Max 0 disables it.
type Limit struct {
	Max    int
	Window time.Duration
}

// RateLimits are the abuse limits the emulator enforces on users and guests (API keys
// are exempt, as in Appwrite). The numbers Appwrite 1.9.6 uses are UpstreamRateLimits.
type RateLimits struct {
	// CreateJWT limits POST /v1/account/jwts per user.
	CreateJWT Limit
	// SignUp limits POST /v1/account per client IP.
	SignUp Limit
	// EmailSession limits POST /v1/account/sessions/email per email. Every attempt
	// counts; a successful login (201) resets the count, so in effect it limits failed
	// logins since the last success.
	EmailSession Limit
}

// UpstreamRateLimits are Appwrite 1.9.6's abuse labels (app/controllers/api/account.php):
// createJWT 120 per 60 s per user (APP_LIMIT_WRITE_RATE_DEFAULT*2 per
// APP_LIMIT_WRITE_RATE_PERIOD_DEFAULT), sign-up 10 per hour per IP, email sessions 10 per
// hour per email, reset by a 201.
func UpstreamRateLimits() RateLimits {
	return RateLimits{
		CreateJWT:    Limit{Max: 120, Window: 60 * time.Second},
		SignUp:       Limit{Max: 10, Window: time.Hour},
		EmailSession: Limit{Max: 10, Window: time.Hour},
	}
}

// NoRateLimits disables every abuse limit.
func NoRateLimits() *RateLimits { return &RateLimits{} }

// Scaled multiplies every Max by k (for tests that need more headroom than upstream
// gives, and say so).
func (r RateLimits) Scaled(k int) RateLimits {
	r.CreateJWT.Max *= k
	r.SignUp.Max *= k
	r.EmailSession.Max *= k
	return r
}

// limiter is utopia-php/abuse's TimeLimit over Redis: a counter per key and fixed window
// aligned to the epoch (window start = now - now % window); a request is allowed while
// the counter is below the limit and then counts; a refused request does not count.
type limiter struct {
	mu     sync.Mutex
	counts map[string]int
	now    func() time.Time
}

func newLimiter(now func() time.Time) *limiter {
	return &limiter{counts: map[string]int{}, now: now}
}

func (l *limiter) windowKey(route, key string, lim Limit) (string, time.Time) {
	w := int64(lim.Window / time.Second)
	if w <= 0 {
		w = 1
	}
	now := l.now().Unix()
	start := now - now%w
	return fmt.Sprintf("%s|%s|%d", route, key, start), time.Unix(start+w, 0)
}

// allow applies lim to (route, key), sets Appwrite's X-RateLimit-* headers, and reports
// whether the request may proceed. exempt callers (API keys) never count.
func (l *limiter) allow(w http.ResponseWriter, route, key string, lim Limit, exempt bool) error {
	if lim.Max <= 0 {
		return nil
	}
	k, reset := l.windowKey(route, key, lim)
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gcLocked()
	n := l.counts[k]
	remaining := lim.Max - (n + 1)
	if remaining < 0 {
		remaining = 0
	}
	h := w.Header()
	h.Set("X-RateLimit-Limit", fmt.Sprint(lim.Max))
	h.Set("X-RateLimit-Remaining", fmt.Sprint(remaining))
	h.Set("X-RateLimit-Reset", fmt.Sprint(reset.Unix()))
	if exempt {
		return nil
	}
	if n >= lim.Max {
		return errf(429, "general_rate_limit_exceeded", "Rate limit for the current endpoint has been exceeded. Please try again after some time.")
	}
	l.counts[k] = n + 1
	return nil
}

// reset sets the counter of the current window to zero (Appwrite's abuse-reset).
func (l *limiter) reset(route, key string, lim Limit) {
	if lim.Max <= 0 {
		return
	}
	k, _ := l.windowKey(route, key, lim)
	l.mu.Lock()
	delete(l.counts, k)
	l.mu.Unlock()
}

// gcLocked drops counters of windows that have ended (bounded memory for long runs).
func (l *limiter) gcLocked() {
	if len(l.counts) < 4096 {
		return
	}
	now := l.now().Unix()
	for k := range l.counts {
		i := strings.LastIndexByte(k, '|')
		var start int64
		fmt.Sscan(k[i+1:], &start)
		if now-start > 24*3600 {
			delete(l.counts, k)
		}
	}
}

// clientIP is Appwrite's request IP: the first X-Forwarded-For entry
// (_APP_TRUSTED_HEADERS=x-forwarded-for), else the peer address.
func clientIP(r *http.Request) string {
	if xff := r.Header.Get("X-Forwarded-For"); xff != "" {
		return strings.TrimSpace(strings.Split(xff, ",")[0])
	}
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
