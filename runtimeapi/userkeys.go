package runtimeapi

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"privateassistant/issuer"
	"privateassistant/schema"
)

// UserTokenHeader carries the user a call acts for as a JWT the app signed (sub = its
// user's stable id), when the key has user keys registered.
const UserTokenHeader = "X-App-User-Token"

// MaxUserTokenLifetime bounds a user token's exp − iat: a token is for one call or a
// few, never a session.
const MaxUserTokenLifetime = 10 * time.Minute

// Refusals of a user token (each a 401 on the API).
var (
	ErrUserTokenRequired = errors.New("this key speaks for users only through a signed user token")
	ErrUserToken         = errors.New("the user token is not acceptable")
	ErrNoUserKeys        = errors.New("this key has no user keys registered")
	ErrUserKeys          = errors.New("invalid user keys")
)

// UserKeys are an app's own token issuer and where its public keys are: inline (JWKS) or
// at a URL (JWKSURL), exactly one.
type UserKeys struct {
	Issuer  string `json:"issuer"`
	JWKS    string `json:"jwks,omitempty"`
	JWKSURL string `json:"jwksUrl,omitempty"`
}

// KeysOf is the key record's user keys; false when none are registered.
func KeysOf(rec *schema.RuntimeKey) (UserKeys, bool) {
	if rec == nil || rec.UserIssuer == nil || *rec.UserIssuer == "" {
		return UserKeys{}, false
	}
	k := UserKeys{Issuer: *rec.UserIssuer}
	if rec.UserJWKS != nil {
		k.JWKS = *rec.UserJWKS
	}
	if rec.UserJWKSURL != nil {
		k.JWKSURL = *rec.UserJWKSURL
	}
	return k, true
}

// Validate checks the keys before they are stored: an issuer, exactly one key source, an
// inline set that parses as public signing keys, a URL that is https and that allowed
// accepts (the admin's allow-list of the app's addresses: the functions will fetch it).
func (k UserKeys) Validate(allowed func(string) bool) error {
	if k.Issuer == "" || len(k.Issuer) > schema.SizeURL {
		return fmt.Errorf("%w: issuer is required (at most %d characters)", ErrUserKeys, schema.SizeURL)
	}
	if (k.JWKS == "") == (k.JWKSURL == "") {
		return fmt.Errorf("%w: give either jwks (the public key set) or jwksUrl (where it is)", ErrUserKeys)
	}
	if k.JWKS != "" {
		if len(k.JWKS) > schema.SizeUserJWKS {
			return fmt.Errorf("%w: jwks is over %d characters", ErrUserKeys, schema.SizeUserJWKS)
		}
		if _, err := issuer.ParseJWKS([]byte(k.JWKS)); err != nil {
			return fmt.Errorf("%w: %v", ErrUserKeys, err)
		}
		return nil
	}
	u, err := url.Parse(k.JWKSURL)
	loopback := u != nil && u.Scheme == "http" && (u.Hostname() == "127.0.0.1" || u.Hostname() == "localhost" || u.Hostname() == "::1")
	if err != nil || (u.Scheme != "https" && !loopback) || u.Host == "" || u.User != nil || u.Fragment != "" || len(k.JWKSURL) > schema.SizeURL {
		return fmt.Errorf("%w: jwksUrl must be an https URL (http only on a loopback address)", ErrUserKeys)
	}
	if allowed == nil || !allowed(k.JWKSURL) {
		return fmt.Errorf("%w: jwksUrl is not under the administrator's allow-list of app addresses (PA_APP_CALLBACK_ALLOW)", ErrUserKeys)
	}
	return nil
}

// UserVerifier checks user tokens against each key's registered keys; the sets behind a
// URL are cached per key and URL (issuer.Fetcher). Safe for concurrent use; one per
// warm container.
type UserVerifier struct {
	Fetch    func(url string) *issuer.Fetcher // nil: a default Fetcher per URL
	fetchers sync.Map                         // keyID + " " + URL → *issuer.Fetcher
}

// Subject verifies token for the key rec and returns the app's user id it names (sub):
// signed by a key of the registered set, iss the registered issuer, aud the key's app,
// (its space outside production: "<app>.<env>"), exp present, a lifetime of at most MaxUserTokenLifetime, 60 s of clock skew.
func (v *UserVerifier) Subject(ctx context.Context, rec *schema.RuntimeKey, token string, now time.Time) (string, error) {
	k, ok := KeysOf(rec)
	if !ok {
		return "", ErrNoUserKeys
	}
	var keys issuer.KeyFunc
	if k.JWKS != "" {
		set, err := issuer.ParseJWKS([]byte(k.JWKS))
		if err != nil {
			return "", fmt.Errorf("%w: the registered key set is unreadable", ErrUserToken)
		}
		keys = issuer.StaticKeys(set)
	} else {
		id := rec.ID + " " + k.JWKSURL
		f, ok := v.fetchers.Load(id)
		if !ok {
			nf := &issuer.Fetcher{URL: k.JWKSURL}
			if v.Fetch != nil {
				nf = v.Fetch(k.JWKSURL)
			}
			f, _ = v.fetchers.LoadOrStore(id, nf)
		}
		keys = f.(*issuer.Fetcher).Key
	}
	c, err := issuer.Verify(ctx, strings.TrimSpace(token), keys, issuer.Expect{Issuer: k.Issuer, Audience: SpaceOf(rec.AppID, EnvOf(rec)),
		MaxLifetime: MaxUserTokenLifetime, Now: now}, nil)
	if err != nil {
		return "", fmt.Errorf("%w: %v", ErrUserToken, err)
	}
	if !ValidExternalID(c.Subject) {
		return "", fmt.Errorf("%w: sub must be the user's stable id (1-%d printable characters)", ErrUserToken, schema.SizeExternalID)
	}
	return c.Subject, nil
}
