package appwritetest

import (
	"net/http/httptest"
	"testing"
	"time"
)

// TestServer is an emulator on a loopback port, for tests.
type TestServer struct {
	*Server
	URL string // endpoint including /v1
	// Project is the project id; AdminKey holds every scope the project uses.
	Project  string
	AdminKey string
}

// AllScopes are the scopes the admin test key holds.
var AllScopes = []string{
	"users.read", "users.write", "databases.read", "databases.write", "collections.read",
	"collections.write", "documents.read", "documents.write", "buckets.read", "buckets.write",
	"files.read", "files.write",
}

// NewTestServer starts an emulator with an all-scopes key and stops it on cleanup.
// opts.Keys adds more key secrets with their scopes. When opts.Engine is empty the engine
// comes from $PA_APPWRITE_ENGINE (EngineEnv), so a whole suite can run on one engine.
func NewTestServer(t testing.TB, opts Options) *TestServer {
	t.Helper()
	if opts.Engine == "" {
		e, err := EngineFromEnv()
		if err != nil {
			t.Fatalf("appwritetest: %v", err)
		}
		opts.Engine = e
	}
	if opts.ProjectID == "" {
		opts.ProjectID = "testproject"
	}
	if opts.ProcessingDelay == 0 {
		opts.ProcessingDelay = 20 * time.Millisecond
	}
	keys := map[string][]string{"admin-key-0123456789abcdef": AllScopes}
	for k, v := range opts.Keys {
		keys[k] = v
	}
	opts.Keys = keys
	s, err := New(opts)
	if err != nil {
		t.Fatalf("appwritetest: %v", err)
	}
	hs := httptest.NewServer(s)
	t.Cleanup(func() {
		hs.Close()
		_ = s.Close()
	})
	return &TestServer{Server: s, URL: hs.URL + "/v1", Project: opts.ProjectID, AdminKey: "admin-key-0123456789abcdef"}
}
