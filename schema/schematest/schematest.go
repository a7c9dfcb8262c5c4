// Package schematest gives tests an Appwrite emulator provisioned with the project's data
// model by the real provisioning code, and a Store over it using the official SDK.
package schematest

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/appwrite/sdk-for-go/appwrite"
	"github.com/appwrite/sdk-for-go/client"

	"privateassistant/schema"
	"privateassistant/schema/appwritetest"
	"privateassistant/schema/provision"
)

// RuntimeScopes are what the functions' and agent's server key holds (least privilege).
var RuntimeScopes = []string{"documents.read", "documents.write", "files.read", "files.write", "users.read"}

// ProvisionScopes are what the bootstrap key holds.
var ProvisionScopes = []string{"databases.read", "databases.write", "collections.read", "collections.write", "buckets.read", "buckets.write"}

// Env is a provisioned emulator.
type Env struct {
	TS         *appwritetest.TestServer
	Model      schema.Model
	RuntimeKey string
	// Client is an SDK client with the runtime key.
	Client client.Client
	Store  *schema.Store
}

// New starts an emulator and provisions the model into it. extraKeys adds API keys
// (secret → scopes), e.g. one per function with exactly that function's scopes.
func New(t testing.TB, extraKeys ...map[string][]string) *Env {
	t.Helper()
	return NewOn(t, "", extraKeys...)
}

// NewOn is New on one engine profile ("": PA_APPWRITE_ENGINE, else the emulator's default),
// for the tests that must hold on every engine.
func NewOn(t testing.TB, engine appwritetest.Engine, extraKeys ...map[string][]string) *Env {
	t.Helper()
	return NewWith(t, appwritetest.Options{Engine: engine}, extraKeys...)
}

// NewWith is New with emulator options (engine, clock, rate limits); Keys and a zero
// ProcessingDelay are filled in.
func NewWith(t testing.TB, opts appwritetest.Options, extraKeys ...map[string][]string) *Env {
	t.Helper()
	const runtimeKey = "runtime-key-0123456789abcdef"
	const bootstrapKey = "bootstrap-key-0123456789abcdef"
	keys := map[string][]string{runtimeKey: RuntimeScopes, bootstrapKey: ProvisionScopes}
	for _, m := range extraKeys {
		for k, v := range m {
			keys[k] = v
		}
	}
	for k, v := range opts.Keys {
		keys[k] = v
	}
	opts.Keys = keys
	if opts.ProcessingDelay == 0 {
		opts.ProcessingDelay = time.Millisecond
	}
	ts := appwritetest.NewTestServer(t, opts)
	m := schema.Definition("")
	_, err := provision.Apply(context.Background(), provision.Config{
		Endpoint: ts.URL, ProjectID: ts.Project, APIKey: bootstrapKey,
		WaitTimeout: 10 * time.Second, PollInterval: 2 * time.Millisecond,
	}, m)
	if err != nil {
		t.Fatalf("schematest: provision: %v", err)
	}
	c := appwrite.NewClient(appwrite.WithEndpoint(ts.URL), appwrite.WithProject(ts.Project), appwrite.WithKey(runtimeKey))
	return &Env{TS: ts, Model: m, RuntimeKey: runtimeKey, Client: c, Store: schema.NewStore(c, m)}
}

// OneMillisecond is New on engine e with a clock that stops once the model is provisioned:
// every later write has the same $updatedAt, as two writes in one millisecond have on a
// real engine, so Appwrite's X-Appwrite-Timestamp check refuses none of them.
func OneMillisecond(t testing.TB, e appwritetest.Engine) *Env {
	t.Helper()
	var frozen atomic.Bool
	var at time.Time
	env := NewWith(t, appwritetest.Options{Engine: e, Now: func() time.Time {
		if frozen.Load() {
			return at
		}
		return time.Now()
	}})
	at = time.Now().UTC().Add(time.Second).Truncate(time.Millisecond)
	frozen.Store(true)
	return env
}

// SignUp creates a user through the Account API and returns its id and a fresh JWT.
func (e *Env) SignUp(t testing.TB, email, password string) (userID, jwt string) {
	t.Helper()
	c := appwrite.NewClient(appwrite.WithEndpoint(e.TS.URL), appwrite.WithProject(e.TS.Project))
	acc := appwrite.NewAccount(c)
	u, err := acc.Create("unique()", email, password)
	if err != nil {
		t.Fatalf("schematest: sign up: %v", err)
	}
	if _, err := acc.CreateEmailPasswordSession(email, password); err != nil {
		t.Fatalf("schematest: session: %v", err)
	}
	j, err := acc.CreateJWT()
	if err != nil {
		t.Fatalf("schematest: jwt: %v", err)
	}
	return u.Id, j.Jwt
}

// CountingStore returns a Store whose SDK calls are counted (by method) — to prove a
// path makes no Appwrite reads.
func (e *Env) CountingStore() (*schema.Store, *Counter) {
	cnt := &Counter{}
	c := appwrite.NewClient(appwrite.WithEndpoint(e.TS.URL), appwrite.WithProject(e.TS.Project), appwrite.WithKey(e.RuntimeKey))
	c.Client = &http.Client{Timeout: 10 * time.Second, Transport: cnt}
	return schema.NewStore(c, e.Model), cnt
}

// Counter is an http.RoundTripper that counts requests by method.
type Counter struct {
	mu     sync.Mutex
	counts map[string]int
}

func (c *Counter) RoundTrip(r *http.Request) (*http.Response, error) {
	c.mu.Lock()
	if c.counts == nil {
		c.counts = map[string]int{}
	}
	c.counts[r.Method]++
	c.mu.Unlock()
	return http.DefaultTransport.RoundTrip(r)
}

// Reads is the number of GET requests; Writes every other method.
func (c *Counter) Reads() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.counts["GET"]
}

func (c *Counter) Writes() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for m, k := range c.counts {
		if m != "GET" {
			n += k
		}
	}
	return n
}

// Reset zeroes the counts.
func (c *Counter) Reset() {
	c.mu.Lock()
	c.counts = nil
	c.mu.Unlock()
}

// SetRunStatus writes a run's status (and any other fields) as a test fixture, skipping
// schema/runstate's transition check and version claim: the patch carries the record's
// next version, which is what schema.Table refuses a status patch without
// (schema.ErrStatusOutsideRunstate). For setting up states, never for the code under test.
func SetRunStatus(t testing.TB, st *schema.Store, id string, status schema.RunStatus, fields map[string]any) *schema.Run {
	t.Helper()
	ctx := context.Background()
	runs := schema.For[schema.Run](st, schema.CollRuns)
	cur, err := runs.Get(ctx, id)
	if err != nil {
		t.Fatalf("SetRunStatus %s: %v", id, err)
	}
	patch := map[string]any{}
	for k, v := range fields {
		patch[k] = v
	}
	patch["status"] = string(status)
	v := int64(1)
	if cur.Version != nil {
		v = *cur.Version + 1
	}
	patch["version"] = v
	got, err := runs.Update(ctx, id, patch)
	if err != nil {
		t.Fatalf("SetRunStatus %s: %v", id, err)
	}
	return got
}
