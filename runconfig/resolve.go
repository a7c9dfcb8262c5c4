// Package runconfig resolves the configuration a work role's runs execute with — which
// harness revision and which model route revision a run is pinned to, its tool policy and
// its queue — from the settings and the immutable revision records, and loads the reviewed
// bootstrap file that creates the first of them. It reads configuration; the data model
// itself is package schema.
//
// The system settings document is the live pointer: the content of the live release
// (Content) and its id. A resolution (Resolved) is a pure function of (release content,
// role) and the immutable revision records it names, so it is immutable too: it is cached
// in Redis under pa:plan:{release fingerprint}:{role}, and identified by a fingerprint over
// its own content. The live fingerprint is a pointer (pa:plan:current) with a short TTL
// that only moves with the live pointer's revision (pa:plan:current:rev, forward only, so
// a rollback moves it too); promotions move it at once. A warm lookup is one Redis round
// trip and no Appwrite read.
package runconfig

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strconv"
	"time"

	"github.com/appwrite/sdk-for-go/query"
	"github.com/redis/go-redis/v9"

	"privateassistant/queue"
	"privateassistant/schema"
)

// SystemSettingsID is the document id of the installation-wide settings.
const SystemSettingsID = "system"

// RoleBinding is one entry of settings.roles: what a work role runs on. Tools, when set,
// narrows the admin ceiling; it can never widen it.
type RoleBinding struct {
	Harness         string   `json:"harness"`
	HarnessRevision int64    `json:"harnessRevision"`
	Route           string   `json:"route"`
	RouteRevision   int64    `json:"routeRevision"`
	Tools           []string `json:"tools"` // nil: the whole ceiling; []: no tools
	// Labels names the Appwrite user labels that may use the role; empty: every member.
	Labels []string `json:"labels,omitempty"`
}

// Allowed reports whether a user carrying userLabels may use a role whose binding names
// labels (empty: every member may).
func Allowed(labels, userLabels []string) bool {
	if len(labels) == 0 {
		return true
	}
	for _, l := range labels {
		if slices.Contains(userLabels, l) {
			return true
		}
	}
	return false
}

// Content is what a release fixes: the role selection (harness and route revisions, tool
// narrowing, labels), the tool ceiling and the default harness. The system settings
// document holds the live one.
type Content struct {
	Roles                  map[string]RoleBinding `json:"roles"`
	ToolCeiling            []string               `json:"toolCeiling"`
	DefaultHarness         string                 `json:"defaultHarness,omitempty"`
	DefaultHarnessRevision int64                  `json:"defaultHarnessRevision,omitempty"`
}

// Fingerprint identifies the content: sha256 over its JSON (map keys sorted, nil and
// empty tool lists kept apart, as they mean different things).
func (c Content) Fingerprint() string {
	b, _ := json.Marshal(c)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// ContentOf reads the content of a settings document.
func ContentOf(s *schema.Settings) (Content, error) {
	c := Content{Roles: map[string]RoleBinding{}}
	if s.Roles != nil && *s.Roles != "" {
		if err := json.Unmarshal([]byte(*s.Roles), &c.Roles); err != nil {
			return c, fmt.Errorf("settings revision %d: roles: %w", s.Revision, err)
		}
	}
	if s.ToolCeiling != nil && *s.ToolCeiling != "" {
		if err := json.Unmarshal([]byte(*s.ToolCeiling), &c.ToolCeiling); err != nil {
			return c, fmt.Errorf("settings revision %d: toolCeiling: %w", s.Revision, err)
		}
	}
	if s.DefaultHarness != nil {
		c.DefaultHarness = *s.DefaultHarness
	}
	if s.DefaultHarnessRevision != nil {
		c.DefaultHarnessRevision = *s.DefaultHarnessRevision
	}
	return c, nil
}

// Patch is the settings patch that makes c the content of the system document.
func (c Content) Patch() map[string]any {
	rb, _ := json.Marshal(c.Roles)
	cb, _ := json.Marshal(c.ToolCeiling)
	p := map[string]any{"roles": string(rb), "toolCeiling": string(cb), "defaultHarness": nil, "defaultHarnessRevision": nil}
	if c.DefaultHarness != "" {
		p["defaultHarness"], p["defaultHarnessRevision"] = c.DefaultHarness, c.DefaultHarnessRevision
	}
	return p
}

// Resolved is the resolved, immutable execution configuration of a role in a release.
type Resolved struct {
	// Release is the live release's document id ("" before the first promotion);
	// ReleaseFingerprint its content's fingerprint (the cache key).
	Release            string   `json:"release,omitempty"`
	ReleaseFingerprint string   `json:"releaseFingerprint"`
	Role               string   `json:"role"`
	HarnessProfileID   string   `json:"harnessProfileId"`
	HarnessRevision    int64    `json:"harnessRevision"`
	HarnessKind        string   `json:"harnessKind"`
	RouteID            string   `json:"routeId"`
	RouteRevision      int64    `json:"routeRevision"`
	RouteAlias         string   `json:"routeAlias"`
	Device             string   `json:"device"`
	ContextBudget      int64    `json:"contextBudget"`
	Tools              []string `json:"tools"`
	Labels             []string `json:"labels,omitempty"` // who may use the role (RoleBinding.Labels)
	Queue              string   `json:"queue"`
	Fingerprint        string   `json:"fingerprint"`
}

// Errors a caller classifies.
var (
	ErrUnknownRole   = errors.New("unknown work role")
	ErrNotConfigured = errors.New("no settings: run `make bootstrap`")
	ErrUnverified    = errors.New("harness revision is not verified")
	ErrDisabled      = errors.New("model route is disabled")
	// ErrUnchecked: the live release's evidence has not passed (only the bootstrap's
	// release is live without it) and does not clear the role's route: the configuration
	// is being checked, or the route waits for its GPU qualification (release.go Hold).
	ErrUnchecked = errors.New("the live configuration has not passed its checks for this role")
	// ErrCache: Redis failed (the caller decides whether that is fatal).
	ErrCache = errors.New("plan cache unavailable")
)

// EffectiveTools is the admin ceiling ∩ the role's narrowing. A nil narrowing means the
// whole ceiling; anything outside the ceiling is dropped, so a role can only narrow.
func EffectiveTools(ceiling, narrowing []string) []string {
	out := []string{}
	if narrowing == nil {
		out = append(out, ceiling...)
	} else {
		for _, t := range narrowing {
			if slices.Contains(ceiling, t) && !slices.Contains(out, t) {
				out = append(out, t)
			}
		}
	}
	sort.Strings(out)
	return slices.Compact(out)
}

// Fingerprint hashes the plan's content (everything but the fingerprint itself).
func (p Resolved) fingerprint() string {
	p.Fingerprint = ""
	b, _ := json.Marshal(p)
	h := sha256.Sum256(b)
	return hex.EncodeToString(h[:])
}

// Resolve reads the records for role at the current settings revision. It makes
// Appwrite reads: use a Cache for the hot path.
func Resolve(ctx context.Context, st *schema.Store, role string) (Resolved, error) {
	p, _, err := resolveLive(ctx, st, role)
	return p, err
}

// resolveLive is Resolve and the live pointer's revision.
func resolveLive(ctx context.Context, st *schema.Store, role string) (Resolved, int64, error) {
	s, err := schema.For[schema.Settings](st, schema.CollSettings).Get(ctx, SystemSettingsID)
	if errors.Is(err, schema.ErrNotFound) {
		return Resolved{}, 0, ErrNotConfigured
	}
	if err != nil {
		return Resolved{}, 0, err
	}
	p, err := ResolveAt(ctx, st, s, role)
	return p, s.Revision, err
}

// ResolveAt resolves role against a given settings record.
func ResolveAt(ctx context.Context, st *schema.Store, s *schema.Settings, role string) (Resolved, error) {
	c, err := ContentOf(s)
	if err != nil {
		return Resolved{}, err
	}
	rb, ok := c.Roles[role]
	if !ok {
		return Resolved{}, fmt.Errorf("%w: %q", ErrUnknownRole, role)
	}
	ceiling := c.ToolCeiling
	h, err := HarnessRevision(ctx, st, rb.Harness, rb.HarnessRevision)
	if err != nil {
		return Resolved{}, err
	}
	if h.Kind == "hermes" && !h.Verified {
		return Resolved{}, fmt.Errorf("%w: %s@%d", ErrUnverified, h.ProfileID, h.Revision)
	}
	r, err := RouteRevision(ctx, st, rb.Route, rb.RouteRevision)
	if err != nil {
		return Resolved{}, err
	}
	if !r.Enabled {
		return Resolved{}, fmt.Errorf("%w: %s@%d", ErrDisabled, r.RouteID, r.Revision)
	}
	if s.Release != nil {
		if err := Hold(ctx, st, *s.Release, r); err != nil {
			return Resolved{}, err
		}
	}
	p := Resolved{
		ReleaseFingerprint: c.Fingerprint(), Role: role,
		HarnessProfileID: h.ProfileID, HarnessRevision: h.Revision, HarnessKind: h.Kind,
		RouteID: r.RouteID, RouteRevision: r.Revision, RouteAlias: r.Alias, Device: r.Device,
		ContextBudget: r.ContextBudget, Tools: EffectiveTools(ceiling, rb.Tools), Labels: rb.Labels,
		Queue: queue.DeviceQueue(r.Device),
	}
	if s.Release != nil {
		p.Release = *s.Release
	}
	p.Fingerprint = p.fingerprint()
	return p, nil
}

// HarnessRevision loads one immutable harness profile revision.
func HarnessRevision(ctx context.Context, st *schema.Store, id string, rev int64) (*schema.HarnessProfile, error) {
	items, err := schema.For[schema.HarnessProfile](st, schema.CollHarnessProfiles).List(ctx, schema.ListQuery{
		Filters: []string{query.Equal("profileId", id), query.Equal("revision", rev)}, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(items.Items) == 0 {
		return nil, fmt.Errorf("harness %s revision %d: %w", id, rev, schema.ErrNotFound)
	}
	return &items.Items[0], nil
}

// RouteRevision loads one immutable model route revision.
func RouteRevision(ctx context.Context, st *schema.Store, id string, rev int64) (*schema.ModelRoute, error) {
	items, err := schema.For[schema.ModelRoute](st, schema.CollModelRoutes).List(ctx, schema.ListQuery{
		Filters: []string{query.Equal("routeId", id), query.Equal("revision", rev)}, Limit: 1})
	if err != nil {
		return nil, err
	}
	if len(items.Items) == 0 {
		return nil, fmt.Errorf("route %s revision %d: %w", id, rev, schema.ErrNotFound)
	}
	return &items.Items[0], nil
}

// Cache serves plans from Redis, resolving from Appwrite on a miss.
type Cache struct {
	RDB redis.UniversalClient
	// PointerTTL bounds how long a settings revision is trusted without a re-read when no
	// admin commit moved the pointer (default 30 s).
	PointerTTL time.Duration
	// PlanTTL bounds how long an immutable plan stays cached (default 7 days).
	PlanTTL time.Duration
}

// cached is the plan of role in the release environment env's pointer names ("" is
// production; an environment's "=" follows production's), from the cache: the pointers
// first (one MGET), then that release's plan key (queue.PlanKey). Plans are immutable
// under their fingerprint, so the two reads need no atomicity. ok false: not cached.
func (c *Cache) cached(ctx context.Context, env, role string) (p Resolved, ok bool, err error) {
	keys := []string{queue.PlanPointerKey()}
	if env != "" {
		keys = []string{EnvPlanPointerKey(env), queue.PlanPointerKey()}
	}
	vals, err := c.RDB.MGet(ctx, keys...).Result()
	if err != nil {
		return Resolved{}, false, fmt.Errorf("%w: %v", ErrCache, err)
	}
	fp, set := vals[0].(string)
	if env != "" && fp == followLive {
		fp, set = vals[1].(string)
	}
	if !set {
		return Resolved{}, false, nil
	}
	raw, err := c.RDB.Get(ctx, queue.PlanKey(fp, role)).Bytes()
	if errors.Is(err, redis.Nil) {
		return Resolved{}, false, nil
	}
	if err != nil {
		return Resolved{}, false, fmt.Errorf("%w: %v", ErrCache, err)
	}
	if json.Unmarshal(raw, &p) != nil || p.Role != role {
		return Resolved{}, false, nil
	}
	return p, true, nil
}

// setPointerScript moves the pointer to a fingerprint with the live pointer's revision,
// forward only (a slow resolver cannot move it back). KEYS pointer, pointer revision;
// ARGV revision, fingerprint, ttl ms. An expired pointer starts over.
var setPointerScript = redis.NewScript(`
local cur = 0
if redis.call('EXISTS', KEYS[1]) == 1 then cur = tonumber(redis.call('GET', KEYS[2]) or '0') end
local want = tonumber(ARGV[1])
if want >= cur then
  redis.call('SET', KEYS[1], ARGV[2], 'PX', ARGV[3])
  redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[3])
  return want
end
return cur
`)

// Get returns the plan of role at the current settings revision. hit reports whether it
// came from the cache (no Appwrite read). Redis failures are returned: admission needs
// Redis anyway.
func (c *Cache) Get(ctx context.Context, st *schema.Store, role string) (p Resolved, hit bool, err error) {
	if c.RDB != nil {
		if p, ok, err := c.cached(ctx, "", role); ok || err != nil {
			return p, ok, err
		}
	}
	p, rev, err := resolveLive(ctx, st, role)
	if err != nil {
		return Resolved{}, false, err
	}
	if c.RDB != nil {
		if err := c.Store(ctx, rev, p); err != nil {
			return Resolved{}, false, err
		}
	}
	return p, false, nil
}

// Store caches an immutable plan and moves the pointer to its release at the live
// pointer's revision rev (forward only).
func (c *Cache) Store(ctx context.Context, rev int64, p Resolved) error {
	if err := c.storePlan(ctx, p); err != nil {
		return err
	}
	if err := c.MovePointer(ctx, rev, p.ReleaseFingerprint); err != nil {
		return fmt.Errorf("%w: %v", ErrCache, err)
	}
	return nil
}

// storePlan caches an immutable plan under its release fingerprint and role.
func (c *Cache) storePlan(ctx context.Context, p Resolved) error {
	b, _ := json.Marshal(p)
	planTTL := c.PlanTTL
	if planTTL <= 0 {
		planTTL = 7 * 24 * time.Hour
	}
	if err := c.RDB.Set(ctx, queue.PlanKey(p.ReleaseFingerprint, p.Role), b, planTTL).Err(); err != nil {
		return fmt.Errorf("%w: %v", ErrCache, err)
	}
	return nil
}

// MovePointer makes fingerprint the live release at the live pointer's revision rev
// (forward only). Promotions and rollbacks call it right after moving the live pointer,
// so new admissions use the new release at once.
func (c *Cache) MovePointer(ctx context.Context, rev int64, fingerprint string) error {
	ptrTTL := c.PointerTTL
	if ptrTTL <= 0 {
		ptrTTL = 30 * time.Second
	}
	return setPointerScript.Run(ctx, c.RDB, []string{queue.PlanPointerKey(), queue.PlanPointerRevKey()},
		strconv.FormatInt(rev, 10), fingerprint, ptrTTL.Milliseconds()).Err()
}

// Environments (issue 35 item 3). A runtime key's environment other than production runs
// its own live release once one was promoted to it: the settings document
// EnvSettingsID(env) (server only, like the system one) holds that release's content and
// id. An environment without it runs the system document's (production's) release, so
// nothing changes for one never promoted separately. Its plan pointer
// (EnvPlanPointerKey) holds the release fingerprint, or "=" for "follow production's
// pointer", with the environment document's revision (0: none), forward only.

// EnvSettingsID is the settings document id of environment env ("" is production: the
// system document).
func EnvSettingsID(env string) string {
	if env == "" {
		return SystemSettingsID
	}
	return "env-" + env
}

// EnvPlanPointerKey and EnvPlanPointerRevKey are environment env's plan pointer and the
// revision it was set at ("" is production's: queue.PlanPointerKey).
func EnvPlanPointerKey(env string) string {
	if env == "" {
		return queue.PlanPointerKey()
	}
	return queue.EnvPlanPointerKey(env)
}

func EnvPlanPointerRevKey(env string) string {
	if env == "" {
		return queue.PlanPointerRevKey()
	}
	return queue.EnvPlanPointerRevKey(env)
}

// followLive is an environment pointer's value while it runs production's release.
const followLive = "="

// FollowLive points environment env's plan pointer back at production's, at its settings
// document's revision rev (the one that cleared its release).
func (c *Cache) FollowLive(ctx context.Context, env string, rev int64) error {
	return c.MovePointerIn(ctx, env, rev, followLive)
}

// LiveSettings is the settings document environment env runs: its own, or (none yet, one
// sent back to following production, or env is production) the system document; own says
// which.
func LiveSettings(ctx context.Context, st *schema.Store, env string) (s *schema.Settings, own bool, err error) {
	s, own, _, err = liveSettings(ctx, st, env)
	return s, own, err
}

// liveSettings is LiveSettings, with the revision of env's own document (0: none): an
// environment that follows production keeps its document, release null, so its pointer's
// revision stays forward only.
func liveSettings(ctx context.Context, st *schema.Store, env string) (s *schema.Settings, own bool, envRev int64, err error) {
	tbl := schema.For[schema.Settings](st, schema.CollSettings)
	if env != "" {
		s, err := tbl.Get(ctx, EnvSettingsID(env))
		if err == nil && s.Release != nil {
			return s, true, s.Revision, nil
		}
		if err == nil {
			envRev = s.Revision
		} else if !errors.Is(err, schema.ErrNotFound) {
			return nil, false, 0, err
		}
	}
	s, err = tbl.Get(ctx, SystemSettingsID)
	if errors.Is(err, schema.ErrNotFound) {
		return nil, false, 0, ErrNotConfigured
	}
	return s, false, envRev, err
}

// GetIn is Get for environment env's live release ("" is production: Get).
func (c *Cache) GetIn(ctx context.Context, st *schema.Store, env, role string) (p Resolved, hit bool, err error) {
	if env == "" {
		return c.Get(ctx, st, role)
	}
	if c.RDB != nil {
		if p, ok, err := c.cached(ctx, env, role); ok || err != nil {
			return p, ok, err
		}
	}
	s, own, envRev, err := liveSettings(ctx, st, env)
	if err != nil {
		return Resolved{}, false, err
	}
	if !own {
		// Production's release: its plan and pointer as Get keeps them, then this
		// environment's pointer follows production's (at its document's revision, 0 for
		// none: a later promotion to the environment wins over a slow reader).
		if p, _, err = c.Get(ctx, st, role); err != nil {
			return Resolved{}, false, err
		}
		if c.RDB != nil {
			if err := c.MovePointerIn(ctx, env, envRev, followLive); err != nil {
				return Resolved{}, false, fmt.Errorf("%w: %v", ErrCache, err)
			}
		}
		return p, false, nil
	}
	if p, err = ResolveAt(ctx, st, s, role); err != nil {
		return Resolved{}, false, err
	}
	if c.RDB != nil {
		if err := c.storePlan(ctx, p); err != nil {
			return Resolved{}, false, err
		}
		if err := c.MovePointerIn(ctx, env, s.Revision, p.ReleaseFingerprint); err != nil {
			return Resolved{}, false, fmt.Errorf("%w: %v", ErrCache, err)
		}
	}
	return p, false, nil
}

// MovePointerIn is MovePointer for environment env's pointer ("" is production's).
func (c *Cache) MovePointerIn(ctx context.Context, env string, rev int64, fingerprint string) error {
	if env == "" {
		return c.MovePointer(ctx, rev, fingerprint)
	}
	ptrTTL := c.PointerTTL
	if ptrTTL <= 0 {
		ptrTTL = 30 * time.Second
	}
	return setPointerScript.Run(ctx, c.RDB, []string{EnvPlanPointerKey(env), EnvPlanPointerRevKey(env)},
		strconv.FormatInt(rev, 10), fingerprint, ptrTTL.Milliseconds()).Err()
}
