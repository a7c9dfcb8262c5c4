package issuer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// MaxJWKS bounds a key set document Fetcher reads.
const MaxJWKS = 64 << 10

// Fetcher reads a JWKS from a URL and keeps it: a known kid is answered from the copy
// for MaxAge; an unknown kid re-reads the URL (a rotation), at most once per MinRefetch,
// so a flood of tokens with made-up kids costs one fetch per MinRefetch. Safe for
// concurrent use.
type Fetcher struct {
	URL        string
	HTTP       *http.Client     // nil: 5 s timeout, no redirects
	MaxAge     time.Duration    // 0: 10 min
	MinRefetch time.Duration    // 0: 30 s
	Now        func() time.Time // nil: time.Now

	mu      sync.Mutex
	set     *jose.JSONWebKeySet
	fetched time.Time
	tried   time.Time
}

var noRedirects = &http.Client{Timeout: 5 * time.Second,
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}

func (f *Fetcher) now() time.Time {
	if f.Now != nil {
		return f.Now()
	}
	return time.Now()
}

// Key is a KeyFunc.
func (f *Fetcher) Key(ctx context.Context, kid string) (*jose.JSONWebKey, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	maxAge, minRefetch := f.MaxAge, f.MinRefetch
	if maxAge <= 0 {
		maxAge = 10 * time.Minute
	}
	if minRefetch <= 0 {
		minRefetch = 30 * time.Second
	}
	now := f.now()
	if f.set != nil && now.Sub(f.fetched) < maxAge {
		if ks := f.set.Key(kid); len(ks) > 0 {
			return &ks[0], nil
		}
	}
	if f.set != nil && now.Sub(f.tried) < minRefetch {
		if ks := f.set.Key(kid); len(ks) > 0 {
			return &ks[0], nil
		}
		return nil, ErrUnknownKey
	}
	f.tried = now
	set, err := FetchJWKS(ctx, f.HTTP, f.URL)
	if err != nil {
		if f.set != nil { // a stale copy beats none while the URL is down
			if ks := f.set.Key(kid); len(ks) > 0 {
				return &ks[0], nil
			}
		}
		return nil, err
	}
	f.set, f.fetched = set, now
	if ks := set.Key(kid); len(ks) > 0 {
		return &ks[0], nil
	}
	return nil, ErrUnknownKey
}

// ErrFetch is wrapped by every failure to read a key set.
var ErrFetch = errors.New("the key set cannot be read")

// FetchJWKS reads and parses a JWKS (public keys only: a private member is refused).
func FetchJWKS(ctx context.Context, hc *http.Client, url string) (*jose.JSONWebKeySet, error) {
	if hc == nil {
		hc = noRedirects
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	req.Header.Set("Accept", "application/json")
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrFetch, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%w: %s answered %d", ErrFetch, url, resp.StatusCode)
	}
	b, err := io.ReadAll(io.LimitReader(resp.Body, MaxJWKS+1))
	if err != nil || len(b) > MaxJWKS {
		return nil, fmt.Errorf("%w: the document is unreadable or over %d bytes", ErrFetch, MaxJWKS)
	}
	return ParseJWKS(b)
}

// ParseJWKS parses a public key set: every key must be public, of a signing algorithm
// Verify accepts, and named by a kid.
func ParseJWKS(b []byte) (*jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(b, &set); err != nil {
		return nil, fmt.Errorf("%w: not a JWKS: %v", ErrFetch, err)
	}
	if len(set.Keys) == 0 {
		return nil, fmt.Errorf("%w: the set has no key", ErrFetch)
	}
	for _, k := range set.Keys {
		if !k.IsPublic() {
			return nil, fmt.Errorf("%w: key %q is a private key: publish public keys only", ErrFetch, k.KeyID)
		}
		if k.KeyID == "" {
			return nil, fmt.Errorf("%w: every key needs a kid", ErrFetch)
		}
		if k.Algorithm != "" && !acceptedAlg(k.Algorithm) {
			return nil, fmt.Errorf("%w: key %q is for %s; use ES256, RS256 or EdDSA", ErrFetch, k.KeyID, k.Algorithm)
		}
	}
	return &set, nil
}

func acceptedAlg(a string) bool {
	for _, x := range Algorithms {
		if string(x) == a {
			return true
		}
	}
	return false
}
