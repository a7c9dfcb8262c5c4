package runconfig

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"privateassistant/schema"
)

// BootstrapFile is the reviewed file `make bootstrap` reads: the initial harness
// profiles, model routes, tool ceiling and role bindings (all revision 1).
type BootstrapFile struct {
	Harnesses []struct {
		ProfileID   string `json:"profileId"`
		Kind        string `json:"kind"`
		BaseURL     string `json:"baseUrl"`
		ProfileName string `json:"profileName"`
		KeyRef      string `json:"keyRef"`
	} `json:"harnesses"`
	Routes []struct {
		RouteID       string `json:"routeId"`
		Alias         string `json:"alias"`
		Device        string `json:"device"`
		BackendModel  string `json:"backendModel"`
		ContextBudget int64  `json:"contextBudget"`
		MaxOutput     int64  `json:"maxOutput"`
		LocalOnly     *bool  `json:"localOnly"`
	} `json:"routes"`
	ToolCeiling []string `json:"toolCeiling"`
	Roles       map[string]struct {
		Harness string   `json:"harness"`
		Route   string   `json:"route"`
		Tools   []string `json:"tools"`
		Labels  []string `json:"labels"` // who may use the role; empty: every member
	} `json:"roles"`
}

// ErrAlreadyBootstrapped: settings exist; bootstrap never overwrites them.
var ErrAlreadyBootstrapped = errors.New("settings already exist: bootstrap runs once; change configuration through the admin API")

// keyRefRe accepts names of secrets (env vars, file refs), not secret values.
var keyRefRe = regexp.MustCompile(`^(env:[A-Za-z_][A-Za-z0-9_]{0,127}|file:/[A-Za-z0-9_./-]{1,255}|[A-Za-z_][A-Za-z0-9_]{0,127})$`)

// LooksLikeSecret reports whether a "reference" is more likely a pasted key: long
// high-entropy strings and known key prefixes are refused.
func LooksLikeSecret(ref string) bool {
	if ref == "" {
		return false
	}
	if !keyRefRe.MatchString(ref) {
		return true
	}
	if strings.HasPrefix(ref, "file:") {
		return false // a path on the agent's host
	}
	if len(ref) >= 24 {
		digits, upper, lower := 0, 0, 0
		for _, r := range ref {
			switch {
			case r >= '0' && r <= '9':
				digits++
			case r >= 'A' && r <= 'Z':
				upper++
			case r >= 'a' && r <= 'z':
				lower++
			}
		}
		// A variable name is mostly one case; a key mixes digits and letters heavily.
		if digits >= 6 && (lower >= 6 || upper >= 6) {
			return true
		}
	}
	for _, p := range []string{"sk-", "sk_", "standard_", "ephemeral_", "Bearer "} {
		if len(ref) > len(p) && ref[:len(p)] == p {
			return true
		}
	}
	return false
}

// ParseBootstrap reads and checks a bootstrap file strictly.
func ParseBootstrap(b []byte) (*BootstrapFile, error) {
	var f BootstrapFile
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("bootstrap file: %w", err)
	}
	harness := map[string]bool{}
	for _, h := range f.Harnesses {
		if h.ProfileID == "" || h.BaseURL == "" || (h.Kind != "hermes" && h.Kind != "direct") {
			return nil, fmt.Errorf("bootstrap file: harness %q needs profileId, baseUrl and kind hermes|direct", h.ProfileID)
		}
		if LooksLikeSecret(h.KeyRef) {
			return nil, fmt.Errorf("bootstrap file: harness %q keyRef looks like a secret value; give the name of the variable that holds it", h.ProfileID)
		}
		harness[h.ProfileID] = true
	}
	route := map[string]bool{}
	for _, r := range f.Routes {
		if r.RouteID == "" || r.Alias == "" || r.Device == "" || r.BackendModel == "" || r.ContextBudget < 1 {
			return nil, fmt.Errorf("bootstrap file: route %q needs routeId, alias, device, backendModel and a measured contextBudget", r.RouteID)
		}
		route[r.RouteID] = true
	}
	if len(f.Roles) == 0 {
		return nil, errors.New("bootstrap file: no roles")
	}
	for name, r := range f.Roles {
		if !harness[r.Harness] || !route[r.Route] {
			return nil, fmt.Errorf("bootstrap file: role %q names an unknown harness or route", name)
		}
	}
	return &f, nil
}

// Bootstrap creates revision 1 of everything in f and the system settings (revision 1).
// It refuses when settings already exist, and is otherwise safe to re-run after a
// partial failure (existing revision-1 records are kept).
func Bootstrap(ctx context.Context, st *schema.Store, f *BootstrapFile, actor string) error {
	settings := schema.For[schema.Settings](st, schema.CollSettings)
	if _, err := settings.Get(ctx, SystemSettingsID); err == nil {
		return ErrAlreadyBootstrapped
	} else if !errors.Is(err, schema.ErrNotFound) {
		return err
	}
	now := time.Now().UTC().Format(time.RFC3339Nano)
	hp := schema.For[schema.HarnessProfile](st, schema.CollHarnessProfiles)
	for _, h := range f.Harnesses {
		rec := &schema.HarnessProfile{ProfileID: h.ProfileID, Revision: 1, Kind: h.Kind, BaseURL: h.BaseURL,
			ProfileName: schema.Ptr(h.ProfileName), KeyRef: schema.Ptr(h.KeyRef), CreatedBy: schema.Ptr(actor),
			Verified: h.Kind == "direct"}
		if h.Kind == "direct" {
			rec.VerifiedAt = schema.Ptr(now)
		}
		if _, err := hp.Create(ctx, RevisionDocID(h.ProfileID, 1), "", rec); err != nil && !errors.Is(err, schema.ErrConflict) {
			return err
		}
	}
	mr := schema.For[schema.ModelRoute](st, schema.CollModelRoutes)
	for _, r := range f.Routes {
		local := true
		if r.LocalOnly != nil {
			local = *r.LocalOnly
		}
		rec := &schema.ModelRoute{RouteID: r.RouteID, Revision: 1, Alias: r.Alias, Device: r.Device,
			BackendModel: r.BackendModel, ContextBudget: r.ContextBudget, LocalOnly: local, Enabled: true, CreatedBy: schema.Ptr(actor)}
		if r.MaxOutput > 0 {
			rec.MaxOutput = schema.Ptr(r.MaxOutput)
		}
		if _, err := mr.Create(ctx, RevisionDocID(r.RouteID, 1), "", rec); err != nil && !errors.Is(err, schema.ErrConflict) {
			return err
		}
	}
	roles := map[string]RoleBinding{}
	for name, r := range f.Roles {
		roles[name] = RoleBinding{Harness: r.Harness, HarnessRevision: 1, Route: r.Route, RouteRevision: 1, Tools: r.Tools, Labels: r.Labels}
	}
	c := Content{Roles: roles, ToolCeiling: f.ToolCeiling}
	if c.ToolCeiling == nil {
		c.ToolCeiling = []string{}
	}
	// Release 1 is the bootstrap's content; the live pointer names it. Its evidence is
	// collected by the reconciler afterwards (settings: Reconciler).
	relID := RevisionDocID("release", 1)
	cj, _ := json.Marshal(c)
	if _, err := schema.For[schema.Release](st, schema.CollReleases).Create(ctx, relID, "", &schema.Release{Seq: 1, Revision: 1,
		State: schema.ReleaseCollecting, Fingerprint: c.Fingerprint(), Content: string(cj), CreatedBy: actor, CreatedAt: now,
		PromotedAt: schema.Ptr(now), PromotedBy: schema.Ptr(actor)}); err != nil && !errors.Is(err, schema.ErrConflict) {
		return err
	}
	rb, _ := json.Marshal(c.Roles)
	cb, _ := json.Marshal(c.ToolCeiling)
	_, err := settings.Create(ctx, SystemSettingsID, "", &schema.Settings{OwnerID: SystemSettingsID, Revision: 1,
		Roles: schema.Ptr(string(rb)), ToolCeiling: schema.Ptr(string(cb)), Release: schema.Ptr(relID)})
	if errors.Is(err, schema.ErrConflict) {
		return ErrAlreadyBootstrapped
	}
	if err != nil {
		return err
	}
	_, err = schema.For[schema.Audit](st, schema.CollAudit).Create(ctx, "unique()", "", &schema.Audit{
		ActorID: actor, Action: "bootstrap", Target: "settings/" + SystemSettingsID, ToRevision: schema.Ptr(int64(1)), At: now})
	return err
}

// RevisionDocID is the document id of an immutable revision record: it is what makes
// (id, revision) unique, on every engine ($id uniqueness is enforced everywhere; a unique
// index with the integer revision in it is not, on MongoDB). Lower-case, because ids are
// case-insensitive on every real engine: two profile or route ids that differ only in case
// name the same revision documents, so the second one's create is refused as taken.
func RevisionDocID(id string, rev int64) string {
	s := strings.ToLower(fmt.Sprintf("%s.r%d", id, rev))
	if len(s) > 36 {
		h := sha256.Sum256([]byte(s))
		s = "h" + hex.EncodeToString(h[:])[:35]
	}
	return s
}
