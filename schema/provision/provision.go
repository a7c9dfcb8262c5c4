// Package provision makes an Appwrite project match the data model, additively.
//
// The protocol (the implementation guide §2):
//  1. Check that /health/version is exactly 1.9.6; anything else stops everything.
//  2. Read what exists and compare it with schema.Definition: each missing database,
//     collection, attribute, index or bucket is an action; each existing one that differs
//     (type, size, elements, required, array, bounds, index shape, permissions, security
//     flags, bucket limits) is drift.
//  3. Plan prints both. Apply refuses when there is any drift, and never deletes or edits
//     an existing definition. Otherwise it creates what is missing in dependency order and
//     waits until every attribute, then every index, is "available" before going on.
//
// Creation is not one atomic migration: a failure leaves a partial schema, and the next
// run (which sees those parts as existing and matching) completes it. Provisioning creates
// no accounts, projects, documents or files.
package provision

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/client"
	"github.com/appwrite/sdk-for-go/databases"
	"github.com/appwrite/sdk-for-go/models"
	"github.com/appwrite/sdk-for-go/storage"

	"privateassistant/schema"
)

// RequiredVersion is the only Appwrite version this schema is provisioned against.
const RequiredVersion = "1.9.6"

// Config says where and how to provision.
type Config struct {
	Endpoint  string // e.g. https://appwrite.example.com/v1
	ProjectID string
	APIKey    string // needs databases.*, collections.*, buckets.* scopes
	// WaitTimeout bounds the wait for attributes and indexes to become available.
	WaitTimeout time.Duration
	// PollInterval between status checks while waiting (default 250 ms).
	PollInterval time.Duration
	// Progress receives one line per step and per wait; nil discards.
	Progress io.Writer
	// HTTPClient for the version check; http.DefaultClient when nil.
	HTTPClient *http.Client
}

// Action is one thing apply would create.
type Action struct {
	Kind   string // database, collection, attribute, index, bucket
	Target string // e.g. runs.status
	Detail string
}

func (a Action) String() string { return fmt.Sprintf("create %s %s (%s)", a.Kind, a.Target, a.Detail) }

// Drift is an existing definition that differs from the model.
type Drift struct {
	Target, Field string
	Want, Got     string
}

func (d Drift) String() string {
	return fmt.Sprintf("%s: %s is %s, the schema wants %s", d.Target, d.Field, d.Got, d.Want)
}

// Plan is the difference between the model and the project.
type Diff struct {
	Actions []Action
	Drift   []Drift
}

// Clean reports whether nothing is missing and nothing drifted.
func (p Diff) Clean() bool { return len(p.Actions) == 0 && len(p.Drift) == 0 }

// ErrDrift is returned by Apply when an existing definition differs from the model.
var ErrDrift = errors.New("schema drift")

type provisioner struct {
	cfg   Config
	model schema.Model
	db    *databases.Databases
	st    *storage.Storage
}

func newProvisioner(cfg Config, m schema.Model) (*provisioner, error) {
	if cfg.Endpoint == "" || cfg.ProjectID == "" || cfg.APIKey == "" {
		return nil, errors.New("endpoint, project id and API key are all required")
	}
	if cfg.WaitTimeout == 0 {
		cfg.WaitTimeout = 2 * time.Minute
	}
	if cfg.PollInterval == 0 {
		cfg.PollInterval = 250 * time.Millisecond
	}
	if cfg.Progress == nil {
		cfg.Progress = io.Discard
	}
	if cfg.HTTPClient == nil {
		cfg.HTTPClient = &http.Client{Timeout: 10 * time.Second}
	}
	c := appwrite.NewClient(appwrite.WithEndpoint(strings.TrimRight(cfg.Endpoint, "/")),
		appwrite.WithProject(cfg.ProjectID), appwrite.WithKey(cfg.APIKey))
	return &provisioner{cfg: cfg, model: m, db: appwrite.NewDatabases(c), st: appwrite.NewStorage(c)}, nil
}

// CheckVersion refuses any server that is not exactly RequiredVersion.
func CheckVersion(ctx context.Context, cfg Config) error {
	hc := cfg.HTTPClient
	if hc == nil {
		hc = &http.Client{Timeout: 10 * time.Second}
	}
	u := strings.TrimRight(cfg.Endpoint, "/") + "/health/version"
	req, err := http.NewRequestWithContext(ctx, "GET", u, nil)
	if err != nil {
		return fmt.Errorf("bad endpoint %q: %w", cfg.Endpoint, err)
	}
	req.Header.Set("X-Appwrite-Project", cfg.ProjectID)
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("cannot reach Appwrite at %s: %w", cfg.Endpoint, err)
	}
	defer resp.Body.Close()
	var v struct {
		Version string `json:"version"`
	}
	if resp.StatusCode != 200 || json.NewDecoder(io.LimitReader(resp.Body, 1<<16)).Decode(&v) != nil {
		return fmt.Errorf("%s/health/version answered %d, not an Appwrite version", cfg.Endpoint, resp.StatusCode)
	}
	if v.Version != RequiredVersion {
		return fmt.Errorf("Appwrite at %s is version %q; this schema is provisioned only against exactly %s", cfg.Endpoint, v.Version, RequiredVersion)
	}
	return nil
}

// MakePlan checks the version and compares the project with the model. It writes nothing.
func Compare(ctx context.Context, cfg Config, m schema.Model) (Diff, error) {
	p, err := newProvisioner(cfg, m)
	if err != nil {
		return Diff{}, err
	}
	if err := CheckVersion(ctx, p.cfg); err != nil {
		return Diff{}, err
	}
	return p.plan(ctx)
}

// Apply checks the version, plans, refuses drift, then creates what is missing and waits
// for it to become available. Re-running it against a matching project changes nothing.
func Apply(ctx context.Context, cfg Config, m schema.Model) (Diff, error) {
	p, err := newProvisioner(cfg, m)
	if err != nil {
		return Diff{}, err
	}
	if err := CheckVersion(ctx, p.cfg); err != nil {
		return Diff{}, err
	}
	plan, err := p.plan(ctx)
	if err != nil {
		return plan, err
	}
	if len(plan.Drift) > 0 {
		return plan, fmt.Errorf("%w: %s (nothing was changed; reconcile it by hand)", ErrDrift, plan.Drift[0])
	}
	if err := p.apply(ctx); err != nil {
		return plan, err
	}
	return plan, nil
}

func describe(err error) error {
	var ae *client.AppwriteError
	if errors.As(err, &ae) {
		var body struct{ Type, Message string }
		_ = json.Unmarshal([]byte(ae.GetResponse()), &body)
		if body.Type == "general_unauthorized_scope" {
			return fmt.Errorf("the API key is missing a scope: %s", body.Message)
		}
		return fmt.Errorf("appwrite %d %s: %s", ae.GetStatusCode(), body.Type, body.Message)
	}
	return fmt.Errorf("appwrite unreachable: %w", err)
}

func isNotFound(err error) bool {
	var ae *client.AppwriteError
	return errors.As(err, &ae) && ae.GetStatusCode() == 404
}

func (p *provisioner) plan(ctx context.Context) (Diff, error) {
	var plan Diff
	m := p.model
	if _, err := p.db.Get(m.DatabaseID); err != nil {
		if !isNotFound(err) {
			return plan, describe(err)
		}
		plan.Actions = append(plan.Actions, Action{"database", m.DatabaseID, m.DatabaseName})
		for _, c := range m.Collections {
			plan.Actions = append(plan.Actions, collectionActions(c)...)
		}
	} else {
		for _, c := range m.Collections {
			if err := ctx.Err(); err != nil {
				return plan, err
			}
			got, err := p.db.GetCollection(m.DatabaseID, c.ID)
			if isNotFound(err) {
				plan.Actions = append(plan.Actions, collectionActions(c)...)
				continue
			}
			if err != nil {
				return plan, describe(err)
			}
			compareCollection(&plan, c, got)
		}
	}
	for _, b := range m.Buckets {
		got, err := p.st.GetBucket(b.ID)
		if isNotFound(err) {
			plan.Actions = append(plan.Actions, Action{"bucket", b.ID, fmt.Sprintf("max %d bytes, fileSecurity, encryption=%v", b.MaximumFileSize, b.Encryption)})
			continue
		}
		if err != nil {
			return plan, describe(err)
		}
		compareBucket(&plan, b, got)
	}
	return plan, nil
}

func collectionActions(c schema.Collection) []Action {
	out := []Action{{"collection", c.ID, fmt.Sprintf("documentSecurity=%v", c.DocumentSecurity)}}
	for _, a := range c.Attributes {
		out = append(out, Action{"attribute", c.ID + "." + a.Key, attrSummary(a)})
	}
	for _, i := range c.Indexes {
		out = append(out, Action{"index", c.ID + "." + i.Key, fmt.Sprintf("%s(%s)", i.Type, strings.Join(i.Attributes, ", "))})
	}
	return out
}

func attrSummary(a schema.Attribute) string {
	s := string(a.Type)
	if a.Type == schema.TypeString {
		s += fmt.Sprintf("(%d)", a.Size)
	}
	if a.Type == schema.TypeEnum {
		s += "(" + strings.Join(a.Elements, "|") + ")"
	}
	if a.Required {
		s += " required"
	}
	if a.Array {
		s += " array"
	}
	return s
}

// served is how Appwrite reports an attribute back: enum → string/enum, float → double.
func served(a schema.Attribute) (typ, format string) {
	switch a.Type {
	case schema.TypeEnum:
		return "string", "enum"
	case schema.TypeFloat:
		return "double", ""
	case schema.TypeDatetime:
		return "datetime", "datetime"
	}
	return string(a.Type), ""
}

func compareCollection(plan *Diff, c schema.Collection, got *models.Collection) {
	if !sameSet(c.Permissions, got.Permissions) {
		plan.Drift = append(plan.Drift, Drift{c.ID, "permissions", fmt.Sprint(orEmpty(c.Permissions)), fmt.Sprint(got.Permissions)})
	}
	if got.DocumentSecurity != c.DocumentSecurity {
		plan.Drift = append(plan.Drift, Drift{c.ID, "documentSecurity", fmt.Sprint(c.DocumentSecurity), fmt.Sprint(got.DocumentSecurity)})
	}
	existing := map[string]map[string]any{}
	for _, a := range got.Attributes {
		if k, _ := a["key"].(string); k != "" {
			existing[k] = a
		}
	}
	for _, a := range c.Attributes {
		ga, ok := existing[a.Key]
		if !ok {
			plan.Actions = append(plan.Actions, Action{"attribute", c.ID + "." + a.Key, attrSummary(a)})
			continue
		}
		target := c.ID + "." + a.Key
		typ, format := served(a)
		check := func(field string, want, got any) {
			if fmt.Sprint(want) != fmt.Sprint(got) {
				plan.Drift = append(plan.Drift, Drift{target, field, fmt.Sprint(want), fmt.Sprint(got)})
			}
		}
		gotFormat, _ := ga["format"].(string)
		if typ == "datetime" && gotFormat == "" {
			gotFormat = "datetime"
		}
		check("type", typ, ga["type"])
		check("format", format, gotFormat)
		check("required", a.Required, ga["required"])
		check("array", a.Array, ga["array"])
		if st, _ := ga["status"].(string); st == "failed" || st == "stuck" {
			plan.Drift = append(plan.Drift, Drift{target, "status", "available", st})
		}
		switch a.Type {
		case schema.TypeString:
			check("size", a.Size, num(ga["size"]))
		case schema.TypeEnum:
			check("elements", strings.Join(a.Elements, ","), strings.Join(strs(ga["elements"]), ","))
		case schema.TypeInteger:
			lo, hi := int64(math.MinInt64), int64(math.MaxInt64)
			if a.Min != nil {
				lo = *a.Min
			}
			if a.Max != nil {
				hi = *a.Max
			}
			check("min", lo, num(ga["min"]))
			check("max", hi, num(ga["max"]))
		}
		if a.Default != nil {
			check("default", a.Default, ga["default"])
		}
	}
	existingIdx := map[string]models.Index{}
	for _, i := range got.Indexes {
		existingIdx[i.Key] = i
	}
	for _, i := range c.Indexes {
		gi, ok := existingIdx[i.Key]
		target := c.ID + "." + i.Key
		if !ok {
			plan.Actions = append(plan.Actions, Action{"index", target, fmt.Sprintf("%s(%s)", i.Type, strings.Join(i.Attributes, ", "))})
			continue
		}
		if gi.Type != string(i.Type) {
			plan.Drift = append(plan.Drift, Drift{target, "type", string(i.Type), gi.Type})
		}
		if !slices.Equal(i.Attributes, gi.Attributes) {
			plan.Drift = append(plan.Drift, Drift{target, "attributes", strings.Join(i.Attributes, ","), strings.Join(gi.Attributes, ",")})
		}
		if len(i.Orders) > 0 && !slices.Equal(i.Orders, gi.Orders) {
			plan.Drift = append(plan.Drift, Drift{target, "orders", strings.Join(i.Orders, ","), strings.Join(gi.Orders, ",")})
		}
		if gi.Status == "failed" || gi.Status == "stuck" {
			plan.Drift = append(plan.Drift, Drift{target, "status", "available", gi.Status})
		}
	}
}

func compareBucket(plan *Diff, b schema.Bucket, got *models.Bucket) {
	check := func(field string, want, have any) {
		if fmt.Sprint(want) != fmt.Sprint(have) {
			plan.Drift = append(plan.Drift, Drift{"bucket " + b.ID, field, fmt.Sprint(want), fmt.Sprint(have)})
		}
	}
	if !sameSet(b.Permissions, got.Permissions) {
		check("permissions", orEmpty(b.Permissions), got.Permissions)
	}
	check("fileSecurity", b.FileSecurity, got.FileSecurity)
	check("enabled", b.Enabled, got.Enabled)
	check("maximumFileSize", b.MaximumFileSize, got.MaximumFileSize)
	check("encryption", b.Encryption, got.Encryption)
	check("compression", b.Compression, got.Compression)
	if !sameSet(b.AllowedFileExtensions, got.AllowedFileExtensions) {
		check("allowedFileExtensions", orEmpty(b.AllowedFileExtensions), got.AllowedFileExtensions)
	}
}

func orEmpty(xs []string) []string {
	if xs == nil {
		return []string{}
	}
	return xs
}

func sameSet(a, b []string) bool {
	a2, b2 := slices.Clone(a), slices.Clone(b)
	slices.Sort(a2)
	slices.Sort(b2)
	return slices.Equal(a2, b2)
}

func num(v any) string {
	switch x := v.(type) {
	case float64:
		// JSON numbers arrive as float64; ±2^63 are PHP_INT_MIN/MAX, the server defaults.
		if x <= math.MinInt64 {
			return fmt.Sprint(int64(math.MinInt64))
		}
		if x >= math.MaxInt64 {
			return fmt.Sprint(int64(math.MaxInt64))
		}
		if x == math.Trunc(x) && math.Abs(x) < 1<<63 {
			return fmt.Sprint(int64(x))
		}
		return fmt.Sprint(x)
	case json.Number:
		return x.String()
	}
	return fmt.Sprint(v)
}

func strs(v any) []string {
	arr, _ := v.([]any)
	out := []string{}
	for _, e := range arr {
		if s, ok := e.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
