package apptools

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/url"
	"regexp"
	"strings"
	"time"
	"unicode/utf8"

	"privateassistant/queue"

	"github.com/google/jsonschema-go/jsonschema"
	"github.com/redis/go-redis/v9"
)

// Tool is a host app's tool as declared with its key: the model calls it by Name with
// arguments that Schema accepts; the agent POSTs each call, signed, to CallbackURL.
type Tool struct {
	App         string          `json:"app"`
	Name        string          `json:"name"`
	Description string          `json:"description"`
	Schema      json.RawMessage `json:"schema"` // a JSON Schema (draft 2020-12 or 07) of an object
	CallbackURL string          `json:"callbackUrl"`
	DeclaredAt  string          `json:"declaredAt,omitempty"`
}

// Limits of a declaration.
const (
	MaxTools       = 32
	MaxDescription = 1024
	MaxSchema      = 16 << 10
)

var nameRe = regexp.MustCompile(`^[a-z][a-z0-9_]{0,47}$`)

// Errors of a declaration (the API answers 400 with the message).
var (
	ErrInvalidTool = errors.New("apptools: invalid tool")
	// ErrNotAllowed: the callback URL is not on the admin's allow-list.
	ErrNotAllowed = errors.New("apptools: callback URL not on the allow-list")
	// ErrUnknownTool: the app declared no tool of that name.
	ErrUnknownTool = errors.New("apptools: no such tool")
)

// AllowList is the admin's list of callback URL prefixes ("https://home.example.com/pa/").
// A URL is allowed when its scheme, host and port equal an entry's and its path starts with
// the entry's path at a segment boundary. No user info, no fragment.
type AllowList []string

// ParseAllowList reads a comma- or space-separated list, refusing an entry that is not an
// absolute http(s) URL.
func ParseAllowList(s string) (AllowList, error) {
	var out AllowList
	for _, e := range strings.FieldsFunc(s, func(r rune) bool { return r == ',' || r == ' ' || r == '\n' }) {
		u, err := url.Parse(e)
		if err != nil || (u.Scheme != "https" && u.Scheme != "http") || u.Host == "" || u.User != nil {
			return nil, fmt.Errorf("callback allow-list entry %q: an absolute http(s) URL prefix", e)
		}
		out = append(out, e)
	}
	return out, nil
}

func hostPort(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = map[string]string{"http": "80", "https": "443"}[u.Scheme]
	}
	return net.JoinHostPort(strings.ToLower(u.Hostname()), port)
}

// Allows reports whether raw is under an entry.
func (a AllowList) Allows(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || u.User != nil || u.Fragment != "" || u.Host == "" || (u.Scheme != "https" && u.Scheme != "http") {
		return false
	}
	if strings.Contains(u.Path, "/../") || strings.HasSuffix(u.Path, "/..") || strings.Contains(u.EscapedPath(), "%2e") || strings.Contains(u.EscapedPath(), "%2E") {
		return false
	}
	for _, e := range a {
		p, err := url.Parse(e)
		if err != nil || p.Scheme != u.Scheme || hostPort(p) != hostPort(u) {
			continue
		}
		prefix := p.Path
		if prefix == "" || prefix == "/" || u.Path == prefix ||
			strings.HasPrefix(u.Path, strings.TrimSuffix(prefix, "/")+"/") {
			return true
		}
	}
	return false
}

// Validate checks a declaration: its name, description, an object schema that resolves
// without fetching anything, and a callback URL on the allow-list.
func (t *Tool) Validate(allow AllowList) error {
	switch {
	case !nameRe.MatchString(t.Name):
		return fmt.Errorf("%w: name %q must be 1-48 of [a-z0-9_], starting with a letter", ErrInvalidTool, t.Name)
	case strings.TrimSpace(t.Description) == "" || utf8.RuneCountInString(t.Description) > MaxDescription:
		return fmt.Errorf("%w: %s: a description of 1-%d characters is required (the model reads it)", ErrInvalidTool, t.Name, MaxDescription)
	case len(t.Schema) == 0 || len(t.Schema) > MaxSchema:
		return fmt.Errorf("%w: %s: a JSON schema of at most %d bytes is required", ErrInvalidTool, t.Name, MaxSchema)
	}
	if _, err := t.resolve(); err != nil {
		return fmt.Errorf("%w: %s: %v", ErrInvalidTool, t.Name, err)
	}
	if !allow.Allows(t.CallbackURL) {
		return fmt.Errorf("%w: %s: %q (an admin adds its prefix to PA_APP_CALLBACK_ALLOW)", ErrNotAllowed, t.Name, t.CallbackURL)
	}
	return nil
}

func (t *Tool) resolve() (*jsonschema.Resolved, error) {
	var s jsonschema.Schema
	if err := json.Unmarshal(t.Schema, &s); err != nil {
		return nil, fmt.Errorf("schema: %v", err)
	}
	if s.Type != "object" {
		return nil, errors.New(`schema: the arguments must be an object ("type": "object")`)
	}
	// No loader: a $ref outside the schema is refused, never fetched.
	rs, err := s.Resolve(nil)
	if err != nil {
		return nil, fmt.Errorf("schema: %v", err)
	}
	return rs, nil
}

// CheckArguments validates a call's arguments against the tool's schema.
func (t *Tool) CheckArguments(args json.RawMessage) error {
	rs, err := t.resolve()
	if err != nil {
		return err
	}
	if len(args) == 0 {
		args = json.RawMessage("{}")
	}
	var v any
	if err := json.Unmarshal(args, &v); err != nil {
		return fmt.Errorf("arguments are not JSON: %v", err)
	}
	if err := rs.Validate(v); err != nil {
		return fmt.Errorf("arguments do not match %s's schema: %v", t.Name, err)
	}
	return nil
}

// Registry keeps the apps' tools and signing secrets in Redis:
// pa:apptools:{app} (hash: name → Tool JSON) and pa:apptools:{app}:secret. The function
// host declares (with the app's key), the agent reads and signs.
type Registry struct {
	RDB redis.UniversalClient
	Now func() time.Time
}

func toolsKey(app string) string  { return queue.AppToolsKey(app) }
func secretKey(app string) string { return queue.AppToolsSecretKey(app) }

// Declare replaces the app's tools with tools (each validated against allow first: one bad
// tool declares nothing). It returns the app's signing secret when this call created it
// (the app stores it; later calls return ""), so the secret is shown once.
func (r *Registry) Declare(ctx context.Context, app string, tools []Tool, allow AllowList) (newSecret string, err error) {
	if app == "" {
		return "", fmt.Errorf("%w: no app", ErrInvalidTool)
	}
	if len(tools) > MaxTools {
		return "", fmt.Errorf("%w: at most %d tools", ErrInvalidTool, MaxTools)
	}
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	fields := map[string]any{}
	for i := range tools {
		t := tools[i]
		t.App = app
		if err := t.Validate(allow); err != nil {
			return "", err
		}
		if _, dup := fields[t.Name]; dup {
			return "", fmt.Errorf("%w: %s declared twice", ErrInvalidTool, t.Name)
		}
		t.DeclaredAt = now().UTC().Format(time.RFC3339)
		b, _ := json.Marshal(t)
		fields[t.Name] = string(b)
	}
	secret := newSecretValue()
	var created *redis.BoolCmd
	_, err = r.RDB.TxPipelined(ctx, func(p redis.Pipeliner) error {
		p.Del(ctx, toolsKey(app))
		if len(fields) > 0 {
			p.HSet(ctx, toolsKey(app), fields)
		}
		created = p.SetNX(ctx, secretKey(app), secret, 0)
		return nil
	})
	if err != nil {
		return "", fmt.Errorf("store the app's tools: %w", err)
	}
	if created.Val() {
		return secret, nil
	}
	return "", nil
}

// RotateSecret replaces the app's signing secret and returns the new one.
func (r *Registry) RotateSecret(ctx context.Context, app string) (string, error) {
	s := newSecretValue()
	if err := r.RDB.Set(ctx, secretKey(app), s, 0).Err(); err != nil {
		return "", err
	}
	return s, nil
}

func newSecretValue() string {
	var b [32]byte
	_, _ = rand.Read(b[:])
	return "pacb_" + hex.EncodeToString(b[:])
}

// Secret is the app's signing secret.
func (r *Registry) Secret(ctx context.Context, app string) ([]byte, error) {
	s, err := r.RDB.Get(ctx, secretKey(app)).Result()
	if errors.Is(err, redis.Nil) {
		return nil, fmt.Errorf("%w: the app has no signing secret", ErrUnknownTool)
	}
	return []byte(s), err
}

// Get returns the app's tool name.
func (r *Registry) Get(ctx context.Context, app, name string) (Tool, error) {
	s, err := r.RDB.HGet(ctx, toolsKey(app), name).Result()
	if errors.Is(err, redis.Nil) {
		return Tool{}, fmt.Errorf("%w: %q", ErrUnknownTool, name)
	}
	if err != nil {
		return Tool{}, err
	}
	var t Tool
	if err := json.Unmarshal([]byte(s), &t); err != nil {
		return Tool{}, err
	}
	return t, nil
}

// List returns the app's tools, sorted by name.
func (r *Registry) List(ctx context.Context, app string) ([]Tool, error) {
	m, err := r.RDB.HGetAll(ctx, toolsKey(app)).Result()
	if err != nil {
		return nil, err
	}
	out := make([]Tool, 0, len(m))
	for _, s := range m {
		var t Tool
		if json.Unmarshal([]byte(s), &t) == nil {
			out = append(out, t)
		}
	}
	sortTools(out)
	return out, nil
}
