package issuer

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
)

// Keyring is the project issuer's signing keys, kept in the queue Redis
// (queue.IssuerKeysKey, readable by the agents only) with their public set beside them
// (queue.IssuerJWKSKey, which the functions publish). One key signs at a time: the
// newest. Ensure makes a new one when the newest is older than Rotate; the one it
// replaces stays in the public set for Overlap more (at least as long as a token it
// signed lives, plus clock skew), then goes. Several agents may call Ensure at once: the
// change is one WATCH/MULTI transaction, retried, so exactly one new key is made.
type Keyring struct {
	RDB     redis.UniversalClient
	Rotate  time.Duration    // 0: 30 days
	Overlap time.Duration    // 0: 1 hour
	Now     func() time.Time // nil: time.Now
}

// stored is one key as the hash keeps it.
type stored struct {
	JWK     json.RawMessage `json:"jwk"`     // the private key, JWK
	Created int64           `json:"created"` // Unix ms
	Retired int64           `json:"retired"` // Unix ms it stopped signing; 0 while it signs
}

func (k *Keyring) now() time.Time {
	if k.Now != nil {
		return k.Now()
	}
	return time.Now()
}

func (k *Keyring) rotate() time.Duration {
	if k.Rotate > 0 {
		return k.Rotate
	}
	return 30 * 24 * time.Hour
}

func (k *Keyring) overlap() time.Duration {
	if k.Overlap > 0 {
		return k.Overlap
	}
	return time.Hour
}

// Ensure returns the key that signs now, making and publishing a new one when there is
// none or the newest is due for rotation, and dropping retired keys past their overlap.
func (k *Keyring) Ensure(ctx context.Context) (*jose.JSONWebKey, error) {
	for attempt := 0; attempt < 10; attempt++ {
		var current *jose.JSONWebKey
		err := k.RDB.Watch(ctx, func(tx *redis.Tx) error {
			all, err := tx.HGetAll(ctx, queue.IssuerKeysKey).Result()
			if err != nil {
				return err
			}
			now := k.now()
			keys := map[string]stored{}
			for kid, v := range all {
				var s stored
				if json.Unmarshal([]byte(v), &s) == nil {
					keys[kid] = s
				}
			}
			newest := ""
			for kid, s := range keys {
				if s.Retired == 0 && (newest == "" || s.Created > keys[newest].Created) {
					newest = kid
				}
			}
			set, del := map[string]stored{}, []string{}
			if newest == "" || now.Sub(time.UnixMilli(keys[newest].Created)) >= k.rotate() {
				if newest != "" {
					s := keys[newest]
					s.Retired = now.UnixMilli()
					keys[newest], set[newest] = s, s
				}
				kid, s, err := newKey(now)
				if err != nil {
					return err
				}
				keys[kid], set[kid], newest = s, s, kid
			}
			for kid, s := range keys {
				if s.Retired != 0 && now.Sub(time.UnixMilli(s.Retired)) >= k.overlap() {
					delete(keys, kid)
					del = append(del, kid)
				}
			}
			var jwk jose.JSONWebKey
			if err := json.Unmarshal(keys[newest].JWK, &jwk); err != nil {
				return fmt.Errorf("issuer: key %s is unreadable: %w", newest, err)
			}
			current = &jwk
			pub, err := publicSet(keys)
			if err != nil {
				return err
			}
			stale, _ := tx.Get(ctx, queue.IssuerJWKSKey).Result()
			if len(set) == 0 && len(del) == 0 && stale == string(pub) {
				return nil
			}
			_, err = tx.TxPipelined(ctx, func(p redis.Pipeliner) error {
				for kid, s := range set {
					b, _ := json.Marshal(s)
					p.HSet(ctx, queue.IssuerKeysKey, kid, b)
				}
				if len(del) > 0 {
					p.HDel(ctx, queue.IssuerKeysKey, del...)
				}
				p.Set(ctx, queue.IssuerJWKSKey, pub, 0)
				return nil
			})
			return err
		}, queue.IssuerKeysKey)
		if errors.Is(err, redis.TxFailedErr) {
			continue // another agent changed the keys meanwhile: read them again
		}
		if err != nil {
			return nil, err
		}
		return current, nil
	}
	return nil, errors.New("issuer: the keys kept changing; try again")
}

func newKey(now time.Time) (string, stored, error) {
	priv, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return "", stored{}, err
	}
	var id [8]byte
	_, _ = rand.Read(id[:])
	kid := now.UTC().Format("20060102") + "-" + hex.EncodeToString(id[:])
	b, err := json.Marshal(jose.JSONWebKey{Key: priv, KeyID: kid, Algorithm: string(jose.ES256), Use: "sig"})
	if err != nil {
		return "", stored{}, err
	}
	return kid, stored{JWK: b, Created: now.UnixMilli()}, nil
}

// publicSet is the JWKS of keys: their public halves, newest first.
func publicSet(keys map[string]stored) ([]byte, error) {
	kids := make([]string, 0, len(keys))
	for kid := range keys {
		kids = append(kids, kid)
	}
	sort.Slice(kids, func(i, j int) bool { return keys[kids[i]].Created > keys[kids[j]].Created })
	set := jose.JSONWebKeySet{}
	for _, kid := range kids {
		var jwk jose.JSONWebKey
		if err := json.Unmarshal(keys[kid].JWK, &jwk); err != nil {
			return nil, fmt.Errorf("issuer: key %s is unreadable: %w", kid, err)
		}
		set.Keys = append(set.Keys, jwk.Public())
	}
	return json.Marshal(set)
}

// PublicJWKS reads the published key set (what the functions serve). redis.Nil when no
// agent has made a key yet.
func PublicJWKS(ctx context.Context, rdb redis.Cmdable) ([]byte, error) {
	return rdb.Get(ctx, queue.IssuerJWKSKey).Bytes()
}
