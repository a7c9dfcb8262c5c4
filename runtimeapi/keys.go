package runtimeapi

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"strings"

	"privateassistant/schema"
)

// SecretPrefix starts every runtime key, so a leaked one is recognisable (secret scanners).
const SecretPrefix = "pak_"

var (
	keyIDRe  = regexp.MustCompile(`^rk[0-9a-f]{16}$`)
	appIDRe  = regexp.MustCompile(`^[a-z][a-z0-9]{0,23}$`)
	envRe    = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)
	secretRe = regexp.MustCompile(`^pak_(rk[0-9a-f]{16})_[A-Za-z0-9_-]{43}$`)
)

// Errors of key verification. The HTTP layer answers all of them 401 invalid_api_key.
var (
	ErrInvalidKey = errors.New("invalid runtime key")
	ErrRevoked    = errors.New("runtime key revoked")
)

// Identity is what a verified key proves: which key, which app, which roles. H47's
// host-app tools take the app from here and nowhere else.
type Identity struct {
	KeyID string
	AppID string
	// Env is the key's environment: "" for production, else its name (ValidEnv).
	Env   string
	Roles []string
}

// Space is the namespace the key's data lives in: the app id in production, and
// "<app>.<env>" in any other environment. App users, response ids (request id
// prefixes), tool declarations and the audience of tokens are all derived from it, so
// staging and production never share a user, a conversation or a response; runtime links
// to members exist only in production (a member's data is production data).
func (i Identity) Space() string { return SpaceOf(i.AppID, i.Env) }

// SpaceOf is Identity.Space for an app and an environment.
func SpaceOf(appID, env string) string {
	if env == "" {
		return appID
	}
	return appID + "." + env
}

// ValidEnv reports whether s names an environment: a lower-case letter, then up to 11
// lower-case letters or digits ("production" is the empty environment: NormalEnv).
func ValidEnv(s string) bool { return envRe.MatchString(s) }

// EnvOf is a key record's environment ("" for production).
func EnvOf(rec *schema.RuntimeKey) string {
	if rec == nil || rec.Environment == nil {
		return ""
	}
	return NormalEnv(*rec.Environment)
}

// NormalEnv is the stored name of an environment: "" for production.
func NormalEnv(s string) string {
	if s == "production" {
		return ""
	}
	return s
}

// AllowsRole reports whether the key is scoped to role.
func (i Identity) AllowsRole(role string) bool { return slices.Contains(i.Roles, role) }

// ValidKeyID reports whether s looks like a key id.
func ValidKeyID(s string) bool { return keyIDRe.MatchString(s) }

// ValidAppID reports whether s is a valid app id: a lower-case letter, then up to 23
// lower-case letters and digits (it becomes part of an Appwrite label).
func ValidAppID(s string) bool { return appIDRe.MatchString(s) }

// NewSecret makes a new key id and its secret.
func NewSecret() (keyID, secret string, err error) {
	var id [8]byte
	var sec [32]byte
	if _, err := rand.Read(id[:]); err != nil {
		return "", "", err
	}
	if _, err := rand.Read(sec[:]); err != nil {
		return "", "", err
	}
	keyID = "rk" + hex.EncodeToString(id[:])
	return keyID, SecretPrefix + keyID + "_" + base64.RawURLEncoding.EncodeToString(sec[:]), nil
}

// HashSecret is what the record stores: the hex SHA-256 of the whole secret.
func HashSecret(secret string) string {
	h := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(h[:])
}

// ParseSecret returns the key id a well-formed secret names.
func ParseSecret(secret string) (string, bool) {
	m := secretRe.FindStringSubmatch(secret)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// Verify resolves "Bearer <secret>" to the key's identity and record: a malformed,
// unknown or mismatching secret is ErrInvalidKey, a revoked key ErrRevoked. It reads the
// record on every call, so revocation is immediate.
func Verify(ctx context.Context, st *schema.Store, authorization string) (Identity, *schema.RuntimeKey, error) {
	tok, ok := strings.CutPrefix(authorization, "Bearer ")
	if !ok {
		return Identity{}, nil, ErrInvalidKey
	}
	tok = strings.TrimSpace(tok)
	id, ok := ParseSecret(tok)
	if !ok {
		return Identity{}, nil, ErrInvalidKey
	}
	rec, err := schema.For[schema.RuntimeKey](st, schema.CollRuntimeKeys).Get(ctx, id)
	if errors.Is(err, schema.ErrNotFound) {
		return Identity{}, nil, ErrInvalidKey
	}
	if err != nil {
		return Identity{}, nil, fmt.Errorf("read runtime key: %w", err)
	}
	if subtle.ConstantTimeCompare([]byte(HashSecret(tok)), []byte(rec.SecretHash)) != 1 {
		return Identity{}, nil, ErrInvalidKey
	}
	if rec.RevokedAt != nil && *rec.RevokedAt != "" {
		return Identity{}, nil, ErrRevoked
	}
	return Identity{KeyID: rec.ID, AppID: rec.AppID, Env: EnvOf(rec), Roles: rec.Roles}, rec, nil
}
