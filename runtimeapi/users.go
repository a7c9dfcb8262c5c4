package runtimeapi

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode"

	"github.com/appwrite/sdk-for-go/client"
	"github.com/appwrite/sdk-for-go/models"
	"github.com/appwrite/sdk-for-go/users"
	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/schema"
)

// ErrNotAppUser: the derived user id exists but is not this app's user (never adopted).
var ErrNotAppUser = errors.New("the derived user exists without the app's label")

// ValidExternalID reports whether s can name an app's user: 1-128 printable characters.
func ValidExternalID(s string) bool {
	if s == "" || len(s) > schema.SizeExternalID {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) {
			return false
		}
	}
	return true
}

func derive(kind, appID, externalID string) string {
	h := sha256.Sum256([]byte(kind + "\x00" + appID + "\x00" + externalID))
	return hex.EncodeToString(h[:])
}

// AppUserID is the Appwrite user id of (appId, externalId): "a" and 35 hex digits.
func AppUserID(appID, externalID string) string {
	return "a" + derive("appuser", appID, externalID)[:35]
}

// LinkID is the document id of the link of (appId, externalId) to a member.
func LinkID(appID, externalID string) string { return "l" + derive("link", appID, externalID)[:35] }

// AppLabel is the label every user of the app carries (and the label a role binding names
// to admit the app's users to a role restricted by labels).
func AppLabel(appID string) string { return "app" + appID }

// RequestIDPrefix starts the request id of every run an app admitted; with the owner
// check it scopes response ids to the app.
func RequestIDPrefix(appID string) string { return "rt:" + appID + ":" }

// RequestID is the admission request id of an Idempotency-Key (hashed: the app's key is
// any string; the result is at most 64 characters).
func RequestID(appID, idempotencyKey string) string {
	p := RequestIDPrefix(appID)
	return p + derive("idem", appID, idempotencyKey)[:min(32, schema.SizeRequestID-len(p))]
}

// User is the Appwrite user an app's user maps to.
type User struct {
	ID     string
	Labels []string
	Linked bool // an existing member an admin linked
}

// Users resolves an app's users (one per execution: it carries the execution's key).
type Users struct {
	Store *schema.Store
	API   *users.Users
	RDB   redis.UniversalClient // caches derived users that exist (immutable once made)
}

// NewUsers builds a resolver on the store's client.
func NewUsers(st *schema.Store, rdb redis.UniversalClient) *Users {
	c := st.Client()
	return &Users{Store: st, API: users.New(c), RDB: rdb}
}

func userCacheKey(id string) string { return queue.RTUserKey(id) }

// Resolve maps (appId, externalId) to its user in production (ResolveIn).
func (u *Users) Resolve(ctx context.Context, appID, externalID string) (User, error) {
	return u.ResolveIn(ctx, Identity{AppID: appID}, externalID)
}

// ResolveIn maps the key's (space, externalId) to its user, creating the derived one on
// first use: the linked member in production, else the space's own app user (labelled
// with the app's label, whatever the environment).
func (u *Users) ResolveIn(ctx context.Context, key Identity, externalID string) (User, error) {
	appID, space := key.AppID, key.Space()
	link, err := schema.For[schema.RuntimeLink](u.Store, schema.CollRuntimeLinks).Get(ctx, LinkID(appID, externalID))
	if key.Env != "" {
		link, err = nil, schema.ErrNotFound // links are production's only
	}
	switch {
	case err == nil && link.AppID == appID && link.ExternalID == externalID:
		m, err := u.API.Get(link.UserID)
		if err != nil {
			return User{}, fmt.Errorf("read linked member: %w", appwriteErr(err))
		}
		return User{ID: m.Id, Labels: m.Labels, Linked: true}, nil
	case err != nil && !errors.Is(err, schema.ErrNotFound):
		return User{}, fmt.Errorf("read runtime link: %w", err)
	}
	id, label := AppUserID(space, externalID), AppLabel(appID)
	if v, err := u.RDB.Get(ctx, userCacheKey(id)).Result(); err == nil && v == label {
		return User{ID: id, Labels: []string{label}}, nil
	}
	m, err := u.API.Get(id)
	if status(err) == 404 {
		m, err = u.create(id, label)
	}
	if err != nil {
		return User{}, fmt.Errorf("app user: %w", appwriteErr(err))
	}
	if !slices.Contains(m.Labels, label) {
		return User{}, ErrNotAppUser
	}
	_ = u.RDB.Set(ctx, userCacheKey(id), label, 30*24*time.Hour).Err()
	return User{ID: id, Labels: []string{label}}, nil
}

// ActingUserID is the id of the user (appID, externalID) acts as, read only: the linked
// member, else the derived app user (which may not exist yet). It creates nothing and
// writes no cache, so a read-only reader (the stream service) can use it; whatever it
// reads must still be owner-checked against the id (a response: owned by it and admitted
// through appID), which is what makes a derived id that is not the app's user harmless.
func ActingUserID(ctx context.Context, st *schema.Store, appID, externalID string) (string, error) {
	return ActingUserIDIn(ctx, st, Identity{AppID: appID}, externalID)
}

// ActingUserIDIn is ActingUserID for a key's space (no links outside production).
func ActingUserIDIn(ctx context.Context, st *schema.Store, key Identity, externalID string) (string, error) {
	if key.Env != "" {
		return AppUserID(key.Space(), externalID), nil
	}
	appID := key.AppID
	link, err := schema.For[schema.RuntimeLink](st, schema.CollRuntimeLinks).Get(ctx, LinkID(appID, externalID))
	switch {
	case err == nil && link.AppID == appID && link.ExternalID == externalID:
		return link.UserID, nil
	case err != nil && !errors.Is(err, schema.ErrNotFound):
		return "", fmt.Errorf("read runtime link: %w", err)
	}
	return AppUserID(appID, externalID), nil
}

func (u *Users) create(id, label string) (*models.User, error) {
	_, err := u.API.Create(id, u.API.WithCreateName("app user"))
	if err != nil && status(err) != 409 {
		return nil, err
	}
	if err == nil {
		return u.API.UpdateLabels(id, []string{label})
	}
	// Made concurrently by another call: read what is there (the label check decides).
	m, err := u.API.Get(id)
	if err == nil && len(m.Labels) == 0 {
		return u.API.UpdateLabels(id, []string{label})
	}
	return m, err
}

func status(err error) int {
	var ae *client.AppwriteError
	if errors.As(err, &ae) {
		return ae.GetStatusCode()
	}
	return 0
}

// ErrUnavailable wraps Appwrite failures that a retry may cure.
var ErrUnavailable = schema.ErrUnavailable

func appwriteErr(err error) error {
	if s := status(err); s == 0 || s >= 500 || s == 429 {
		return fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return err
}

// Describe is a compact JSON of fields for audit details.
func Describe(fields map[string]any) *string {
	b, _ := json.Marshal(fields)
	s := string(b)
	if len(s) > schema.SizeJSONSmall {
		s = s[:schema.SizeJSONSmall]
	}
	return &s
}
