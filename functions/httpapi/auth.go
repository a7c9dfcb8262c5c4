package httpapi

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/appwrite/sdk-for-go/account"
	"github.com/appwrite/sdk-for-go/client"
)

// User is the verified caller: Appwrite's answer to GET /v1/account for their JWT.
type User struct {
	ID     string
	Email  string
	Name   string
	Labels []string
}

// HasLabel reports whether the user carries an Appwrite label.
func (u User) HasLabel(l string) bool {
	for _, x := range u.Labels {
		if x == l {
			return true
		}
	}
	return false
}

// Authenticator verifies Appwrite JWTs by asking Appwrite (GET /v1/account with
// X-Appwrite-JWT and no API key: with a key, Appwrite would answer for the key instead).
// A verified JWT is cached by its SHA-256 for at most TTL (default and maximum
// MaxJWTCacheTTL = 5 s) and never past its expiry, so a JWT whose session was signed out
// stops working within 5 s; BenchmarkVerify measures what the short TTL costs.
type Authenticator struct {
	Endpoint string // Appwrite endpoint including /v1
	Project  string
	TTL      time.Duration
	HTTP     *http.Client // shared, and never with a cookie jar
	Now      func() time.Time
	// MaxEntries bounds the cache (default 10,000).
	MaxEntries int

	mu    sync.Mutex
	cache map[[32]byte]cached
	calls int64 // verifications that reached Appwrite (for tests and benchmarks)
	hits  int64 // verifications the cache answered
}

// MaxJWTCacheTTL bounds how long a verified JWT is trusted without asking Appwrite again:
// a signed-out session's JWT is refused at most this long after the sign-out.
const MaxJWTCacheTTL = 5 * time.Second

type cached struct {
	user    User
	expires time.Time
}

// Calls returns how many verifications reached Appwrite.
func (a *Authenticator) Calls() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.calls
}

func unauthenticated(msg string) *Error { return Errorf(401, "unauthenticated", "%s", msg) }

// Hits returns how many verifications the cache answered.
func (a *Authenticator) Hits() int64 {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.hits
}

// Verify resolves "Bearer <jwt>" to a user.
func (a *Authenticator) Verify(ctx context.Context, authorization string) (User, error) {
	tok, ok := strings.CutPrefix(authorization, "Bearer ")
	tok = strings.TrimSpace(tok)
	if !ok || tok == "" || len(tok) > 4096 {
		return User{}, unauthenticated("sign in: send Authorization: Bearer <Appwrite JWT>")
	}
	now := a.now()
	key := sha256.Sum256([]byte(tok))
	a.mu.Lock()
	if c, hit := a.cache[key]; hit && now.Before(c.expires) {
		a.hits++
		a.mu.Unlock()
		return c.user, nil
	}
	a.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return User{}, err
	}

	c := client.New()
	c.Endpoint = strings.TrimRight(a.Endpoint, "/")
	if a.HTTP != nil {
		c.Client = a.HTTP
	} else {
		c.Client = &http.Client{Timeout: 10 * time.Second}
	}
	c.Headers["X-Appwrite-Project"] = a.Project
	c.Headers["X-Appwrite-JWT"] = tok
	a.mu.Lock()
	a.calls++
	a.mu.Unlock()
	acc, err := account.New(c).Get()
	if err != nil {
		var ae *client.AppwriteError
		if errors.As(err, &ae) {
			switch {
			case ae.GetStatusCode() == 401:
				return User{}, unauthenticated("the session has expired or the token is invalid; sign in again")
			case ae.GetStatusCode() == 403:
				return User{}, Errorf(403, "forbidden", "this account cannot use the assistant")
			case ae.GetStatusCode() >= 500 || ae.GetStatusCode() == 429:
				return User{}, Unavailable("appwrite_unavailable", "Appwrite is unavailable; try again")
			}
			return User{}, unauthenticated("the token could not be verified")
		}
		return User{}, Unavailable("appwrite_unavailable", "Appwrite is unreachable; try again")
	}
	if acc.Id == "" {
		return User{}, unauthenticated("the token could not be verified")
	}
	u := User{ID: acc.Id, Email: acc.Email, Name: acc.Name, Labels: acc.Labels}
	ttl := a.TTL
	if ttl <= 0 || ttl > MaxJWTCacheTTL {
		ttl = MaxJWTCacheTTL
	}
	exp := now.Add(ttl)
	// The payload is read only to bound the cache, never to establish identity.
	if jexp, ok := jwtExpiry(tok); ok && jexp.Before(exp) {
		exp = jexp
	}
	a.store(key, cached{user: u, expires: exp}, now)
	return u, nil
}

func (a *Authenticator) now() time.Time {
	if a.Now != nil {
		return a.Now()
	}
	return time.Now()
}

func (a *Authenticator) store(key [32]byte, c cached, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.cache == nil {
		a.cache = map[[32]byte]cached{}
	}
	limit := a.MaxEntries
	if limit <= 0 {
		limit = 10000
	}
	if len(a.cache) >= limit {
		for k, v := range a.cache {
			if !now.Before(v.expires) {
				delete(a.cache, k)
			}
		}
		for k := range a.cache {
			if len(a.cache) < limit {
				break
			}
			delete(a.cache, k)
		}
	}
	a.cache[key] = c
}

// jwtExpiry reads exp from an unverified JWT payload.
func jwtExpiry(tok string) (time.Time, bool) {
	parts := strings.Split(tok, ".")
	if len(parts) != 3 {
		return time.Time{}, false
	}
	b, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return time.Time{}, false
	}
	var p struct {
		Exp int64 `json:"exp"`
	}
	if json.Unmarshal(b, &p) != nil || p.Exp == 0 {
		return time.Time{}, false
	}
	return time.Unix(p.Exp, 0), true
}
